"""Decoding speed: fullrank's beam search and greedy decoding against Hugging Face ``generate``.

Both sides decode the same random sources with the same random-weight model: fullrank's
``EncoderDecoder``, and a Hugging Face ``MarianMTModel`` built from it by
:mod:`fullrank.models.convert_hf` (post-LN, ReLU, sinusoidal positions, embeddings × √d_model,
one shared embedding tied to the output projection; the weights copied), in float32 on
``--threads`` CPU threads, so the report can say whether the two produce the same outputs. EOS
is suppressed so every sentence runs exactly ``--new-tokens`` steps (fullrank ``min_len``, HF
``min_new_tokens``), which makes the work of both sides identical.

fullrank decodes as ``fullrank translate`` does: on its speed engine (:mod:`fullrank.fast`:
``fast.BeamDecoder``, the block top-k, ``fast.cpu(model, decoding=True)``). It runs twice: with
its defaults (CPU float32 matrix multiplies through oneDNN where that keeps float32 accuracy,
and freed memory kept for reuse) and with PyTorch's defaults for both — the settings Hugging
Face runs with — so the report separates what the settings give from what the code does.

fullrank's weights take their decoding layout (:func:`fullrank.fast.layout.decoding_layout`:
packed for oneDNN, or column-major) once per subprocess, before the warm-up, as
``fullrank translate`` does once per file: the timed decodes are batches of a file. The
``fullrank`` subprocess then also times one decode per mode with the layout made inside the call
(a file of one batch), and the report gives that rate too.

Each side runs in its own subprocess, and the subprocesses alternate A, B, C, A, B, C, … for
``--rounds`` rounds, because these machines drift by up to ±25% from one minute to the next;
each subprocess builds its model, decodes once untimed (warm-up), then times ``--repeats``
decodes per mode (3 by default) and keeps their median, so that one unlucky second of a noisy
machine does not decide a round. The report gives medians over rounds, the ratio of medians and
the median of the per-round ratios, as a Markdown table and JSON under ``bench/results/``.

Each fullrank subprocess also times the **floor**: the matrix multiplies that one cached decoder
step cannot avoid (per layer the self-attention q/k/v and output projections, the
cross-attention query and output projections, the two feed-forward layers; then the output
projection to the vocabulary), on random matrices of the same shapes and the same number of rows
(``batch × beam`` for beam search, ``batch`` for greedy), repeated for every step, under the
same CPU matrix-multiply setting. Attention itself, softmax, the encoder and the search are left
out, so no decoder can beat it; the report gives each side's speed as a fraction of it.

Before timing, fullrank's cached decoding is checked against its uncached reference decoder
(which recomputes the whole target prefix at every step) on the same inputs: the outputs must be
identical.

Length penalty: fullrank scores ``log P / ((5 + |Y|)/6)^α`` (GNMT, [V17] §6.1); HF's
``length_penalty=α`` divides by ``|Y|^α``. Both count EOS in ``|Y|``. With EOS suppressed every
finished hypothesis has the same length, so the penalty is a common factor and both searches do
the same work; the closest HF setting (``length_penalty=0.6``, ``early_stopping="never"``, the
exact stopping bound fullrank uses) is what runs.

Usage::

    python bench/decode.py                      # the full benchmark (the Multi30k-sized model)
    python bench/decode.py --preset small --rounds 3   # a quick run
    python bench/decode.py --rounds 3 --compile        # also fullrank with compiled decoder steps

With ``--compile`` a fourth side runs: fullrank's defaults with the decoder step under
``torch.compile`` (:func:`fullrank.inference.compiled_decode`); its untimed warm-up decode is
where it compiles, and the report gives that time.

A file rather than one batch: ``--batches N`` gives every side ``N`` batches of ``--batch``
sources, decoded one after another (a batch's search never sees another's sentences), and the
rates count all ``N × batch`` sentences. ``--workers W`` adds a side: fullrank's defaults
decoding the same sources ``W`` batches at a time, each in its own thread with ``threads / W``
intra-op threads (:func:`fullrank.fast.map_batches`, ``fullrank translate --workers``); the
sources are cut into batches as ``fullrank translate`` cuts a file's lines for ``W`` workers
(:func:`fullrank.fast.plan_batches`: a multiple of ``W``
batches of at most ``--batch``, sizes even; four batches of 16 stay four of 16). Its outputs
must equal the one-batch-at-a-time fullrank side's.

    python bench/decode.py --batches 4 --workers 2   # a file of 4 × 16 sources, 2 workers

With ``--processes`` the workers side's workers are processes forked from its subprocess
instead of threads (``fullrank translate --workers W --processes``); the fork and the workers'
start happen inside the timed call.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, cast

import torch

if TYPE_CHECKING:
    from collections.abc import Sequence

    from transformers import MarianMTModel

    from fullrank.models import EncoderDecoder

PAD, BOS, EOS = 0, 1, 2
RESULTS = Path(__file__).resolve().parent / "results"
MODES = ("beam", "greedy")
SIDES = ("fullrank", "fullrank_same", "hf")  # defaults, PyTorch's defaults, Hugging Face
COMPILED = "fullrank_compiled"  # with --compile: fullrank's defaults, decoder steps compiled
WORKERS = "fullrank_workers"  # with --workers W > 1: fullrank's defaults, W batches at once

PRESETS = {
    # the Multi30k recipe's model (configs/mt/multi30k_en_de.yaml): the default
    "multi30k": dict(d_model=256, n_layers=3, n_heads=4, d_ff=1024, vocab_size=10000),
    # [V17] base widths with an 8000-token shared vocabulary
    "base": dict(d_model=512, n_layers=6, n_heads=8, d_ff=2048, vocab_size=8000),
    # a quick check that the script works
    "small": dict(d_model=256, n_layers=3, n_heads=4, d_ff=1024, vocab_size=4000),
}


@dataclass(frozen=True)
class Setup:
    """Everything both sides share."""

    d_model: int
    n_layers: int
    n_heads: int
    d_ff: int
    vocab_size: int
    batch: int = 16
    src_len: int = 30
    new_tokens: int = 50
    beam: int = 4
    alpha: float = 0.6
    threads: int = 2
    seed: int = 0
    repeats: int = 3  # timed decodes per mode in each subprocess; their median counts
    batches: int = 1  # batches of `batch` sources, decoded one after another (a file)
    workers: int = 1  # the workers side's batches decoded at once
    processes: bool = False  # the workers side's workers are forked processes, not threads


def sources(s: Setup) -> list[torch.Tensor]:
    """The ``s.batches`` batches of ``(batch, src_len)`` random source ids (no padding) that
    every side decodes."""
    gen = torch.Generator().manual_seed(s.seed)
    return list(
        torch.randint(3, s.vocab_size, (s.batches * s.batch, s.src_len), generator=gen).split(s.batch)
    )


def trainable(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


# --------------------------------------------------------------------------------- fullrank side
def fullrank_model(s: Setup) -> EncoderDecoder:
    from fullrank.models import EncoderDecoder, EncoderDecoderConfig

    torch.manual_seed(s.seed)
    cfg = EncoderDecoderConfig(
        vocab_size=s.vocab_size,
        d_model=s.d_model,
        n_heads=s.n_heads,
        d_ff=s.d_ff,
        n_layers=s.n_layers,
        dropout=0.0,
    )
    return EncoderDecoder(cfg).eval()


def fullrank_decode(
    model: EncoderDecoder,
    batches: list[torch.Tensor],
    s: Setup,
    mode: str,
    cached: bool = True,
    fast: bool = True,
    decode=None,
    workers: int = 1,
    processes: bool = False,
) -> list[list[int]]:
    from fullrank import fast as engine
    from fullrank.inference import UncachedSeq2SeqDecoder, beam_search, greedy_search

    def one(src: torch.Tensor) -> list[list[int]]:
        decoder = (
            engine.BeamDecoder(model, src, decode=decode) if cached else UncachedSeq2SeqDecoder(model, src)
        )
        kw = dict(batch_size=src.shape[0], bos_id=BOS, eos_id=EOS, max_len=s.new_tokens, min_len=s.new_tokens)
        if mode == "greedy":
            return greedy_search(decoder, argmax=engine.argmax_rows, **kw)
        hyps = beam_search(decoder, beam_size=s.beam, alpha=s.alpha, topk=engine.topk_rows, **kw)
        return [h[0].tokens for h in hyps]

    # as `fullrank translate` decodes: on the engine, with CPU matrix multiplies through oneDNN
    # if `fast` (else PyTorch's defaults, Hugging Face's settings), the weights in their decoding
    # layout (packed, or column-major): made here, unless the caller holds that layout already
    # (worker() does, as `fullrank translate` holds it for a file), when this block costs nothing
    with engine.cpu(model, onednn=fast, decoding=True):
        return [t for out in engine.map_batches(one, batches, workers, processes=processes) for t in out]


# ------------------------------------------------------------------------------ Hugging Face side
def hf_model(s: Setup) -> MarianMTModel:
    """A ``MarianMTModel`` computing the same function as :func:`fullrank_model` (its weights
    copied over), so both sides decode the same model."""
    from transformers import MarianConfig, MarianMTModel

    from fullrank.models.convert_hf import marian_config_kwargs, marian_state_dict

    ours = fullrank_model(s)
    model = MarianMTModel(
        MarianConfig(**marian_config_kwargs(ours.config, pad_id=PAD, bos_id=BOS, eos_id=EOS))
    )
    model.load_state_dict(marian_state_dict(ours), strict=True)
    return model.eval()


def hf_decode(model: MarianMTModel, batches: list[torch.Tensor], s: Setup, mode: str) -> list[list[int]]:
    from transformers import GenerationConfig

    gen = GenerationConfig(
        num_beams=s.beam if mode == "beam" else 1,
        length_penalty=s.alpha,
        early_stopping="never",
        do_sample=False,
        max_new_tokens=s.new_tokens,
        min_new_tokens=s.new_tokens,
        decoder_start_token_id=BOS,
        eos_token_id=EOS,
        pad_token_id=PAD,
        forced_eos_token_id=None,
        use_cache=True,
    )
    outputs = []
    with torch.inference_mode():
        for src in batches:
            out = model.generate(
                input_ids=src, generation_config=gen, attention_mask=torch.ones_like(src, dtype=torch.bool)
            )
            outputs += [row[1:] for row in out.tolist()]  # drop the decoder start token
    return outputs


def floor_seconds(s: Setup, mode: str) -> float:
    """Seconds for the unavoidable matrix multiplies of ``s.new_tokens`` cached decoder steps
    (see the module docstring), timed once after one untimed pass."""
    from fullrank.fast.precision import onednn_matmul

    # beam search's first step runs one row per sentence, the others one per beam
    rows = [s.batch] + [s.batch * (s.beam if mode == "beam" else 1)] * (s.new_tokens - 1)
    d, f = s.d_model, s.d_ff
    gen = torch.Generator().manual_seed(s.seed)
    shapes = [(d, 3 * d), (d, d), (d, d), (d, d), (d, f), (f, d)] * s.n_layers + [(d, s.vocab_size)]
    weights = [torch.randn(i, o, generator=gen) / i**0.5 for i, o in shapes]  # (in, out)
    inputs = {(r, i): torch.randn(r, i, generator=gen) for r in set(rows) for i in (d, f)}

    def run() -> None:
        for r in rows:
            for w in weights:
                torch.mm(inputs[r, w.shape[0]], w)  # (r, out)

    with torch.inference_mode(), onednn_matmul():
        run()
        start = time.perf_counter()
        run()
        return time.perf_counter() - start


# ---------------------------------------------------------------------------------- subprocesses
def worker(side: str, s: Setup) -> dict:
    """Build one side's model, warm up untimed, then time ``s.repeats`` decodes per mode and
    keep their median."""
    torch.set_num_threads(s.threads)
    if side not in ("hf", "fullrank_same"):
        from fullrank.fast import keep_freed_memory

        keep_freed_memory()  # as the `fullrank` command does (PyTorch's defaults: glibc's)
    src = sources(s)
    if side == WORKERS:  # cut as `fullrank translate --workers` cuts a file's lines
        from fullrank.fast import plan_batches

        # a tensor slices as a sequence of its rows, each batch a tensor
        rows = cast("Sequence[torch.Tensor]", torch.cat(src))
        src = list(cast("list[torch.Tensor]", plan_batches(rows, s.batch, s.workers)))
    model = hf_model(s) if side == "hf" else fullrank_model(s)
    compiled = None
    if side == COMPILED:
        from fullrank.inference import compiled_decode

        compiled = compiled_decode(cast("EncoderDecoder", model))  # fullrank's side

    def decode(model: torch.nn.Module, src: list[torch.Tensor], s: Setup, mode: str) -> list[list[int]]:
        if side == "hf":
            return hf_decode(cast("MarianMTModel", model), src, s, mode)
        return fullrank_decode(
            cast("EncoderDecoder", model),
            src,
            s,
            mode,
            fast=side != "fullrank_same",
            decode=compiled,
            workers=s.workers if side == WORKERS else 1,
            processes=s.processes and side == WORKERS,
        )

    out: dict = {
        "side": side,
        "params": trainable(model),
        "buffers": sum(b.numel() for b in model.buffers()),
        "frozen_params": sum(p.numel() for p in model.parameters() if not p.requires_grad),
        "seconds": {},
        "repeat_seconds": {},
        "lengths": {},
        "outputs": {},
        "warmup_seconds": {},
        "layout_per_call_seconds": {},
    }
    with contextlib.ExitStack() as session:
        if side != "hf":  # the decoding layout of a file's batches, made once (see the docstring)
            from fullrank import fast as engine

            session.enter_context(engine.cpu(model, onednn=side != "fullrank_same", decoding=True))
        for mode in MODES:
            start = time.perf_counter()
            decode(model, src, s, mode)  # warm-up, untimed (compiling, for the compiled side)
            out["warmup_seconds"][mode] = time.perf_counter() - start
            times = []
            for _ in range(s.repeats):
                start = time.perf_counter()
                tokens = decode(model, src, s, mode)
                times.append(time.perf_counter() - start)
            out["repeat_seconds"][mode] = times
            out["seconds"][mode] = statistics.median(times)
            out["lengths"][mode] = sorted({len(t) for t in tokens})
            out["outputs"][mode] = tokens
    if side == "fullrank":  # once more each, the layout made inside the call: a file of one batch
        for mode in MODES:
            start = time.perf_counter()
            decode(model, src, s, mode)
            out["layout_per_call_seconds"][mode] = time.perf_counter() - start
    if side == WORKERS:
        out["batch_sizes"] = [len(b) for b in src]
    if side == "fullrank":
        out["floor_seconds"] = {mode: floor_seconds(s, mode) for mode in MODES}
    return out


def verify(s: Setup) -> dict:
    """fullrank cached vs uncached reference decoding on the benchmark's inputs."""
    torch.set_num_threads(s.threads)
    src, model = sources(s), fullrank_model(s)
    out = {}
    for mode in MODES:
        start = time.perf_counter()
        cached = fullrank_decode(model, src, s, mode)
        reference = fullrank_decode(model, src, s, mode, cached=False)
        out[mode] = {
            "identical": cached == reference,
            "sentences": len(cached),
            "seconds": round(time.perf_counter() - start, 2),
        }
    return out


