"""Translation speed with a trained model: fullrank's beam search against Hugging Face ``generate``
on the same weights, the same sentences, the same beam, penalty exponent and length limit.

    python bench/translate_speed.py runs/multi30k_en_de ../shared/data/multi30k/test_2016_flickr.en

The checkpoint's ``EncoderDecoder`` is converted to a ``MarianMTModel``
(:func:`fullrank.models.convert_hf.marian_state_dict`; the parity test shows equal logits), so
both sides compute the same function. Sentences are sorted by length and cut into batches of
``--batch`` (16) for both sides; the length limit is ``|src| + 50`` per batch (the longest
source), beam 4 and α = 0.6 (fullrank: GNMT ``((5+|Y|)/6)^α``; HF: ``|Y|^α`` — no HF setting is
GNMT's). Unlike the random-weight benchmark (``decode.py``), EOS is real: each side stops as its
search allows — fullrank per sentence, as soon as no open hypothesis can beat the finished ones,
dropping finished sentences from the batch; HF ``generate`` with ``early_stopping=True``.
fullrank and HF run in separate processes, interleaved for ``--rounds`` rounds. The report gives
sentences/second, the ratio, and the BLEU of each side's output against the references when a
reference file is given.

``--workers W`` (> 1) adds a third side: fullrank decoding the same batches ``W`` at a time, each
in its own thread with ``threads / W`` intra-op threads (``fullrank translate --workers``,
:func:`fullrank.fast.map_batches`); its translations must equal fullrank's. With
``--processes`` those workers are forked processes instead of threads (``fullrank translate
--workers W --processes``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import RESULTS, machine, write


def batches(tok, lines: list[str], size: int) -> list[list[int]]:
    order = sorted(range(len(lines)), key=lambda i: -len(tok.encode(lines[i])))
    return [order[i : i + size] for i in range(0, len(order), size)]


def run_side(side: str, args: argparse.Namespace) -> dict:
    from fullrank import fast
    from fullrank.data.text import read_lines
    from fullrank.inference.translate import translate
    from fullrank.training.checkpoints import load_checkpoint

    torch.set_num_threads(args.threads)
    if side != "hf":
        fast.keep_freed_memory()  # as the `fullrank` command does
    ckpt = load_checkpoint(args.checkpoint)
    tok = ckpt.tokenizer
    if tok is None:
        sys.exit(f"{args.checkpoint}: the checkpoint has no tokenizer")
    lines = [x for x in read_lines(args.source)][: args.sentences]
    groups = batches(tok, lines, args.batch)
    outputs: list[str] = [""] * len(lines)
    if side == "hf":
        from transformers import GenerationConfig, MarianConfig, MarianMTModel

        from fullrank.models.convert_hf import marian_config_kwargs, marian_state_dict
        from fullrank.models.encoder_decoder import EncoderDecoder, EncoderDecoderConfig

        assert isinstance(ckpt.config, EncoderDecoderConfig) and isinstance(ckpt.model, EncoderDecoder)
        model = MarianMTModel(
            MarianConfig(
                **marian_config_kwargs(ckpt.config, pad_id=tok.pad_id, bos_id=tok.bos_id, eos_id=tok.eos_id)
            )
        ).eval()
        model.load_state_dict(marian_state_dict(ckpt.model), strict=True)

    # each group's longest source, for fullrank's length limit to equal generate's batch-wide
    # one: a benchmark artifact, so found before the clock starts (translate tokenizes anyway)
    longest = {id(g): max(len(tok.encode(lines[i])) for i in g) for g in groups}

    def ours(group: list[int]) -> list[str]:
        sents = [lines[i] for i in group]
        outs = translate(
            ckpt.model,
            tok,
            sents,
            beam=args.beam,
            alpha=args.alpha,
            a=0.0,
            b=longest[id(group)] + 50,
            batch_size=len(sents),
        )
        return [o[0] for o in outs]

    def theirs(group: list[int]) -> list[str]:
        ids = [tok.encode(lines[i]) + [tok.eos_id] for i in group]
        width = max(len(x) for x in ids)
        src = torch.full((len(ids), width), tok.pad_id)
        for r, x in enumerate(ids):
            src[r, : len(x)] = torch.tensor(x)
        gen = GenerationConfig(
            num_beams=args.beam,
            length_penalty=args.alpha,
            early_stopping=True,
            max_new_tokens=width - 1 + 50,
            decoder_start_token_id=tok.bos_id,
            eos_token_id=tok.eos_id,
            pad_token_id=tok.pad_id,
            do_sample=False,
        )
        with torch.inference_mode():
            out = model.generate(input_ids=src, attention_mask=src != tok.pad_id, generation_config=gen)
        return [tok.decode([t for t in row[1:].tolist() if t != tok.pad_id]) for row in out]

    workers = args.workers if side == "fullrank_workers" else 1
    start = time.perf_counter()
    # fullrank: the engine entered once here (the per-batch translate calls, also those in
    # worker threads, find the weights converted and leave them), as `fullrank translate` does
    # once per file
    with contextlib.ExitStack() as stack:
        if side != "hf":
            stack.enter_context(fast.cpu(ckpt.model, decoding=True))
        done = fast.map_batches(theirs if side == "hf" else ours, groups, workers, processes=args.processes)
        for group, hyps in zip(groups, done):
            for i, h in zip(group, hyps):
                outputs[i] = h
    seconds = time.perf_counter() - start
    return {"side": side, "seconds": seconds, "sentences": len(lines), "outputs": outputs}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("checkpoint")
    ap.add_argument("source")
    ap.add_argument("--ref", default=None, help="references, to report each side's BLEU")
    ap.add_argument("--sentences", type=int, default=320)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--beam", type=int, default=4)
    ap.add_argument("--alpha", type=float, default=0.6)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument(
        "--workers", type=int, default=1, help="> 1: also time fullrank decoding this many batches at a time"
    )
    ap.add_argument(
        "--processes",
        action="store_true",
        help="with --workers: the workers are forked processes, not threads",
    )
    ap.add_argument("--side", choices=["fullrank", "hf", "fullrank_workers"], help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.side:
        print(json.dumps(run_side(args.side, args)))
        return
    runs: dict[str, list[dict]] = {"fullrank": [], "hf": []}
    if args.workers > 1:
        runs["fullrank_workers"] = []
    for r in range(args.rounds):
        for side in runs:
            cmd = [sys.executable, __file__, *sys.argv[1:], "--side", side]
            proc = subprocess.run(cmd, capture_output=True, text=True, check=True)
            res = json.loads(proc.stdout.strip().splitlines()[-1])
            runs[side].append(res)
            print(f"round {r + 1} {side}: {res['sentences'] / res['seconds']:.2f} sentences/s")
    rate = {s: statistics.median(x["sentences"] / x["seconds"] for x in v) for s, v in runs.items()}
    # per round: HF's time over fullrank's for the same sentences (> 1 = fullrank faster)
    paired = statistics.median(h["seconds"] / f["seconds"] for f, h in zip(runs["fullrank"], runs["hf"]))
    lines = [
        f"# Translation speed, trained model ({args.checkpoint})\n",
        f"{runs['fullrank'][0]['sentences']} sentences of {args.source}, batches of "
        f"{args.batch} sorted by length, beam {args.beam}, α {args.alpha}, length limit "
        f"|src|+50, {args.threads} threads, {args.rounds} interleaved rounds.\n",
        "| side | sentences/s (median) |",
        "|---|---|",
        f"| fullrank `translate` | {rate['fullrank']:.2f} |",
        f"| Hugging Face `generate` (Marian, same weights) | {rate['hf']:.2f} |",
        f"\nratio of medians {rate['fullrank'] / rate['hf']:.2f}×, median paired ratio {paired:.2f}×.",
    ]
    if args.workers > 1:
        work = runs["fullrank_workers"]
        paired_w = statistics.median(h["seconds"] / w["seconds"] for w, h in zip(work, runs["hf"]))
        same_w = work[0]["outputs"] == runs["fullrank"][0]["outputs"]
        lines[5:5] = [
            f"| fullrank `translate --workers {args.workers}"
            f"{' --processes' if args.processes else ''}` | "
            f"{rate['fullrank_workers']:.2f} |"
        ]
        lines.append(
            f"\n--workers {args.workers}: ratio of medians "
            f"{rate['fullrank_workers'] / rate['hf']:.2f}×, median paired ratio "
            f"{paired_w:.2f}× against `generate`; translations "
            f"{'identical to' if same_w else 'DIFFERENT from'} fullrank's one batch at "
            f"a time."
        )
    if args.ref:
        from fullrank.cli.bleu import target_language
        from fullrank.data.text import read_lines
        from fullrank.evaluation.bleu import score

        refs = read_lines(args.ref)[: len(runs["fullrank"][0]["outputs"])]
        for side in runs:
            b = score(runs[side][0]["outputs"], refs, lang=target_language(args.ref, None) or "en")
            lines.append(
                f"\n{side} output: sacreBLEU {b.sacrebleu:.2f}, tokenized lowercased "
                f"BLEU {b.tokenized_lowercased:.2f}"
            )
        same = sum(a == b for a, b in zip(runs["fullrank"][0]["outputs"], runs["hf"][0]["outputs"]))
        lines.append(
            f"\nidentical translations: {same} of {len(refs)} (the length penalties differ: GNMT vs |Y|^α)."
        )
    md = "\n".join(lines) + "\n"
    write(
        "translate-speed",
        md,
        {
            "machine": machine(),
            "rates": rate,
            "paired_ratio": paired,
            "seconds": {s: [x["seconds"] for x in v] for s, v in runs.items()},
        },
    )
    print(md)
    print(f"wrote {RESULTS / 'translate-speed.md'}")


if __name__ == "__main__":
    main()
