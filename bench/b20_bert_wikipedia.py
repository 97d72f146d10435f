"""[B20]'s fixed against standard heads on the Wikipedia recipe: a table and a plot of the
pre-training runs of ``configs/sweeps/b20_bert_wikipedia.yaml`` (n = 64) or
``configs/sweeps/b20_bert_wikipedia_n128.yaml`` (n = 128) — masked-LM accuracy against steps,
final accuracy and perplexity on all of ``valid.txt.xz`` — and of the fine-tuning runs that
started from them (SQuAD EM/F1 and MNLI accuracy, mean ± std over the seeds that finished).

    python bench/b20_bert_wikipedia.py                      # runs/sweeps/b20_bert_wikipedia
    python bench/b20_bert_wikipedia.py --sweep n128         # runs/sweeps/b20_bert_wikipedia_n128
    python bench/b20_bert_wikipedia.py --run NAME=RUN_DIR   # a pre-training run found elsewhere

Rows are the sweep's points by group name (:data:`SWEEPS`); a model whose run has not finished
shows its last evaluation. The report is ``--results`` (markdown) and ``--plot`` (PNG).
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from bert_probes import curve, finished, save_report

ROOT = Path(__file__).resolve().parents[1]
# sweep → (sequence length, sweep group without the arm → (row label, heads × d_head, d_ff, d_model))
SWEEPS = {
    "n64": (
        64,
        {
            "": ("fixed_h8", "8 × 64", 512, 128),
            "d_headnone-d_ff1280": ("standard_h8_wide", "8 × 16", 1280, 128),
            "d_headnone-d_model168-d_ff672": ("standard_d168_h8", "8 × 21", 672, 168),
            "n_heads4-d_ff256": ("fixed_h4", "4 × 64", 256, 128),
            "n_heads4-d_headnone": ("standard_h4", "4 × 32", 512, 128),
        },
    ),
    "n128": (
        128,
        {
            "": ("fixed_h2_n128", "2 × 128", 256, 128),
            "d_headnone-d_ff512": ("standard_h2_n128", "2 × 64", 512, 128),
            "n_heads4-d_headnone-d_ff512": ("recipe", "4 × 32", 512, 128),
        },
    ),
}
MARKS = (1000, 2000, 3000, 4000, 5000)


def point(arm: str, group: str, seed: int) -> str:
    return "-".join(p for p in (arm, group, f"s{seed}") if p)


def mean_std(values: list[float]) -> str:
    if not values:
        return "–"
    if len(values) == 1:
        return f"{values[0]:.2f} (1 seed)"
    return f"{statistics.mean(values):.2f} ± {statistics.stdev(values):.2f} ({len(values)} seeds)"


def fine_tuning(out: Path, group: str) -> tuple[str, str, str]:
    em, f1, acc = [], [], []
    for seed in range(3):
        squad = finished(out / point("squad", group, seed))
        if squad and squad.get("test"):
            em.append(squad["test"]["em"])
            f1.append(squad["test"]["f1"])
        mnli = finished(out / point("mnli", group, seed))
        if mnli and mnli.get("valid"):
            acc.append(mnli["valid"]["accuracy"])
    return mean_std(em), mean_std(f1), mean_std(acc)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sweep", choices=sorted(SWEEPS), default="n64", help="which sweep file's runs")
    ap.add_argument("--out", type=Path, help="the sweep's run folder (default: runs/sweeps/NAME)")
    ap.add_argument(
        "--run",
        nargs="*",
        default=[],
        metavar="NAME=RUN_DIR",
        help="a model's pre-training run outside --out (NAME from the table)",
    )
    ap.add_argument("--results", type=Path, help="default: bench/results/NAME.md")
    ap.add_argument("--plot", type=Path, help="default: docs/img/NAME.png")
    args = ap.parse_args()
    n, models = SWEEPS[args.sweep]
    name = "b20_bert_wikipedia" + ("" if args.sweep == "n64" else f"_{args.sweep}")
    args.out = args.out or ROOT / "runs" / "sweeps" / name
    args.results = args.results or ROOT / "bench" / "results" / f"{name}.md"
    args.plot = args.plot or ROOT / "docs" / "img" / f"{name}.png"
    elsewhere = dict(item.split("=", 1) for item in args.run)

    rows = [
        "| model | d_model | heads × d_head | d_ff | params | MLM acc % at "
        + " / ".join(f"{m:,}" for m in MARKS)
        + " steps | final MLM acc % | final MLM ppl | pre-training min | SQuAD EM | SQuAD F1 | MNLI dev |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    fig, ax = plt.subplots(figsize=(8, 5))
    for group, (label, heads, d_ff, d_model) in models.items():
        run_dir = Path(elsewhere.get(label, args.out / point("pre", group, 0)))
        points, final = curve(run_dir)
        if not points:
            continue
        steps, acc, _ = zip(*points)
        ax.plot(
            steps,
            acc,
            marker="o",
            ms=3,
            ls="-" if label.startswith("fixed") else "--",
            label=f"{label} ({heads})",
        )
        at = {s: a for s, a, _ in points}
        marks = " / ".join(f"{at[s]:.1f}" if s in at else "–" for s in MARKS)
        v = (final or {}).get("valid") or {}
        scores = f"{v['mlm_acc']:.2f} | {v['mlm_ppl']:.1f}" if v else f"stopped at step {steps[-1]} | –"
        minutes = f"{final['seconds'] / 60:.1f}" if final else "–"
        params = f"{final['params']:,}" if final else "–"
        em, f1, mnli = fine_tuning(args.out, group)
        cells = [label, d_model, heads, d_ff, params, marks, scores, minutes, em, f1, mnli]
        rows.append("| " + " | ".join(str(c) for c in cells) + " |")
    ax.text(250, 15.2, "unigram plateau (~15%)", color="grey", fontsize=8)
    ax.set_xlabel(f"pre-training step (batch 32 × n = {n} tokens)")
    ax.set_title("[B20] on the Wikipedia recipe: fixed (solid) against standard heads (dashed)")
    ax.legend(fontsize=8, loc="lower right")
    save_report(fig, ax, rows, args.plot, args.results)


if __name__ == "__main__":
    main()