def spawn(job: str, s: Setup) -> dict:
    cmd = [sys.executable, __file__, "--job", job, "--setup", json.dumps(dataclasses.asdict(s))]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        sys.exit(f"{job} subprocess failed:\n{proc.stderr[-3000:]}")
    line = next(x for x in proc.stdout.splitlines() if x.startswith("RESULT "))
    return json.loads(line.removeprefix("RESULT "))


# ---------------------------------------------------------------------------------------- report
def summarise(s: Setup, runs: list[dict], check: dict | None) -> dict:
    by_side = {side: [r for r in runs if r["side"] == side] for side in (*SIDES, COMPILED, WORKERS)}
    by_side = {side: rs for side, rs in by_side.items() if rs}
    sentences = s.batch * s.batches
    modes = {}
    for mode in MODES:
        rate = {side: [sentences / r["seconds"][mode] for r in rs] for side, rs in by_side.items()}
        paired = [a / b for a, b in zip(rate["fullrank"], rate["hf"])]
        same = [a / b for a, b in zip(rate["fullrank_same"], rate["hf"])]
        floor = statistics.median(s.batch / r["floor_seconds"][mode] for r in by_side["fullrank"])
        modes[mode] = {
            "floor_sent_per_s": floor,
            "fullrank_sent_per_s": rate["fullrank"],
            "hf_sent_per_s": rate["hf"],
            "fullrank_median": statistics.median(rate["fullrank"]),
            "hf_median": statistics.median(rate["hf"]),
            "fullrank_same_sent_per_s": rate["fullrank_same"],
            "fullrank_same_median": statistics.median(rate["fullrank_same"]),
            "median_same_paired_ratio": statistics.median(same),
            "same_paired_ratios": same,
            "ratio_of_medians": statistics.median(rate["fullrank"]) / statistics.median(rate["hf"]),
            "median_paired_ratio": statistics.median(paired),
            "paired_ratios": paired,
            "output_lengths": {side: rs[0]["lengths"][mode] for side, rs in by_side.items()},
            "layout_per_call_sent_per_s": [
                sentences / r["layout_per_call_seconds"][mode] for r in by_side["fullrank"]
            ],
            "median_layout_per_call_paired_ratio": statistics.median(
                sentences / r["layout_per_call_seconds"][mode] / h
                for r, h in zip(by_side["fullrank"], rate["hf"])
            ),
            "same_outputs_as_hf": by_side["fullrank"][0]["outputs"][mode]
            == by_side["hf"][0]["outputs"][mode],
        }
        if COMPILED in by_side:
            modes[mode].update(
                {
                    **against_hf(rate, COMPILED, "compiled"),
                    "compile_seconds": statistics.median(
                        r["warmup_seconds"][mode] for r in by_side[COMPILED]
                    ),
                    "compiled_same_outputs_as_eager": by_side[COMPILED][0]["outputs"][mode]
                    == by_side["fullrank"][0]["outputs"][mode],
                }
            )
        if WORKERS in by_side:
            modes[mode].update(
                {
                    **against_hf(rate, WORKERS, "workers"),
                    "workers_over_fullrank": statistics.median(
                        a / b for a, b in zip(rate[WORKERS], rate["fullrank"])
                    ),
                    "workers_same_outputs_as_fullrank": by_side[WORKERS][0]["outputs"][mode]
                    == by_side["fullrank"][0]["outputs"][mode],
                    "workers_batch_sizes": by_side[WORKERS][0]["batch_sizes"],
                }
            )
    import transformers

    return {
        "setup": dataclasses.asdict(s),
        "params": {side: rs[0]["params"] for side, rs in by_side.items()},
        "frozen_params": {side: rs[0]["frozen_params"] for side, rs in by_side.items()},
        "buffers": {side: rs[0]["buffers"] for side, rs in by_side.items()},
        "modes": modes,
        "cached_equals_uncached": check,
        "versions": {
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "python": platform.python_version(),
        },
        "machine": {
            "processor": platform.processor() or platform.machine(),
            "cpu_count": os.cpu_count(),
            "date": time.strftime("%Y-%m-%d %H:%M"),
        },
        "notes": [
            "fullrank length penalty ((5+|Y|)/6)^alpha (GNMT); HF length_penalty=alpha divides by "
            "|Y|^alpha. EOS is suppressed, so every hypothesis has the same length and the "
            "penalty does not change the search; both use the exact stopping bound "
            "(HF early_stopping='never').",
            "HF Marian adds final_logits_bias (a (1, V) buffer) to the logits and keeps its "
            "sinusoidal positions as a frozen parameter; fullrank keeps them as a buffer.",
        ],
    }


