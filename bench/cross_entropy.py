"""The output projection and cross-entropy of a language model, fullrank's fused loss against the
plain PyTorch one, in one process.

    python bench/cross_entropy.py                   # 2 threads, wall time
    python bench/cross_entropy.py --threads 1 --rounds 15

At the language-model shapes of ``bench/run.py`` (LM S: 2,048 rows, d_model 256, vocabulary
8,192; LM M: 1,024 rows, 512, 32,000) and WikiText-2's word vocabulary (2,048 rows, 256,
33,278), float32, in paired rounds (both sides once per round, the order reversed every other
round):

- training (forward and backward): ``fullrank.training.losses.linear_cross_entropy``, whose
  chunks compute their logits, loss and gradient while in cache, against
  ``F.cross_entropy(h @ Wᵀ)`` with PyTorch's autograd — what nanoGPT and Hugging Face's
  GPT-2 run;
- evaluation (no gradient): the same two, forward only.

Both give the same loss (checked every round to 1e-4 relative). Label smoothing 0.1 in
training, as [V17] trains. Results: ``bench/results/cross_entropy.{md,json}`` (another
``--threads`` than 2: ``cross_entropy-N-threads``).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import machine, write

SHAPES = {  # name → (rows, d_model, vocabulary)
    "LM S": (2048, 256, 8192),
    "LM M": (1024, 512, 32000),
    "WikiText-2 words": (2048, 256, 33278),
}
SMOOTHING = 0.1


def sides(rows: int, d: int, vocab: int, training: bool) -> dict[str, Callable[[], float]]:
    """fullrank's fused loss and the plain one on the same ``h (rows, d)``, ``W (vocab, d)`` and
    targets; each call returns the loss (after its backward pass when ``training``)."""
    import torch
    import torch.nn.functional as F

    from fullrank.training.losses import linear_cross_entropy

    g = torch.Generator().manual_seed(0)
    h = torch.randn(rows, d, generator=g).requires_grad_(training)
    w = (torch.randn(vocab, d, generator=g) * d**-0.5).requires_grad_(training)
    target = torch.randint(0, vocab, (rows,), generator=g)
    eps = SMOOTHING if training else 0.0

    def fused() -> float:
        with torch.set_grad_enabled(training):
            loss = linear_cross_entropy(h, w, target, epsilon=eps).loss
        if training:
            h.grad = w.grad = None
            loss.backward()
        return loss.item()

    def plain() -> float:
        with torch.set_grad_enabled(training):
            loss = F.cross_entropy(h @ w.T, target, reduction="sum", label_smoothing=eps)
        if training:
            h.grad = w.grad = None
            loss.backward()
        return loss.item()

    return {"fullrank": fused, "PyTorch": plain}


def main() -> None:
    import torch

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=9)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    from fullrank.fast import keep_freed_memory

    keep_freed_memory()  # for both sides alike: one process
    rows_out: list[str] = []
    data = {"machine": machine(), "threads": args.threads, "rounds": args.rounds, "rows": []}
    for name, (n, d, v) in SHAPES.items():
        for training in (True, False):
            fns = sides(n, d, v, training)
            for f in fns.values():  # warm-up, untimed
                f()
            times: dict[str, list[float]] = {k: [] for k in fns}
            for r in range(args.rounds):
                order = list(fns) if r % 2 == 0 else list(reversed(fns))
                losses = {}
                for k in order:
                    start = time.perf_counter()
                    losses[k] = fns[k]()
                    times[k].append(time.perf_counter() - start)
                a, b = losses["fullrank"], losses["PyTorch"]
                assert abs(a - b) <= 1e-4 * abs(b), (name, a, b)
            ratios = [p / f for f, p in zip(times["fullrank"], times["PyTorch"])]
            row = {
                "shape": name,
                "rows": n,
                "d_model": d,
                "vocab": v,
                "pass": "training" if training else "evaluation",
                "fullrank_ms": statistics.median(times["fullrank"]) * 1e3,
                "pytorch_ms": statistics.median(times["PyTorch"]) * 1e3,
                "ratio": statistics.median(ratios),
                "ratio_range": [min(ratios), max(ratios)],
            }
            data["rows"].append(row)
            rows_out.append(
                f"| {name} | {n:,} × {d} → {v:,} | {row['pass']} | {row['fullrank_ms']:.1f} | "
                f"{row['pytorch_ms']:.1f} | **{row['ratio']:.2f}×** ({min(ratios):.2f}–{max(ratios):.2f}) |"
            )
            print(rows_out[-1], flush=True)
    m = data["machine"]
    md = "\n".join(
        [
            "# Output projection + cross-entropy: fullrank's fused loss against PyTorch's",
            "",
            f"{m.get('cpu', m['processor'])}, {args.threads} thread(s), float32, wall time, "
            f"{args.rounds} paired rounds in one process ({m['date']}); label smoothing "
            f"{SMOOTHING} in training.",
            "",
            "| shape | rows × d_model → vocabulary | pass | fullrank ms | PyTorch ms "
            "| PyTorch ÷ fullrank (per round) |",
            "|---|---|---|---|---|---|",
            *rows_out,
            "",
        ]
    )
    name = "cross_entropy" if args.threads == 2 else f"cross_entropy-{args.threads}-threads"
    md_path, _ = write(name, md, data)
    print(f"wrote {md_path}")


if __name__ == "__main__":
    main()
