"""Validation masked-LM accuracy against training steps for several ``task: bert`` runs on one
plot, from their ``metrics.jsonl`` (the periodic evaluations) and ``results.json`` (the final
one on all validation sequences, drawn as a star).

    python bench/mlm_curves.py RUN[=LABEL] [RUN[=LABEL] ...] -o docs/img/FIGURE.png
"""

from __future__ import annotations

import argparse
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from fullrank.training.metrics import read_final, read_metrics


def curve(run: Path) -> tuple[list[int], list[float]]:
    """(steps, MLM accuracy %) of ``run``'s periodic validation."""
    valid = [r for r in read_metrics(run) if r["split"] == "valid" and "mlm_acc" in r]
    return [r["step"] for r in valid], [r["mlm_acc"] for r in valid]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", help="run directories, each optionally =LABEL")
    ap.add_argument("-o", "--output", type=Path, required=True, help="PNG to write (must be new)")
    args = ap.parse_args()
    if args.output.exists():
        raise SystemExit(f"{args.output} exists; choose a new path")
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for spec in args.runs:
        path, _, label = spec.partition("=")
        run = Path(path)
        steps, acc = curve(run)
        (line,) = ax.plot(steps, acc, marker=".", label=label or run.name)
        final = read_final(run)
        if final is not None and "mlm_acc" in final[1]:
            ax.plot(final[0], final[1]["mlm_acc"], "*", ms=12, color=line.get_color())
    ax.set_xlabel("step (32 segments of 128 tokens)")
    ax.set_ylabel("validation MLM accuracy % (15% masks)")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(args.output, dpi=120)
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
