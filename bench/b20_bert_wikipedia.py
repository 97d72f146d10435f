"""[B20]'s fixed against standard heads on the Wikipedia recipe: a table and a plot of the
pre-training runs of ``configs/sweeps/b20_bert_wikipedia.yaml`` (n = 64) or
``configs/sweeps/b20_bert_wikipedia_n128.yaml`` (n = 128) or
``configs/sweeps/b20_bert_wikipedia_h8_seeds.yaml`` (the 8-head pair at n = 64) or
``configs/sweeps/b20_bert_gpu.yaml`` (the same comparison four times wider, on one GPU) —
masked-LM accuracy against steps, final accuracy and perplexity on all of ``valid.txt.xz`` — and
of the fine-tuning runs that started from them (SQuAD EM/F1 and MNLI accuracy, mean ± std over the seeds
that finished), and where the sweep has them (``squad_scratch``), of SQuAD from random weights.

    python bench/b20_bert_wikipedia.py                      # runs/sweeps/b20_bert_wikipedia
    python bench/b20_bert_wikipedia.py --sweep n128         # runs/sweeps/b20_bert_wikipedia_n128
    python bench/b20_bert_wikipedia.py --run NAME=RUN_DIR   # a pre-training run found elsewhere
    python bench/b20_bert_wikipedia.py --sweep n128 --seeds 1 2 --out DIR   # two pre-training seeds
    python bench/b20_bert_wikipedia.py --sweep h8 --seeds 1 2   # runs/sweeps/b20_bert_wikipedia_h8_seeds
    python bench/b20_bert_wikipedia.py --sweep gpu --seeds 0 1  # runs/sweeps/b20_bert_gpu (one GPU)

Rows are the sweep's points by group name (:data:`SWEEPS`), one per pre-training seed: the run
``pre-GROUP-sP`` and the fine-tuning runs ``ARM-GROUP-pP-sF`` (for the first seed also the
sweep's own ``ARM-GROUP-sF``); with several seeds a second table gives each model's mean ± std
over them. A model whose run has not finished shows its last evaluation. The report is
``--results`` (markdown) and ``--plot`` (PNG).
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
CPU_MARKS = (1000, 2000, 3000, 4000, 5000)
# sweep → (sweep file's name, sequence length, batch size, steps the table reads,
#           sweep group without the arm → (row label, heads × d_head, d_ff, d_model))
SWEEPS = {
    "h8": (
        "b20_bert_wikipedia_h8_seeds",
        64,
        32,
        CPU_MARKS,
        {
            "": ("fixed_h8", "8 × 64", 512, 128),
            "d_headnone-d_ff1280": ("standard_h8_wide", "8 × 16", 1280, 128),
        },
    ),
    "n64": (
        "b20_bert_wikipedia",
        64,
        32,
        CPU_MARKS,
        {
            "": ("fixed_h8", "8 × 64", 512, 128),
            "d_headnone-d_ff1280": ("standard_h8_wide", "8 × 16", 1280, 128),
            "d_headnone-d_model168-d_ff672": ("standard_d168_h8", "8 × 21", 672, 168),
            "n_heads4-d_ff256": ("fixed_h4", "4 × 64", 256, 128),
            "n_heads4-d_headnone": ("standard_h4", "4 × 32", 512, 128),
        },
    ),
    "n128": (
        "b20_bert_wikipedia_n128",
        128,
        32,
        CPU_MARKS,
        {
            "": ("fixed_h2_n128", "2 × 128", 256, 128),
            "d_headnone-d_ff512": ("standard_h2_n128", "2 × 64", 512, 128),
            "n_heads4-d_headnone-d_ff512": ("recipe", "4 × 32", 512, 128),
            "d_model96-n_heads3-d_ff512": ("fixed_d96_h3_n128", "3 × 128", 512, 96),
        },
    ),
    "gpu": (
        "b20_bert_gpu",
        128,
        128,
        (1000, 2000, 3000),
        {
            "": ("standard_h8", "8 × 64", 2048, 512),
            "d_head128-d_ff1024": ("fixed_h8", "8 × 128", 1024, 512),
            "d_model384-n_heads6-d_head128-d_ff2848": ("fixed_d384_h6", "6 × 128", 2848, 384),
        },
    ),
}


def point(arm: str, group: str, seed: int | str, pre_seed: int | None = None) -> str:
    """A sweep point's name (``fullrank.sweeps.plan.point_name``): ARM-GROUP[-pP]-sS."""
    pre = f"p{pre_seed}" if pre_seed is not None else ""
    return "-".join(p for p in (arm, group, pre, f"s{seed}") if p)


def mean_std(values: list[float], unit: str = "seed") -> str:
    if not values:
        return "–"
    if len(values) == 1:
        return f"{values[0]:.2f} (1 {unit})"
    return f"{statistics.mean(values):.2f} ± {statistics.stdev(values):.2f} ({len(values)} {unit}s)"


