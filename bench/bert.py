"""BERT training steps, fullrank against Hugging Face ``transformers``, interleaved in one run.

    python bench/bert.py                      # pre-training, classification and QA steps
    python bench/bert.py --only pretrain --rounds 3

Workloads (float32 on the CPU, or bfloat16 autocast on every side with ``--precision bf16``;
``--threads`` threads, dropout 0 — but in ``classify_dropout`` — so both sides compute the same
numbers, AdamW, warm-up steps untimed), on one BERT: 4 layers, d_model 256, 4 heads, d_ff 1024,
vocabulary 8,000, sequences of 128 tokens, batch 16:

- ``pretrain`` — masked LM (20 predictions per sequence, BERT's cap at 128) + NSP.
  fullrank: :class:`~fullrank.training.tasks.MaskedLMWithNSP` (the last block at [CLS] and the
  20 positions only, fused output cross-entropy); Hugging Face: ``BertForPreTraining`` with
  ``labels`` (-100 elsewhere) and ``next_sentence_label`` (logits for every position).
- ``classify`` — ``BertForSequenceClassification`` (3 classes) against the classifier head (the
  last block at [CLS] only on fullrank's side; the loss and gradients are Hugging Face's).
- ``qa`` — ``BertForQuestionAnswering`` against the span head.
- ``classify_dropout`` — ``classify`` with BERT's dropout, as fine-tuning runs it (0.1 on the
  embeddings, the attention probabilities, every sublayer's output and the pooled output, on
  both sides): the same arithmetic, other random draws. fullrank's engine then writes attention
  out (no fused CPU kernel has dropout) and Hugging Face's SDPA falls back to its own
  written-out path. The other rows run without dropout, so that both sides compute the very
  same numbers.
- ``qa_dropout`` — ``qa`` with BERT's dropout, likewise.

Each implementation: ``fullrank`` (its defaults: the speed engine, :func:`fullrank.fast.cpu`, and
fused AdamW), ``fullrank_same`` (PyTorch's defaults and plain AdamW, the peer's settings) and
``hf`` (SDPA attention). Results: ``bench/results/bert.md`` and ``.json`` (or ``--name``):
sequences per second, step time, parameters, peak RSS, the paired ratio to Hugging Face with the range of the
per-round ratios, and the machine's load average before and after each workload (these runs
share their cores); with another ``--threads`` than 2, ``bench/results/bert-N-threads.*``, and
with ``--precision bf16`` the same names ending in ``-bf16``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import interleaved, machine, median, paired_ratio, write

SHAPE = dict(vocab=8000, d=256, layers=4, heads=4, d_ff=1024, seq=128, batch=16, predictions=20)
IMPLS = {
    "fullrank": "fullrank (defaults)",
    "fullrank_same": "fullrank (PyTorch defaults)",
    "hf": "Hugging Face transformers",
}
WORKLOADS = ("pretrain", "classify", "qa", "classify_dropout", "qa_dropout")
# the dropout of the workloads that keep BERT's (every other runs without)
DROPOUT = {"classify_dropout": 0.1, "qa_dropout": 0.1}


def task_of(workload: str) -> str:
    """The training task of a workload: ``pretrain``, ``classify`` or ``qa``."""
    return workload.removesuffix("_dropout")


def batch(s: dict[str, int]) -> dict[str, Any]:
    """One batch: tokens, segments, all-real mask, 20 MLM positions per row, labels."""
    import torch

    g = torch.Generator().manual_seed(0)
    b, t = s["batch"], s["seq"]
    tokens = torch.randint(5, s["vocab"], (b, t), generator=g)
    segments = (torch.arange(t) >= t // 2).long().expand(b, t).contiguous()
    positions = (
        torch.stack([torch.randperm(t - 2, generator=g)[: s["predictions"]] + 1 for _ in range(b)])
        .sort(1)
        .values
    )
    return {
        "tokens": tokens,
        "segments": segments,
        "mask": torch.ones(b, t, dtype=torch.bool),
        "positions": positions,
        "mlm_labels": torch.randint(5, s["vocab"], positions.shape, generator=g),
        "nsp": torch.randint(0, 2, (b,), generator=g),
        "classes": torch.randint(0, 3, (b,), generator=g),
        "starts": torch.randint(1, t, (b,), generator=g),
        "ends": torch.randint(1, t, (b,), generator=g),
    }


def fullrank_step(workload: str, s: dict[str, int], x: dict[str, Any]):
    from fullrank.data.batch import ClassificationBatch, EncoderInputs, PretrainingBatch, SpanBatch
    from fullrank.models import Encoder, EncoderConfig
    from fullrank.training.tasks import MaskedLMWithNSP, SequenceClassification, SpanExtraction

    task_name, p = task_of(workload), DROPOUT.get(workload, 0.0)
    heads_of: dict[str, dict[str, Any]] = {
        "pretrain": dict(),
        "classify": dict(pretraining_heads=False, n_classes=3),
        "qa": dict(pretraining_heads=False, span_head=True),
    }
    heads = heads_of[task_name]
    model = Encoder(
        EncoderConfig(
            vocab_size=s["vocab"],
            d_model=s["d"],
            n_heads=s["heads"],
            d_ff=s["d_ff"],
            n_layers=s["layers"],
            seq_len=s["seq"],
            max_len=s["seq"],
            dropout=p,
            attn_dropout=p,
            **heads,
        )
    )
    inputs = EncoderInputs(x["tokens"], x["segments"], x["mask"])
    b: PretrainingBatch | ClassificationBatch | SpanBatch
    if task_name == "pretrain":
        index = (x["positions"] + s["seq"] * __import__("torch").arange(s["batch"])[:, None]).reshape(-1)
        b = PretrainingBatch(
            inputs, index, x["mlm_labels"].reshape(-1), x["nsp"], nsp_weight=len(index) / s["batch"]
        )
        task: Any = MaskedLMWithNSP()
    elif task_name == "classify":
        b, task = ClassificationBatch(inputs, x["classes"]), SequenceClassification()
    else:
        b, task = SpanBatch(inputs, x["starts"], x["ends"]), SpanExtraction()

    def loss():
        out = task.loss(model, b)
        return out.loss / out.n_tokens

    return model, loss


def hf_step(workload: str, s: dict[str, int], x: dict[str, Any]):
    import torch
    import transformers

    task_name, p = task_of(workload), DROPOUT.get(workload, 0.0)
    cfg = transformers.BertConfig(  # type: ignore[call-arg]  # typed signature omits its **kwargs, num_labels
        vocab_size=s["vocab"],
        hidden_size=s["d"],
        num_hidden_layers=s["layers"],
        num_attention_heads=s["heads"],
        intermediate_size=s["d_ff"],
        max_position_embeddings=s["seq"],
        hidden_dropout_prob=p,
        attention_probs_dropout_prob=p,
        num_labels=3 if task_name == "classify" else 2,
        attn_implementation="sdpa",
    )
    kw = dict(input_ids=x["tokens"], token_type_ids=x["segments"], attention_mask=x["mask"].long())
    model: transformers.BertPreTrainedModel
    if task_name == "pretrain":
        model = transformers.BertForPreTraining(cfg)
        labels = torch.full_like(x["tokens"], -100).scatter(1, x["positions"], x["mlm_labels"])
        kw.update(labels=labels, next_sentence_label=x["nsp"])
    elif task_name == "classify":
        model = transformers.BertForSequenceClassification(cfg)
        kw.update(labels=x["classes"])
    else:
        model = transformers.BertForQuestionAnswering(cfg)
        kw.update(start_positions=x["starts"], end_positions=x["ends"])
    return model, lambda: model(**kw).loss


def job(spec: dict[str, Any]) -> dict[str, Any]:
    import torch

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from jobs import engine, result, timed

    torch.set_num_threads(spec["threads"])
    if spec["impl"] == "fullrank":
        from fullrank.fast import keep_freed_memory

        keep_freed_memory()  # as the `fullrank` command does
    torch.manual_seed(0)
    s = SHAPE
    x = batch(s)
    build = hf_step if spec["impl"] == "hf" else fullrank_step
    model, loss_fn = build(spec["workload"], s, x)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True if spec["impl"] == "fullrank" else None)

    precision: contextlib.AbstractContextManager[None] = contextlib.nullcontext()
    if spec.get("precision") == "bf16":  # autocast, master weights float32: `train.precision=bf16`
        precision = torch.autocast("cpu", dtype=torch.bfloat16)

    def step() -> None:
        with precision:
            loss = loss_fn()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    with engine(spec, model):  # fullrank's speed engine, as `fullrank train` enters it
        times = timed(step, spec)
    # the FLOPs of the whole computation, as Hugging Face runs it (every position through every
    # block and, in pre-training, the output projection): 6 × (encoder matrices) per token, the
    # attention scores, the output projection. fullrank skips the rows no loss reads (the last
    # block outside [CLS] and the predicted positions), so its GFLOP/s is the rate of the same work.
    tokens = s["batch"] * s["seq"]
    matrices = s["layers"] * (4 * s["d"] ** 2 + 2 * s["d"] * s["d_ff"])
    attention = 6 * 2 * s["layers"] * s["batch"] * s["seq"] ** 2 * s["d"]
    out = 0
    if task_of(spec["workload"]) == "pretrain":
        out = 6 * tokens * (s["d"] ** 2 + s["vocab"] * s["d"])
    return result(spec, model, times, s["batch"], "sequences/s", 6 * matrices * tokens + attention + out)


def main() -> None:
    if len(sys.argv) == 2 and sys.argv[1].startswith("{"):
        print(json.dumps(job(json.loads(sys.argv[1]))))
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", nargs="*", default=list(WORKLOADS), choices=WORKLOADS)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=8, help="timed steps per job")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument(
        "--cpu-time",
        action="store_true",
        help="time steps by the process's CPU time (with --threads 1: steadier than "
        "wall time on cores that other jobs share)",
    )
    ap.add_argument(
        "--precision",
        choices=("fp32", "bf16"),
        default="fp32",
        help="bf16: every side under bfloat16 autocast (float32 weights and optimizer), as "
        "`train.precision=bf16` runs fullrank",
    )
    ap.add_argument(
        "--name", help="the results' file name in bench/results (default: bert[-N-threads][-bf16])"
    )
    args = ap.parse_args()
    info = machine()
    print(
        f"machine: {info.get('cpu')} · {info['cpu_count']} CPUs · torch {info['torch']} · "
        f"transformers {info['transformers']}"
    )
    sections, data = [], {"machine": info, "shape": SHAPE, "workloads": {}}
    for workload in args.only:
        specs = {
            impl: {
                "workload": workload,
                "impl": impl,
                "threads": args.threads,
                "steps": args.steps,
                "warmup": 2,
                "clock": "cpu" if args.cpu_time else "wall",
                "precision": args.precision,
            }
            for impl in IMPLS
        }
        print(f"\n== {workload} ({args.rounds} interleaved rounds)")
        load = [os.getloadavg()[0]]
        results = interleaved(specs, args.rounds, script=Path(__file__).resolve())
        load.append(os.getloadavg()[0])
        about = (
            f"BERT's dropout {DROPOUT[workload]} on both sides (other random draws on each); "
            if workload in DROPOUT
            else ""
        )
        lines = [
            f"## {workload}",
            "",
            f"{about}load average (1 min) {load[0]:.1f} before, {load[1]:.1f} after.",
            "",
            "| implementation | params | sequences/s | step ms | peak RSS MB "
            "| vs Hugging Face (paired) | per-round ratios |",
            "|---|---|---|---|---|---|---|",
        ]
        rows = {}
        for impl, res in results.items():
            value = median(res)
            if value is None:
                lines.append(f"| {IMPLS[impl]} | — | error: {res[0].get('error')} | | | | |")
                continue
            ratio = paired_ratio(res, results["hf"]) if impl != "hf" else None
            per_round = (
                []
                if impl == "hf"
                else [
                    a["value"] / b["value"]
                    for a, b in zip(res, results["hf"])
                    if "error" not in a and "error" not in b
                ]
            )
            rows[impl] = {
                "value": value,
                "step_ms": median(res, "step_ms"),
                "params": res[0].get("params"),
                "peak_rss_mb": median(res, "peak_rss_mb"),
                "ratio_vs_hf": ratio,
                "rounds": [r.get("value") for r in res],
                "round_ratios": per_round,
            }
            spread = f"{min(per_round):.2f}–{max(per_round):.2f}" if per_round else ""
            lines.append(
                f"| {IMPLS[impl]} | {rows[impl]['params']:,} | {value:.2f} | "
                f"{rows[impl]['step_ms']:.0f} | {rows[impl]['peak_rss_mb']:.0f} | "
                f"{'' if ratio is None else f'{ratio:.2f}×'} | {spread} |"
            )
        sections.append("\n".join(lines) + "\n")
        data["workloads"][workload] = {"rows": rows, "raw": results, "load_average": load}
        print(sections[-1])
    shape = ", ".join(f"{k} {v}" for k, v in SHAPE.items())
    precision = "float32" if args.precision == "fp32" else "bfloat16 autocast"
    md = (
        f"# BERT training steps: fullrank against Hugging Face\n\n{info.get('cpu')}, "
        f"{args.threads} threads, {precision}, {args.rounds} interleaved rounds of {args.steps} timed "
        f"steps ({info['date']}), {'process CPU' if args.cpu_time else 'wall'} time; {shape}. "
        f"Ratios are medians of per-round ratios (> 1 = fullrank faster).\n\n" + "\n".join(sections)
    )
    name = "bert" if args.threads == 2 else f"bert-{args.threads}-threads"
    write(args.name or (name if args.precision == "fp32" else f"{name}-bf16"), md, data)


if __name__ == "__main__":
    main()
