"""The translation task ([V17] §5–6): shared BPE → token-bucketed batches → ``EncoderDecoder``
with label smoothing and the Noam schedule → beam search on the last checkpoint and on the
average of the last K → sacreBLEU, chrF and tokenized lowercased BLEU. The run itself is
:func:`fullrank.recipes.run.run`'s.

What parsing shares with translation — pairs in token-bucketed batches, the teacher-forced
validation, the models scored at the end — is here too (:func:`pair_setup`,
:func:`scored_models`).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from torch import nn

from fullrank.data.bpe_dropout import VARIANTS, BPEDropout
from fullrank.data.tokenizers import Tokenizer
from fullrank.data.translation import EncodedPairs, ParallelBatches, encode_pairs, read_parallel
from fullrank.errors import CheckpointError, ConfigError, DataError
from fullrank.evaluation.bleu import score
from fullrank.inference.translate import first_too_long, translate
from fullrank.models import ModelConfig
from fullrank.paths import write_text_atomic
from fullrank.recipes.config import MTData, MTDecode, MTExperiment, PairData
from fullrank.recipes.init import planned_config
from fullrank.recipes.recipe import Recipe, Run, RunReport, Setup, planned_tokenizer
from fullrank.training.averaging import average_checkpoints, last_checkpoints
from fullrank.training.checkpoints import load_checkpoint
from fullrank.training.tasks import Translation

Sampler = Callable[[int], tuple[list[np.ndarray], list[np.ndarray]]]
Validation = Callable[[nn.Module], dict[str, float]] | None


class TranslationRecipe(Recipe[MTExperiment]):
    """``task: mt``."""

    metrics = {
        "test_bleu": (("extra", "bleu", "test.last", "sacrebleu"), "test BLEU", False),
        "valid_bleu": (("extra", "bleu", "valid.last", "sacrebleu"), "validation BLEU", False),
        "valid_ppl": (("valid", "ppl"), "validation perplexity", True),
        "valid_loss": (("valid", "loss"), "validation loss (nats/token)", True),
    }

    def setup(self, run: Run[MTExperiment]) -> Setup:
        exp = run.exp
        data, cfg = exp.data, exp.train
        # evaluation-only sets scored at the end, read first: a missing or bad file fails at once
        extra = {
            name: read_parallel(*pair_files(data, prefix))
            for name, prefix in data.eval_sets.items()
            if name in exp.decode.splits
        }
        tok = run.tokenizer(lambda: pair_files(data, data.train))
        model_cfg = run.model_config(tok)
        train_raw, train_pairs = load_split(data, data.train, tok)
        valid_raw, valid_pairs = load_split(data, data.valid, tok) if data.valid else ([], None)
        test_raw = read_parallel(*pair_files(data, data.test)) if data.test else []
        self.scored = {"valid": valid_raw, "test": test_raw, **extra}
        max_len = model_cfg.max_len
        # a pair too long for the model fails now, not mid-training or at the final validation
        check_pair_lengths("train", train_pairs, max_len, data.max_sentence_len, lines_of(data, data.train))
        if valid_pairs is not None and data.valid:
            check_pair_lengths(
                "valid", valid_pairs, max_len, data.max_sentence_len, lines_of(data, data.valid)
            )
        for split in exp.decode.splits:  # a source too long fails now, not after training
            long = first_too_long(
                tok.encode_batch([s for s, _ in self.scored.get(split, [])]), model_cfg.max_len
            )
            if long is not None:
                raise DataError(
                    f"decode.splits: '{split}' line {long[0] + 1} has {long[1]} "
                    f"source tokens, more than model.max_len={model_cfg.max_len}; "
                    f"raise model.max_len or leave '{split}' out of decode.splits"
                )
        if data.bpe_dropout and data.max_sentence_len + 1 > max_len:
            raise ConfigError(
                f"data.bpe_dropout may segment a training sentence into up to "
                f"data.max_sentence_len={data.max_sentence_len} tokens, {data.max_sentence_len + 1} "
                f"positions with BOS/EOS, more than model.max_len={max_len}; lower "
                f"data.max_sentence_len to at most {max_len - 1}, or raise model.max_len"
            )
        self.dropped = train_pairs.n_dropped
        sampler, sides = None, None
        if data.bpe_dropout:
            kept = [train_raw[i] for i in train_pairs.kept]
            sides = [
                BPEDropout(
                    tok,
                    [pair[j] for pair in kept],
                    data.bpe_dropout,
                    seed=cfg.seed + j,
                    max_len=data.max_sentence_len,
                    standard=ids,
                )
                for j, ids in enumerate((train_pairs.src, train_pairs.tgt))
            ]

            def sampler(epoch: int) -> tuple[list[np.ndarray], list[np.ndarray]]:
                return sides[0].epoch(epoch), sides[1].epoch(epoch)

        setup, self.exact_valid = pair_setup(
            run,
            model_cfg,
            tok,
            train_pairs,
            valid_pairs,
            sampler=sampler,
            vocabulary=f"shared {tok.kind} vocabulary of {tok.vocab_size}",
        )
        batches = setup.batches
        assert isinstance(batches, ParallelBatches)
        line = (
            f"data: {len(train_pairs):,} training pairs ({train_pairs.n_dropped} longer "
            f"than {data.max_sentence_len} tokens dropped), {len(batches):,} batches of "
            f"≤{data.max_tokens} tokens per epoch"
            + (
                " with standard BPE"
                if sides is not None
                else f", padding {100 * batches.padding_ratio():.1f}%"
            )
        )
        if sides is not None:
            line += (
                f"\nBPE-dropout p={data.bpe_dropout:g}: {VARIANTS} segmentations drawn "
                f"per word ({sides[0].n_words:,} source, {sides[1].n_words:,} target "
                f"words); epoch 0 has {batches.n_tokens(0) / batches.n_tokens() - 1:+.1%}"
                f" tokens, {batches.epoch_length(0):,} batches, padding "
                f"{100 * batches.padding_ratio(0):.1f}%"
            )
        setup.data_line = line
        return setup

    def evaluate(self, run: Run[MTExperiment], setup: Setup, model: nn.Module, report: RunReport) -> None:
        exp = run.exp
        final_validation(run, self.exact_valid, model, report)
        report.extra["dropped_pairs"] = self.dropped
        report.extra["bleu"] = final_bleu(run, exp, model, setup.tokenizer, self.scored)

    def plan_model(
        self, exp: MTExperiment, out: Path, cache: dict[str, Any], base: ModelConfig | None
    ) -> tuple[ModelConfig, list[str]]:
        if base is not None or exp.model.get("vocab_size"):
            return planned_config(exp, exp.model.get("vocab_size", 0), base), []
        tok, overrides = planned_tokenizer(exp, lambda: pair_files(exp.data, exp.data.train), out, cache)
        return planned_config(exp, tok.vocab_size, None), overrides


def pair_files(data: MTData, prefix: str) -> list[Path]:
    """``[PREFIX.SRC_LANG, PREFIX.TGT_LANG]`` under ``data.root``."""
    return [data.path(f"{prefix}.{data.src_lang}"), data.path(f"{prefix}.{data.tgt_lang}")]


def lines_of(data: MTData, prefix: str) -> Callable[[int, int], str]:
    """``(i, side) →`` where pair ``i`` of the split ``prefix`` is: its file of that side (0:
    source, 1: target) and line."""
    return lambda i, side: f"{pair_files(data, prefix)[side]} line {i + 1}"


def load_split(data: MTData, prefix: str, tok: Tokenizer) -> tuple[list[tuple[str, str]], EncodedPairs]:
    pairs = read_parallel(*pair_files(data, prefix))
    return pairs, encode_pairs(pairs, tok, max_len=data.max_sentence_len)


# ------------------------------------------------------------ what parsing shares with it
def check_pair_lengths(
    split: str,
    pairs: EncodedPairs,
    max_len: int,
    max_sentence_len: int,
    where: Callable[[int, int], str],
    sides: tuple[str, str] = ("source sentence", "target sentence"),
) -> None:
    """Refuse in one line a pair of ``split`` (kept within ``data.max_sentence_len``) that
    training or the teacher-forced validation would feed the model in more positions than its
    ``max_len``: the source with its EOS, or the target with its BOS (the model's positional
    table has ``max_len`` rows). ``where(i, side)`` names the pair's line (``i``: its index in
    the split as read; ``side``: 0 source, 1 target); ``sides`` names what each side holds."""
    if max_sentence_len + 1 <= max_len:  # every kept pair fits
        return
    for i, pair in enumerate(zip(pairs.src, pairs.tgt)):
        for side, ids in enumerate(pair):
            if len(ids) + 1 > max_len:
                raise DataError(
                    f"data.{split}: {where(int(pairs.kept[i]), side)} has a {sides[side]} of "
                    f"{len(ids)} tokens, {len(ids) + 1} positions with its "
                    f"{'EOS' if side == 0 else 'BOS'}, more than model.max_len={max_len}; raise "
                    f"model.max_len, or lower data.max_sentence_len to at most {max_len - 1} to "
                    f"drop such pairs (or shorten them in the data)"
                )


def pair_setup(
    run: Run,
    model_cfg: ModelConfig,
    tok: Tokenizer,
    train_pairs: EncodedPairs,
    valid_pairs: EncodedPairs | None,
    *,
    vocabulary: str,
    sampler: Sampler | None = None,
    meta: dict[str, Any] | None = None,
    prepare: Callable[[nn.Module], nn.Module] | None = None,
) -> tuple[Setup, Validation]:
    """The :class:`Setup` of a sequence-to-sequence task: ``train_pairs`` in token-bucketed
    batches of ``data.max_tokens`` (new token ids each epoch from ``sampler``, when given), the
    label-smoothed loss ([V17] §5.4), the teacher-forced validation on ``valid_pairs`` (on at
    most ``train.eval_batches`` batches); and the exact validation over every validation pair,
    for the end (``None`` without ``valid_pairs``). ``tok`` frames both sides (pad, BOS, EOS);
    the data line is the caller's to set."""
    data: PairData = run.exp.data
    cfg = run.exp.train
    batches = ParallelBatches(
        train_pairs,
        max_tokens=data.max_tokens,
        seed=cfg.seed,
        world=run.dist.world,
        sampler=sampler,
        pad_id=tok.pad_id,
        bos_id=tok.bos_id,
        eos_id=tok.eos_id,
    )
    loss = Translation(tok.pad_id, cfg.label_smoothing)
    valid = (
        ParallelBatches(
            valid_pairs,
            max_tokens=data.max_tokens,
            shuffle=False,
            pad_id=tok.pad_id,
            bos_id=tok.bos_id,
            eos_id=tok.eos_id,
        )
        if valid_pairs is not None
        else None
    )

    def validation(limit: int | None) -> Validation:
        if valid is None:
            return None
        batches = valid

        def validate(m: nn.Module) -> dict[str, float]:
            return loss.evaluate(
                m, (batches.get(0, i) for i in range(len(batches))), run.dist.device, limit=limit
            )

        return validate

    setup = Setup(
        model_config=model_cfg,
        tokenizer=tok,
        batches=batches,
        loss=loss,
        data_line="",
        vocabulary=vocabulary,
        per_rank=data.max_tokens,
        unit="tokens at most",
        validate=validation(cfg.eval_batches),
        meta=meta or {},
        prepare=prepare or (lambda m: m),
    )
    return setup, validation(None)


