"""Where a BERT fine-tuning step's time goes on a CPU, and the fastest any float32 step could be.

    python bench/bert_floor.py                          # 1 thread, CPU time: steady under load
    python bench/bert_floor.py --threads 2 --rounds 20  # wall time, as bench/bert.py measures

In one process, in paired rounds (every item once per round, the order reversed every other
round), on ``bench/bert.py``'s model and batch (4 layers, d_model 256, 4 heads, d_ff 1024,
128 tokens, batch 16, dropout 0):

- fullrank's step (its defaults: the speed engine, fused AdamW) and Hugging Face's (SDPA);
- the step's matrix products alone: for every linear layer of the encoder, its forward product
  and the two of its backward pass, at the step's shapes;
- those products and the step's attention (``scaled_dot_product_attention``, forward and
  backward, four layers);
- one layer's attention core through each kernel: ``scaled_dot_product_attention``, the
  written-out ``attend()`` and the engine's ``kept_probabilities``, without and with dropout.

Both sides must compute the products and the attention, so Hugging Face's step over "products
+ attention" bounds the ratio that any implementation with these kernels, computing every
position, can reach (the span step, the default ``--workload``; the classification step leaves
out the last block's rows its loss does not read): every
other operation (GELU, LayerNorm, AdamW, embeddings, heads) would have to cost nothing. With
one thread the clock is the thread's CPU time, which other processes on the cores disturb far
less than wall time. Results: ``bench/results/bert-floor.{md,json}``.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bert import SHAPE, batch, fullrank_step, hf_step
from harness import machine, write


def steps(workload: str, stack: contextlib.ExitStack) -> dict[str, Callable[[], None]]:
    """fullrank's and Hugging Face's training steps; fullrank's speed engine entered on
    ``stack``."""
    import torch

    from fullrank import fast

    out: dict[str, Callable[[], None]] = {}
    for impl, build in (("fullrank", fullrank_step), ("Hugging Face", hf_step)):
        torch.manual_seed(0)
        model, loss_fn = build(workload, SHAPE, batch(SHAPE))
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True if impl == "fullrank" else None)
        if impl == "fullrank":
            stack.enter_context(fast.cpu(model))

        def step(loss_fn=loss_fn, opt=opt) -> None:
            loss_fn().backward()
            opt.step()
            opt.zero_grad(set_to_none=True)

        out[impl] = step
    return out


def products_and_attention() -> dict[str, Callable[[], None]]:
    """The step's matrix products alone, and with its attention calls."""
    import torch
    import torch.nn.functional as F

    s = SHAPE
    rows, d, f, h = s["batch"] * s["seq"], s["d"], s["d_ff"], s["heads"]
    g = torch.Generator().manual_seed(0)
    # (input, weight, output gradient) of the q/k/v, output, and two feed-forward products
    mats = [
        (torch.randn(rows, i, generator=g), torch.randn(o, i, generator=g), torch.randn(rows, o, generator=g))
        for i, o in ((d, 3 * d), (d, d), (d, f), (f, d))
    ]

    def products() -> None:
        for _ in range(s["layers"]):
            for x, w, gy in mats:
                torch.mm(x, w.t())  # forward
                torch.mm(gy, w)  # gradient of the input
                torch.mm(gy.t(), x)  # gradient of the weight

    b, t, dh = s["batch"], s["seq"], d // h
    qkv = torch.randn(b, t, 3 * d, generator=g, requires_grad=True)
    grad = torch.randn(b, h, t, dh, generator=g)
    mask = torch.ones(b, 1, 1, t, dtype=torch.bool)

    def attention() -> None:
        for _ in range(s["layers"]):
            q, k, v = (x.view(b, t, h, dh).transpose(1, 2) for x in qkv.split(d, dim=-1))
            F.scaled_dot_product_attention(q, k, v, attn_mask=mask).backward(grad)
            qkv.grad = None

    def both() -> None:
        products()
        attention()

    return {"matrix products alone": products, "matrix products + attention": both}