def against_hf(rate: dict[str, list[float]], side: str, key: str) -> dict:
    """An extra side's per-round rates, their median and its per-round ratios to HF's, under
    ``key``-prefixed names."""
    paired = [a / b for a, b in zip(rate[side], rate["hf"])]
    return {
        f"{key}_sent_per_s": rate[side],
        f"{key}_median": statistics.median(rate[side]),
        f"median_{key}_paired_ratio": statistics.median(paired),
        f"{key}_paired_ratios": paired,
    }


def side_table(rep: dict, key: str, intro: str, headers: tuple[str, str], cells) -> list[str]:
    """Markdown lines for an extra side (``key``: ``compiled`` or ``workers``): its median rate and
    ratios to HF per mode, plus two columns (``headers``; ``cells(m)`` gives their values)."""
    lines = [
        "",
        intro,
        "",
        f"| mode | {key} sent/s (median) | median paired ratio to HF | "
        f"per-round ratios | {headers[0]} | {headers[1]} |",
        "|---|---|---|---|---|---|",
    ]
    for mode, m in rep["modes"].items():
        per = ", ".join(f"{r:.2f}" for r in m[f"{key}_paired_ratios"])
        lines.append(
            f"| {mode} | {m[f'{key}_median']:.2f} | "
            f"{m[f'median_{key}_paired_ratio']:.2f}× | {per} | " + " | ".join(cells(m)) + " |"
        )
    return lines