def final_validation(run: Run, exact: Validation, model: nn.Module, report: RunReport) -> None:
    """The exact validation loss and perplexity over every validation pair (``exact`` of
    :func:`pair_setup`)."""
    if exact is None:
        return
    report.valid = exact(model)
    run.say(f"valid: loss {report.valid['loss']:.4f} · perplexity {report.valid['ppl']:.2f}")


def scored_models(run: Run, model: nn.Module, average_last: int) -> dict[str, nn.Module]:
    """The models a run scores at the end: ``last`` (``model``, in eval mode) and, with
    ``average_last`` K > 1, ``avgK``, the average of the last K checkpoints ([V17] §6.1),
    written to ``RUN/averaged-lastK``. Fewer checkpoints than K: said, and ``last`` alone."""
    models: dict[str, nn.Module] = {"last": model.eval()}
    k = average_last
    if k > 1:
        try:
            found = last_checkpoints(run.run_dir, k, setting="decode.average_last")
        except CheckpointError as e:  # fewer checkpoints than K: say so, score the last one only
            run.say(f"no averaging: {e}")
        else:
            avg = average_checkpoints(found, run.run_dir / f"averaged-last{k}", replace=True)
            models[f"avg{k}"] = load_checkpoint(avg, device=next(model.parameters()).device).model
    return models