def attention_kernels() -> dict[str, Callable[[], None]]:
    """One layer's attention core, forward and backward, through each kernel."""
    import torch
    import torch.nn.functional as F

    from fullrank.fast.attention import kept_probabilities
    from fullrank.layers.attention import attend

    s = SHAPE
    b, t, d, h = s["batch"], s["seq"], s["d"], s["heads"]
    g = torch.Generator().manual_seed(1)
    qkv = torch.randn(b, t, 3 * d, generator=g, requires_grad=True)
    grad = torch.randn(b, t, d, generator=g)
    mask = torch.ones(b, 1, 1, t, dtype=torch.bool)
    kernels = {
        "SDPA": lambda q, k, v, p: F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p),
        "attend()": lambda q, k, v, p: attend(q, k, v, mask=mask, dropout_p=p),
        "kept_probabilities": lambda q, k, v, p: kept_probabilities(q, k, v, mask=mask, dropout_p=p),
    }

    def run(kernel, p: float) -> Callable[[], None]:
        def call() -> None:
            q, k, v = (x.view(b, t, h, d // h).transpose(1, 2) for x in qkv.split(d, dim=-1))
            kernel(q, k, v, p).transpose(1, 2).reshape(b, t, d).backward(grad)
            qkv.grad = None

        return call

    return {f"{name}, dropout {p}": run(kernel, p) for p in (0.0, 0.1) for name, kernel in kernels.items()}


def paired(
    items: dict[str, Callable[[], None]], rounds: int, clock: Callable[[], float], warmup: int = 2
) -> dict[str, list[float]]:
    """Seconds per call of every item, round by round (the order reversed every other round)."""
    names = list(items)
    for name in names:
        for _ in range(warmup):
            items[name]()
    times: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds):
        for name in names if r % 2 == 0 else names[::-1]:
            t0 = clock()
            items[name]()
            times[name].append(clock() - t0)
    return times


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workload", default="qa", choices=("classify", "qa"))
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    import os

    import torch

    from fullrank.fast import keep_freed_memory

    torch.set_num_threads(args.threads)
    keep_freed_memory()  # for every item alike: one process
    clock = time.thread_time if args.threads == 1 else time.perf_counter
    info = machine()
    load = [os.getloadavg()[0]]
    with contextlib.ExitStack() as stack:
        step_times = paired({**steps(args.workload, stack), **products_and_attention()}, args.rounds, clock)
    kernel_times = paired(attention_kernels(), args.rounds, clock)
    load.append(os.getloadavg()[0])

    def table(times: dict[str, list[float]], base: str) -> list[str]:
        lines = [f"| item | ms (median) | speed against {base} (paired) | per round |", "|---|---|---|---|"]
        for name, ts in times.items():
            ratios = [a / x for a, x in zip(times[base], ts)]
            lines.append(
                f"| {name} | {1000 * statistics.median(ts):.1f} | "
                f"{statistics.median(ratios):.2f} | {min(ratios):.2f}–{max(ratios):.2f} |"
            )
        return lines

    what = "thread CPU time" if args.threads == 1 else "wall time"
    md = "\n".join(
        [
            f"# A BERT {args.workload} step against its matrix products and attention",
            "",
            f"{info.get('cpu')}, {args.threads} thread(s), float32, {what}, {args.rounds} paired "
            f"rounds in one process ({info['date']}), load average (1 min) {load[0]:.1f} before, "
            f"{load[1]:.1f} after; {', '.join(f'{k} {v}' for k, v in SHAPE.items())}.",
            "",
            "## The step, and the work every implementation must do",
            "",
            *table(step_times, "Hugging Face"),
            "",
            "## One layer's attention core, forward and backward",
            "",
            *table(kernel_times, "SDPA, dropout 0.0"),
            "",
            "SDPA: ``scaled_dot_product_attention`` (its written-out path with dropout).",
            "",
        ]
    )
    print(md)
    write(
        "bert-floor",
        md,
        {
            "machine": info,
            "shape": SHAPE,
            "threads": args.threads,
            "clock": what,
            "load_average": load,
            "steps": step_times,
            "attention": kernel_times,
        },
    )


if __name__ == "__main__":
    main()