def fine_tuning(out: Path, group: str, pre_seed: int, first: bool) -> tuple[list, list, list]:
    """SQuAD EM, F1 and MNLI accuracy of the finished fine-tuning runs from ``pre_seed``'s run."""
    em, f1, acc = [], [], []

    def runs(arm: str) -> list[Path]:
        found = sorted(out.glob(point(arm, group, "*", pre_seed)))
        if not found and first:
            found = [out / point(arm, group, seed) for seed in range(3)]
        return found

    for run in runs("squad"):
        squad = finished(run)
        if squad and squad.get("test"):
            em.append(squad["test"]["em"])
            f1.append(squad["test"]["f1"])
    for run in runs("mnli"):
        mnli = finished(run)
        if mnli and mnli.get("valid"):
            acc.append(mnli["valid"]["accuracy"])
    return em, f1, acc


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
    ap.add_argument("--seeds", nargs="*", type=int, default=[0], help="pre-training seeds to read")
    ap.add_argument("--results", type=Path, help="default: bench/results/NAME.md")
    ap.add_argument("--plot", type=Path, help="default: docs/img/NAME.png")
    args = ap.parse_args()
    name, n, batch, marks, models = SWEEPS[args.sweep]
    args.out = args.out or ROOT / "runs" / "sweeps" / name
    args.results = args.results or ROOT / "bench" / "results" / f"{name}.md"
    args.plot = args.plot or ROOT / "docs" / "img" / f"{name}.png"
    elsewhere = dict(item.split("=", 1) for item in args.run)

    header = (
        "| model | d_model | heads × d_head | d_ff | params |"
        + (" pre-training seed |" if len(args.seeds) > 1 else "")
        + " MLM acc % at "
        + " / ".join(f"{m:,}" for m in marks)
        + " steps | final MLM acc % | final MLM ppl | steps | pre-training min"
        + " | SQuAD EM | SQuAD F1 | MNLI dev |"
    )
    scratch = any(args.out.glob("squad_scratch-*"))  # SQuAD from random weights, once a model
    header += " SQuAD F1 from random weights |" if scratch else ""
    rows = [header, "|" + "---|" * (header.count("|") - 1)]
    summary = [
        "| model | heads × d_head | params | pre-training seeds | final MLM acc % | final MLM ppl | "
        "SQuAD F1 | MNLI dev (all fine-tuning runs) |"
        + (" SQuAD F1 from random weights |" if scratch else ""),
        "|---|---|---|---|---|---|---|---|" + ("---|" if scratch else ""),
    ]
    fig, ax = plt.subplots(figsize=(8, 5))
    for i, (group, (label, heads, d_ff, d_model)) in enumerate(models.items()):
        accs, ppls, all_f1, all_mnli, params, scratch_f1 = [], [], [], [], "–", "–"
        for seed in args.seeds:
            default = args.out / point("pre", group, seed)
            run_dir = Path(elsewhere[label]) if label in elsewhere and seed == args.seeds[0] else default
            points, final = curve(run_dir)
            if not points:
                continue
            steps, acc, _ = zip(*points)
            ax.plot(
                steps,
                acc,
                marker="os^"[args.seeds.index(seed) % 3],
                ms=3,
                color=f"C{i}",
                ls="-" if label.startswith("fixed") else "--",
                label=f"{label} ({heads})" + (f", seed {seed}" if len(args.seeds) > 1 else ""),
            )
            at = {s: a for s, a, _ in points}
            read = " / ".join(f"{at[s]:.1f}" if s in at else "–" for s in marks)
            v = (final or {}).get("valid") or {}
            scores = f"{v['mlm_acc']:.2f} | {v['mlm_ppl']:.1f}" if v else f"stopped at step {steps[-1]} | –"
            if v:
                accs.append(v["mlm_acc"])
                ppls.append(v["mlm_ppl"])
            minutes = f"{final['seconds'] / 60:.1f}" if final else "–"
            taken = f"{final['steps']:,}" if final else "–"
            params = f"{final['params']:,}" if final else params
            em, f1, mnli = fine_tuning(args.out, group, seed, seed == args.seeds[0])
            all_f1 += f1
            all_mnli += mnli
            cells = [label, d_model, heads, d_ff, params]
            cells += [seed] if len(args.seeds) > 1 else []
            cells += [read, scores, taken, minutes, mean_std(em), mean_std(f1), mean_std(mnli)]
            if scratch:
                done = (
                    finished(args.out / point("squad_scratch", group, 0)) if seed == args.seeds[0] else None
                )
                if done and done.get("test"):
                    scratch_f1 = f"{done['test']['f1']:.2f}"
                cells.append(scratch_f1 if seed == args.seeds[0] else "–")
            rows.append("| " + " | ".join(str(c) for c in cells) + " |")
        if accs:
            seeds_done = f"{len(accs)}"
            cells = [label, heads, params, seeds_done, mean_std(accs), mean_std(ppls)]
            cells += [mean_std(all_f1, "run"), mean_std(all_mnli, "run")] + ([scratch_f1] if scratch else [])
            summary.append("| " + " | ".join(str(c) for c in cells) + " |")
    if len(args.seeds) > 1:
        rows += ["", *summary]
    ax.text(250, 15.2, "unigram plateau (~15%)", color="grey", fontsize=8)
    ax.set_xlabel(f"pre-training step (batch {batch} × n = {n} tokens)")
    ax.set_title("[B20] on the Wikipedia recipe: fixed (solid) against standard heads (dashed)")
    ax.legend(fontsize=8, loc="lower right")
    save_report(fig, ax, rows, args.plot, args.results)


if __name__ == "__main__":
    main()