def not_scored(run: Run, split: str) -> None:
    """Say that ``decode.splits`` names a split the data section leaves empty."""
    run.say(
        f"not scored: decode.splits names '{split}', but the data section gives it no "
        f"pairs (set data.{split}, or leave it out of decode.splits)"
    )


# ------------------------------------------------------------------------------------ BLEU
def evaluate_bleu(
    model: nn.Module | list[nn.Module],
    tok: Tokenizer,
    pairs: list[tuple[str, str]],
    decode: MTDecode,
    out_file: Path,
    progress: bool,
    *,
    lang: str,
) -> dict[str, Any]:
    """Translate the sources of ``pairs`` (several models: as an ensemble), write the output,
    and score it against the targets (in target language ``lang``)."""
    start = time.perf_counter()
    hyps = [
        h[0]
        for h in translate(
            model,
            tok,
            [s for s, _ in pairs],
            beam=decode.beam,
            alpha=decode.alpha,
            a=decode.a,
            b=decode.b,
            batch_size=decode.batch_size,
            progress=progress,
            workers=decode.workers,
            processes=decode.processes,
        )
    ]
    seconds = time.perf_counter() - start
    out_file.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(out_file, "".join(h + "\n" for h in hyps))
    report = score(hyps, [t for _, t in pairs], lang=lang)
    return {**dataclasses.asdict(report), "sentences_per_s": len(pairs) / seconds, "output": str(out_file)}