def in_words(sizes: list[int]) -> str:
    """Batch sizes in words: "2 batches of 8", "4 batches of 33/33/32/32"."""
    return f"{len(sizes)} batches of {sizes[0] if len(set(sizes)) == 1 else '/'.join(map(str, sizes))}"


def markdown(rep: dict) -> str:
    s = rep["setup"]
    lines = [
        "# Decoding speed: fullrank vs Hugging Face `generate`",
        "",
        f"Model: d_model {s['d_model']}, {s['n_layers']}+{s['n_layers']} layers, {s['n_heads']} "
        f"heads, d_ff {s['d_ff']}, shared vocabulary {s['vocab_size']}; trainable parameters "
        f"fullrank {rep['params']['fullrank']:,}, HF Marian {rep['params']['hf']:,}. "
        + (f"{s['batches']} batches of " if s.get("batches", 1) > 1 else "")
        + f"{s['batch']} sources of {s['src_len']} tokens, {s['new_tokens']} new tokens (EOS "
        f"suppressed), beam {s['beam']} with α = {s['alpha']}, float32, {s['threads']} threads, "
        f"one untimed warm-up per subprocess, then the median of {s.get('repeats', 1)} timed "
        f"decodes, {len(rep['modes']['beam']['paired_ratios'])} interleaved rounds.",
        "",
        "| mode | fullrank sent/s (median) | HF sent/s (median) | ratio of medians "
        "| median paired ratio | per-round ratios | fullrank at PyTorch's defaults sent/s "
        "| its median paired ratio | floor sent/s | fullrank, HF % of floor |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for mode, m in rep["modes"].items():
        per = ", ".join(f"{r:.2f}" for r in m["paired_ratios"])
        lines.append(
            f"| {mode} | {m['fullrank_median']:.2f} | {m['hf_median']:.2f} | "
            f"{m['ratio_of_medians']:.2f}× | {m['median_paired_ratio']:.2f}× | {per} | "
            f"{m['fullrank_same_median']:.2f} | {m['median_same_paired_ratio']:.2f}× | "
            f"{m['floor_sent_per_s']:.2f} | {100 * m['fullrank_median'] / m['floor_sent_per_s']:.0f}%, "
            f"{100 * m['hf_median'] / m['floor_sent_per_s']:.0f}% |"
        )
    lines += [
        "",
        "Both sides decode the same weights (fullrank's, copied into Marian); the outputs "
        "are "
        + ", ".join(
            f"{mode} {'identical' if m['same_outputs_as_hf'] else 'DIFFERENT'}"
            for mode, m in rep["modes"].items()
        )
        + " to Hugging Face's.",
    ]
    lines += [
        "",
        "fullrank's decoding layout (`fast.cpu(model, decoding=True)`: packed or column-major "
        "weights, the output projection transposed) is made once per subprocess, as "
        "`fullrank translate` makes it once per file, and the timed decodes are batches of "
        "that file. Made inside each timed call instead (as when that call is the whole "
        "file), fullrank decoded "
        + ", ".join(
            f"{mode} {statistics.median(m['layout_per_call_sent_per_s']):.2f} "
            f"sent/s ({m['median_layout_per_call_paired_ratio']:.2f}× HF, paired)"
            for mode, m in rep["modes"].items()
        )
        + ".",
    ]
    same = {True: "identical", False: "DIFFERENT"}
    if "compiled_median" in rep["modes"]["beam"]:
        lines += side_table(
            rep,
            "compiled",
            "With `--compile`: fullrank's decoder steps under `torch.compile` "
            "(`fullrank.inference.compiled_decode`, `fullrank translate --compile`), the first "
            "decode of each subprocess compiling (untimed, its time given here; Inductor reuses "
            "the kernels it finds in its on-disk cache, so a first run on a machine takes "
            "longer).",
            ("first decode (compiling) s", "outputs = eager fullrank's"),
            lambda m: (f"{m['compile_seconds']:.0f}", same[m["compiled_same_outputs_as_eager"]]),
        )
    if "workers_median" in rep["modes"]["beam"]:
        lines += side_table(
            rep,
            "workers",
            f"With `--workers {s['workers']}`: fullrank's defaults decoding the "
            f"{s['batches'] * s['batch']} sources as "
            f"{in_words(rep['modes']['beam']['workers_batch_sizes'])} "
            f"{s['workers']} at a time, each in its own "
            f"{'forked process' if s.get('processes') else 'thread'} with "
            f"{max(1, s['threads'] // s['workers'])} intra-op thread(s) of the {s['threads']} "
            f"(`fullrank.fast.map_batches` and `plan_batches`, "
            f"`fullrank translate --workers`{' --processes' if s.get('processes') else ''}).",
            ("over one batch at a time (paired)", "outputs = fullrank's"),
            lambda m: (f"{m['workers_over_fullrank']:.2f}×", same[m["workers_same_outputs_as_fullrank"]]),
        )
    check = rep["cached_equals_uncached"]
    if check:
        lines += [
            "",
            "fullrank cached = uncached reference decoder on these inputs: "
            + ", ".join(
                f"{mode} {'identical' if c['identical'] else 'DIFFERENT'} ({c['sentences']} sentences)"
                for mode, c in check.items()
            )
            + ".",
        ]
    lines += [
        "",
        "Floor: the matrix multiplies of every decoder step alone (q/k/v, attention output, "
        "cross-attention query and output, feed-forward, vocabulary projection) at the "
        "decode's row count, with fullrank's CPU matrix-multiply setting; no decoder that "
        "computes these products can be faster.",
        "",
        *[f"- {n}" for n in rep["notes"]],
        f"- torch {rep['versions']['torch']}, transformers {rep['versions']['transformers']}, "
        f"{rep['machine']['processor']} ({rep['machine']['cpu_count']} CPUs).",
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", choices=sorted(PRESETS), default="multi30k")
    ap.add_argument("--d-model", type=int)
    ap.add_argument("--n-layers", type=int)
    ap.add_argument("--n-heads", type=int)
    ap.add_argument("--d-ff", type=int)
    ap.add_argument("--vocab-size", type=int)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--src-len", type=int, default=30)
    ap.add_argument("--new-tokens", type=int, default=50)
    ap.add_argument("--beam", type=int, default=4)
    ap.add_argument("--alpha", type=float, default=0.6)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument(
        "--repeats",
        type=int,
        default=3,
        help="timed decodes per mode in each subprocess (their median counts)",
    )
    ap.add_argument("--no-verify", action="store_true", help="skip the cached = uncached check")
    ap.add_argument(
        "--compile",
        action="store_true",
        help="also time fullrank with its decoder steps torch.compile'd (a fourth "
        "side; each of its subprocesses compiles first, about 2 minutes)",
    )
    ap.add_argument(
        "--batches",
        type=int,
        default=1,
        help="batches of --batch sources per side, decoded one after another",
    )
    ap.add_argument(
        "--workers",
        type=int,
        default=1,
        help="> 1: also time fullrank decoding the batches this many at a time",
    )
    ap.add_argument(
        "--processes",
        action="store_true",
        help="with --workers: the workers are forked processes, not threads",
    )
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--job", choices=[*SIDES, COMPILED, WORKERS, "verify"], help=argparse.SUPPRESS)
    ap.add_argument("--setup", help=argparse.SUPPRESS)
    args = ap.parse_args()

    if args.job:  # inside a subprocess
        s = Setup(**json.loads(args.setup))
        result = verify(s) if args.job == "verify" else worker(args.job, s)
        print("RESULT " + json.dumps(result), flush=True)
        return

    dims = {
        **PRESETS[args.preset],
        **{
            k: v
            for k, v in dict(
                d_model=args.d_model,
                n_layers=args.n_layers,
                n_heads=args.n_heads,
                d_ff=args.d_ff,
                vocab_size=args.vocab_size,
            ).items()
            if v is not None
        },
    }
    if args.batches < 1 or not 1 <= args.workers <= args.batches:
        sys.exit(
            f"need --batches >= 1 and 1 <= --workers <= --batches (one batch stays one "
            f"batch), got --batches {args.batches} --workers {args.workers}"
        )
    s = Setup(
        **dims,
        batch=args.batch,
        src_len=args.src_len,
        new_tokens=args.new_tokens,
        beam=args.beam,
        alpha=args.alpha,
        threads=args.threads,
        repeats=args.repeats,
        batches=args.batches,
        workers=args.workers,
        processes=args.processes,
    )
    print(f"setup: {s}", flush=True)
    check = None
    if not args.no_verify:
        check = spawn("verify", s)
        print(f"fullrank cached = uncached reference: {check}", flush=True)
    runs = []
    for r in range(args.rounds):
        sides = (*SIDES, *[COMPILED] * args.compile, *[WORKERS] * (args.workers > 1))
        for side in sides:  # A, B, C, A, B, C, ...
            res = spawn(side, s)
            runs.append(res)
            times = ", ".join(f"{m} {s.batch * s.batches / t:.2f} sent/s" for m, t in res["seconds"].items())
            print(f"round {r + 1} {side:13s} params {res['params']:,}: {times}", flush=True)
    rep = summarise(s, runs, check)
    if rep["params"]["fullrank"] != rep["params"]["hf"]:
        print(f"WARNING: parameter counts differ: {rep['params']}", flush=True)
    md = markdown(rep)
    args.out.mkdir(parents=True, exist_ok=True)
    stem = f"decode-{args.preset}" if dims == PRESETS[args.preset] else "decode-custom"
    stem += f"-{s.batches}x{s.batch}" if s.batches > 1 else ""
    stem += "-processes" if s.processes and s.workers > 1 else ""
    (args.out / f"{stem}.md").write_text(md)
    (args.out / f"{stem}.json").write_text(json.dumps(rep, indent=2) + "\n")
    print(md)
    print(f"wrote {args.out / stem}.md and .json")


if __name__ == "__main__":
    main()
