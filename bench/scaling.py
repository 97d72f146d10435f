"""Time and memory of a training step as the sequence length and the number of heads grow.

    python bench/scaling.py                 # n = 128 … 4096, heads = 4 … 64 (about 10 minutes)

fullrank's ``DecoderLM`` (d_model 256, 4 layers, d_head 32, d_ff 1024, vocab 8192; one sequence
per step), each point in its own process (median of the timed steps). The cost model it is set
against: attention ``O(n²·h·d_head)`` per layer (q·kᵀ and p·v) and projections
``O(n·d·h·d_head)`` plus the feed-forward and vocabulary ``O(n·d·(d_ff + V))`` — the training
FLOPs ``6·n·(matmul parameters) + 12·L·n²·h·d_head`` (the full n² is counted; causal kernels skip
about half). Output: ``bench/results/scaling.{md,json,png}``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import RESULTS, machine, run_job, write

BASE = dict(vocab=8192, d=256, layers=4, heads=8, d_head=32, d_ff=1024, seq=256, batch=1)


def flops(s: dict[str, int]) -> dict[str, float]:
    """Training FLOPs of one step, split into projections (incl. FFN, vocab) and attention."""
    tokens = s["batch"] * s["seq"]
    inner = s["heads"] * s["d_head"]
    proj = 6 * tokens * (s["layers"] * (4 * s["d"] * inner + 2 * s["d"] * s["d_ff"]) + s["vocab"] * s["d"])
    attn = 12 * s["layers"] * s["batch"] * s["seq"] ** 2 * inner
    return {"projections": proj, "attention": attn, "total": proj + attn}


def sweep(points: list[dict[str, int]], threads: int, steps: int) -> list[dict]:
    out = []
    for s in points:
        res = run_job(
            {
                "workload": "lm",
                "impl": "fullrank",
                "shape": s,
                "threads": threads,
                "steps": steps,
                "warmup": 2,
            },
            timeout=1800,
        )
        f = flops(s)
        row = {**s, **{f"flops_{k}": v for k, v in f.items()}}
        if "error" in res:
            row["error"] = res["error"]
        else:
            row.update(
                step_ms=res["step_ms"],
                step_rss_mb=res["step_rss_mb"],
                peak_rss_mb=res["peak_rss_mb"],
                gflops=res["gflops"],
            )
        print(
            f"  n={s['seq']:5d} h={s['heads']:3d}: {row.get('step_ms', float('nan')):9.1f} ms, "
            f"step memory {row.get('step_rss_mb', float('nan')):7.1f} MB, "
            f"attention share of FLOPs {f['attention'] / f['total']:.0%}"
        )
        out.append(row)
    return out


def plot(by_n: list[dict], by_h: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    from matplotlib.ticker import NullFormatter, ScalarFormatter

    from fullrank.training.metrics import plain_log_ticks

    def plain_axes(ax, xs) -> None:
        """Ticks at the measured x values, plain numbers on both log axes."""
        ax.set_xticks(xs)
        ax.xaxis.set_major_formatter(ScalarFormatter())
        ax.xaxis.set_minor_formatter(NullFormatter())
        plain_log_ticks(ax.yaxis)

    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    for ax, rows, key, label in (
        (axes[0], by_n, "seq", "sequence length n"),
        (axes[1], by_h, "heads", "heads h (d_head 32)"),
    ):
        rows = [r for r in rows if "step_ms" in r]
        x = [r[key] for r in rows]
        t = [r["step_ms"] for r in rows]
        ax.loglog(x, t, "o-", label="measured step time")
        # theory: FLOPs scaled to the first point's time
        scale = t[0] / rows[0]["flops_total"]
        ax.loglog(x, [r["flops_total"] * scale for r in rows], "--", label="∝ FLOPs (model)")
        ax.loglog(x, [r["flops_attention"] * scale for r in rows], ":", label="attention part")
        ax.loglog(x, [r["flops_projections"] * scale for r in rows], ":", label="projection part")
        ax.set(xlabel=label, ylabel="ms per training step", title=f"time vs {label}")
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=8)
        plain_axes(ax, x)
    rows = [r for r in by_n if "step_rss_mb" in r]
    n = np.array([r["seq"] for r in rows], dtype=float)
    mem = np.array([max(r["step_rss_mb"], 1e-3) for r in rows])
    axes[2].loglog(n, mem, "o-", label="memory growth during the steps (RSS)")
    if len(rows) >= 2:  # a straight line a + b·n through the points (least squares)
        b, a = np.polyfit(n, mem, 1)
        axes[2].loglog(n, a + b * n, "--", label=f"linear fit {a:.0f} + {b * 1000:.0f}·n/1000 MB")
    axes[2].set(xlabel="sequence length n", ylabel="MB", title="memory vs n (fused attention)")
    axes[2].grid(alpha=0.3, which="both")
    axes[2].legend(fontsize=8)
    plain_axes(axes[2], list(n.astype(int)))
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lengths", type=int, nargs="*", default=[128, 256, 512, 1024, 2048, 4096])
    ap.add_argument("--heads", type=int, nargs="*", default=[4, 8, 16, 32, 64])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--out", type=Path, default=RESULTS, help="folder for scaling.{md,json,png}")
    args = ap.parse_args(argv)
    print("sequence length sweep")
    by_n = sweep([{**BASE, "seq": n} for n in args.lengths], args.threads, args.steps)
    print("heads sweep (fixed d_head)")
    by_h = sweep([{**BASE, "heads": h} for h in args.heads], args.threads, args.steps)
    lines = [
        "| sweep | n | heads | step ms | step memory MB | attention FLOP share | ms per GFLOP |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, rows in (("n", by_n), ("heads", by_h)):
        for r in rows:
            if "step_ms" in r:
                lines.append(
                    f"| {name} | {r['seq']} | {r['heads']} | {r['step_ms']:.1f} | "
                    f"{r['step_rss_mb']:.1f} | "
                    f"{r['flops_attention'] / r['flops_total']:.0%} | "
                    f"{r['step_ms'] / (r['flops_total'] / 1e9):.2f} |"
                )
    md = "# Scaling of a training step\n\n" + "\n".join(lines) + "\n"
    write("scaling", md, {"machine": machine(), "by_n": by_n, "by_heads": by_h}, args.out)
    plot(by_n, by_h, args.out / "scaling.png")
    print(md + f"\nwrote {args.out / 'scaling.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