def final_bleu(
    run: Run, exp: MTExperiment, model: nn.Module, tok: Tokenizer, scored: dict[str, list[tuple[str, str]]]
) -> dict[str, Any]:
    """BLEU of the last checkpoint and of the average of the last K on each of
    ``decode.splits`` (``scored`` maps a split name to its raw pairs: ``valid``, ``test`` and
    the evaluation-only sets of ``data.eval_sets``; an empty one is skipped)."""
    decode = exp.decode
    models = scored_models(run, model, decode.average_last)
    results: dict[str, Any] = {}
    for split in decode.splits:
        pairs = scored.get(split)
        if not pairs:
            not_scored(run, split)
            continue
        for name, m in models.items():
            out_file = run.run_dir / "translations" / f"{split}.{name}.{exp.data.tgt_lang}"
            r = evaluate_bleu(m, tok, pairs, decode, out_file, run.progress, lang=exp.data.tgt_lang)
            results[f"{split}.{name}"] = r
            _print_result(run, f"{split} ({name}) beam {decode.beam}, α {decode.alpha:g}", r)
    if decode.tune_alpha and decode.splits:  # no splits: nothing is decoded, nor tuned
        results.update(_tuned_alpha(run, exp, models, tok, scored, results))
    signature = next((r["signature"] for r in results.values() if "signature" in r), None)
    if signature:
        run.say(f"sacreBLEU signature: {signature}")
    return results


def _print_result(run: Run, what: str, r: dict[str, Any]) -> None:
    run.say(
        f"{what}: sacreBLEU {r['sacrebleu']:.2f} · chrF {r['chrf']:.2f} · tokenized "
        f"lowercased BLEU {r['tokenized_lowercased']:.2f} · Moses-tokenized lowercased "
        f"BLEU {r['moses_lowercased']:.2f} ({r['sentences_per_s']:.1f} sentences/s)"
    )


def _tuned_alpha(
    run: Run,
    exp: MTExperiment,
    models: dict[str, nn.Module],
    tok: Tokenizer,
    scored: dict[str, list[tuple[str, str]]],
    done: dict[str, Any],
) -> dict[str, Any]:
    """For each model: the α of ``decode.tune_alpha`` with the best tokenized lowercased BLEU on
    ``valid`` (``scored["valid"]``, non-empty: the config requires ``data.valid``), then every
    other split of ``decode.splits`` decoded once with it. ``done`` holds the results already
    computed at ``decode.alpha`` (and their translation files), reused rather than decoded
    again."""
    decode, lang, out_dir = exp.decode, exp.data.tgt_lang, run.run_dir / "translations"
    results: dict[str, Any] = {}
    for name, m in models.items():

        def bleu_at(
            split: str, alpha: float, out_file: Path, name: str = name, m: nn.Module = m
        ) -> dict[str, Any]:
            if alpha == decode.alpha and f"{split}.{name}" in done:
                if split != "valid":  # the tuned output file, as if decoded again
                    write_text_atomic(
                        out_file, (out_dir / f"{split}.{name}.{lang}").read_text(encoding="utf-8")
                    )
                return dict(done[f"{split}.{name}"])
            return evaluate_bleu(
                m,
                tok,
                scored[split],
                dataclasses.replace(decode, alpha=alpha),
                out_file,
                run.progress,
                lang=lang,
            )

        dev = {
            a: bleu_at("valid", a, out_dir / f"valid.{name}.alpha{a:g}.{lang}")["tokenized_lowercased"]
            for a in dict.fromkeys(decode.tune_alpha)
        }
        best = max(dev, key=lambda a: dev[a])  # the first listed among equals
        results[f"valid.{name}.tune_alpha"] = {"bleu": {f"{a:g}": b for a, b in dev.items()}, "best": best}
        run.say(
            f"valid ({name}) tokenized lowercased BLEU by α: "
            + ", ".join(f"{a:g} {b:.2f}" for a, b in dev.items())
            + f" → α {best:g}"
        )
        for split in decode.splits:
            if split == "valid" or not scored.get(split):
                continue
            r = bleu_at(split, best, out_dir / f"{split}.{name}.tuned.{lang}")
            results[f"{split}.{name}.tuned"] = {**r, "alpha": best}
            _print_result(run, f"{split} ({name}) beam {decode.beam}, α {best:g} chosen on valid", r)
    return results
