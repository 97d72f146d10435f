"""Translate lines of text: tokenize, sort by length, batch, beam search, detokenize, restore order.

Sources are encoded as in training (tokens + EOS). Empty lines translate to empty lines. A
source longer than the model's positional table (``max_len`` tokens with its EOS) is cut to its
first ``max_len − 1`` tokens, with a warning naming the line (``strict=True``: an error instead,
before anything is decoded), so every line gets a translation. The maximum output length is
``a·|src| + b`` ([V17] §6.1: input length + 50), capped by the model's positional table (BOS and
the first ``max_len − 1`` output tokens are fed).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Sequence

import torch
from torch import Tensor, nn

from fullrank import fast
from fullrank.data.tokenizers import Tokenizer
from fullrank.errors import ConfigError, DataError
from fullrank.inference.decoders import Decoder, EnsembleDecoder, compiled_decode
from fullrank.inference.search import beam_search, greedy_search, max_output_len
from fullrank.output import progress as progress_bar

log = logging.getLogger(__name__)

# wraps a batch's decoder: (decoder, indices of its rows' lines, (B,) output-length limits)
Constrain = Callable[[Decoder, Sequence[int], Tensor], Decoder]


def too_long(encoded: Sequence[Sequence[int]], max_len: int) -> list[tuple[int, int]]:
    """The sources too long for a model with ``max_len`` positions, as ``(index, tokens)`` (their
    tokens counted with the EOS that :func:`translate` appends)."""
    return [(i, len(ids) + 1) for i, ids in enumerate(encoded) if len(ids) + 1 > max_len]


def first_too_long(encoded: Sequence[Sequence[int]], max_len: int) -> tuple[int, int] | None:
    """The first of :func:`too_long`, or ``None``."""
    return next(iter(too_long(encoded, max_len)), None)


# bounds beyond which the length penalty ((5 + length) / 6)^alpha and the output length
# a·|src| + b no longer fit a float or an integer
MAX_ALPHA, MAX_A = 10.0, 1000.0


def check_settings(
    *,
    beam: int,
    n_best: int = 1,
    batch_size: int = 1,
    a: float = 1.0,
    b: int = 50,
    workers: int = 1,
    alpha: float = 0.6,
    name: Callable[[str], str] = str,
) -> None:
    """Raise :class:`ConfigError` unless ``beam ≥ 1``, ``1 ≤ n_best ≤ beam``, ``batch_size ≥ 1``,
    ``0 ≤ a ≤ MAX_A``, ``b ≥ 1`` (so that every output may have a token), ``workers ≥ 1`` and
    ``|alpha| ≤ MAX_ALPHA`` (NaN fails every bound); ``name`` spells a setting for the message
    (e.g. ``"decode.{}".format`` for a config)."""
    length = "outputs may have a·|src| + b tokens"
    checks = (
        (beam >= 1, f"{name('beam')} must be >= 1 (1 = greedy search), got {beam}"),
        (
            1 <= n_best <= beam,
            f"{name('n_best')} must be between 1 and {name('beam')} ({beam}), got {n_best}",
        ),
        (batch_size >= 1, f"{name('batch_size')} must be >= 1, got {batch_size}"),
        (workers >= 1, f"{name('workers')} must be >= 1 (batches decoded at once), got {workers}"),
        (0 <= a <= MAX_A, f"{name('a')} must be a number from 0 to {MAX_A:g} ({length}), got {a}"),
        (b >= 1, f"{name('b')} must be >= 1 ({length}), got {b}"),
        (
            abs(alpha) <= MAX_ALPHA,
            f"{name('alpha')} must be a number from -{MAX_ALPHA:g} to {MAX_ALPHA:g} (the length "
            f"penalty's exponent; [V17]: 0.6), got {alpha}",
        ),
    )
    for ok, message in checks:
        if not ok:
            raise ConfigError(message)


@torch.inference_mode()
def translate(
    model: nn.Module | Sequence[nn.Module],
    tokenizer: Tokenizer,
    lines: Sequence[str],
    *,
    beam: int = 4,
    alpha: float = 0.6,
    a: float = 1.0,
    b: int = 50,
    batch_size: int = 64,
    n_best: int = 1,
    progress: bool | str = False,
    compile: bool = False,
    workers: int = 1,
    processes: bool = False,
    strict: bool = False,
    target: Tokenizer | None = None,
    constrain: Constrain | None = None,
) -> list[list[str]]:
    """Translate ``lines``; returns, per line, its ``n_best`` translations (best first).

    Args:
        model: an encoder-decoder in eval mode (duck-typed: ``encode``/``decode_step``…, and a
            ``config`` with ``max_len``), or several sharing ``tokenizer``: an ensemble, which
            decodes with the mean of their next-token probabilities (:class:`EnsembleDecoder`)
            up to the smallest ``max_len`` among them.
        tokenizer: the shared source/target tokenizer saved with the checkpoint (the source
            tokenizer when ``target`` is given).
        lines: source sentences, one per entry.
        beam: beam size ``k`` (1 = greedy search).
        alpha: GNMT length-penalty exponent.
        a, b: maximum output length ``a·|src| + b`` tokens.
        batch_size: sentences per batch (sorted by length, so padding is small).
        n_best: translations per line (``≤ beam``).
        progress: show progress over batches (:func:`fullrank.output.progress`), labelled
            ``translate``, or with this label.
        compile: run the decoder steps ``torch.compile``d (:func:`compiled_decode`): about a
            minute of compiling first on a CPU, then faster steps; the same translations.
        workers: batches decoded at once on a CPU, each in its own thread with an equal share
            of PyTorch's threads, never more workers than threads
            (:func:`fullrank.fast.map_batches`); on a GPU one batch at a time whatever this
            says. With several workers the lines are shared out in a multiple of that many
            batches of (nearly) equal size, at most ``batch_size`` each
            (:func:`fullrank.fast.plan_batches`): 17 lines are batches of 9 and 8 for 2
            workers; lines that fit one batch stay one. Each batch decodes exactly as it would
            alone: the same translations for any number of workers.
        processes: with ``workers > 1``, workers are processes forked from this one instead of
            threads (Linux; threads elsewhere): faster, as the Python between operations then
            runs in parallel too; call it from a program that can fork (no CUDA in use).
        strict: a source longer than the model reads (``max_len`` tokens with its EOS) is a
            :class:`DataError`, raised before anything is decoded; otherwise (the default) it
            is cut to the first ``max_len − 1`` tokens and a warning naming its line and lengths
            is logged (``logging``, to stderr unless configured), one per such line.
        target: the target side's own tokenizer (its BOS, EOS and vocabulary), for a model
            trained with separate vocabularies; ``None``: ``tokenizer`` serves both sides.
        constrain: wraps each batch's decoder before the search, e.g. to forbid tokens:
            ``constrain(decoder, batch, max_len)`` with ``batch`` the indices into ``lines``
            of the decoder's rows and ``max_len (B,)`` their output-length limits.

    Decoding runs on the speed engine: inside ``fast.cpu(model, decoding=True)`` (oneDNN's
    float32 products where they stay exact, packed or column-major weights; all restored on
    return), with :class:`fullrank.fast.BeamDecoder` and the engine's top-k.
    """
    check_settings(beam=beam, n_best=n_best, batch_size=batch_size, a=a, b=b, workers=workers)
    models = [model] if isinstance(model, nn.Module) else list(model)
    if not models:
        raise ConfigError("translate needs a model (or several, for an ensemble)")
    if workers > 1 and compile:
        raise ConfigError(
            "compiled decoding runs one batch at a time; use workers=1 with "
            "compile (--workers 1 with --compile)"
        )
    if next(models[0].parameters()).device.type != "cpu":
        workers = 1  # CPU threads share out a CPU; a GPU takes one (larger) batch at a time
    with contextlib.ExitStack() as stack:
        for m in models:
            stack.enter_context(fast.cpu(m, decoding=True))
        return _translate(
            models,
            tokenizer,
            target or tokenizer,
            lines,
            beam=beam,
            alpha=alpha,
            a=a,
            b=b,
            batch_size=batch_size,
            n_best=n_best,
            progress=progress,
            compile=compile,
            workers=workers,
            processes=processes,
            strict=strict,
            constrain=constrain,
        )


def _translate(
    models: list[nn.Module],
    tokenizer: Tokenizer,
    target: Tokenizer,
    lines: Sequence[str],
    *,
    beam: int,
    alpha: float,
    a: float,
    b: int,
    batch_size: int,
    n_best: int,
    progress: bool | str,
    compile: bool,
    workers: int,
    processes: bool,
    strict: bool,
    constrain: Constrain | None,
) -> list[list[str]]:
    max_len: int = min(getattr(m, "config").max_len for m in models)  # each model's own
    device = next(models[0].parameters()).device
    encoded = tokenizer.encode_batch([line.strip() for line in lines])
    results: list[list[str]] = [[""] * n_best for _ in lines]
    todo = [i for i, ids in enumerate(encoded) if ids]
    long = too_long(encoded, max_len)
    if long and strict:
        more = f" (and {len(long) - 1} more lines)" if len(long) > 1 else ""
        raise DataError(
            f"line {long[0][0] + 1}: {long[0][1]} source tokens exceed the model's "
            f"max_len={max_len}{more}; split the line"
        )
    for i, n in long:
        encoded[i] = encoded[i][: max_len - 1]
        log.warning(
            f"line {i + 1}: {n} source tokens (with EOS), more than the model's "
            f"max_len={max_len}: only its first {max_len - 1} are translated"
        )
    todo.sort(key=lambda i: -len(encoded[i]))
    decode = [compiled_decode(m) if compile else None for m in models]  # type: ignore[arg-type]  # encoder-decoders
    batches = fast.plan_batches(todo, batch_size, workers)

    def run(batch: Sequence[int]) -> list[list[str]]:
        """The ``n_best`` translations of each line of ``batch`` (indices into ``lines``)."""
        seqs = [encoded[i] + [tokenizer.eos_id] for i in batch]
        width = max(len(s) for s in seqs)
        src = torch.full((len(seqs), width), tokenizer.pad_id, dtype=torch.long)
        for r, s in enumerate(seqs):
            src[r, : len(s)] = torch.tensor(s)
        src_mask = src != tokenizer.pad_id
        src, src_mask = src.to(device), src_mask.to(device)
        lengths = max_output_len([len(s) - 1 for s in seqs], a=a, b=b).clamp(max=max_len)
        members = [fast.BeamDecoder(m, src, src_mask, decode=f) for m, f in zip(models, decode)]
        decoder: Decoder = members[0] if len(members) == 1 else EnsembleDecoder(members)
        if constrain is not None:
            decoder = constrain(decoder, batch, lengths)
        if beam == 1:
            outs = greedy_search(
                decoder,
                batch_size=len(seqs),
                bos_id=target.bos_id,
                eos_id=target.eos_id,
                max_len=lengths,
                argmax=fast.argmax_rows,
            )
            return [[target.decode(ids)] * n_best for ids in outs]
        hyps = beam_search(
            decoder,
            batch_size=len(seqs),
            beam_size=beam,
            bos_id=target.bos_id,
            eos_id=target.eos_id,
            max_len=lengths,
            alpha=alpha,
            n_best=n_best,
            topk=fast.topk_rows,
        )
        return [[target.decode(h.tokens) for h in sentence] for sentence in hyps]

    label = progress if isinstance(progress, str) else "translate"
    bar = progress_bar(total=len(batches), desc=label, unit="batch", enabled=bool(progress))
    # the decoded batches lead the zip, so that their generator runs to its end (and tidies up)
    for translations, batch in zip(fast.map_batches(run, batches, workers, processes=processes), batches):
        for i, t in zip(batch, translations):
            results[i] = t
        bar.update(1)
    bar.close()
    return results
