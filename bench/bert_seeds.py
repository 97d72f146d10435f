"""Does a pre-training setting leave the masked-LM plateau with every seed? The first steps of
``configs/bert/wikipedia/recipe.yaml`` (its whole 5,000-step schedule, stopped early with
``train.stop_after``), several seeds per setting, all with the same WordPiece vocabulary;
validation MLM accuracy (BERT's 15% masking, fixed masks) every 250 steps.

    python bench/bert_seeds.py --run --jobs 2                 # train what is missing
    python bench/bert_seeds.py                                # table and plot of what has run

Each run is ``fullrank train configs/bert/wikipedia/recipe.yaml name=SETTING_sSEED
train.seed=SEED train.stop_after=STOP`` plus the setting's overrides (:data:`SETTINGS`), one
thread. A run counts as having left the plateau when its validation accuracy at ``--stop`` is
above ``--plateau`` (15%: what a model reaches without using context, docs/bert.md).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from bert_probes import curve, save_report

ROOT = Path(__file__).resolve().parents[1]
CONFIG = "configs/bert/wikipedia/recipe.yaml"
# what each setting changes in the recipe
SETTINGS: dict[str, tuple[str, list[str]]] = {
    "wu300": ("warm-up 300 steps (the recipe before)", ["train.warmup=300"]),
    "wu300_lr1e-3": ("warm-up 300, peak lr 1e-3", ["train.warmup=300", "train.lr=1e-3"]),
    "wu300_local": (
        "warm-up 300, local q/k: heads start on offsets -1, +1, -2, +2",
        ["train.warmup=300", "model.attn_init=local"],
    ),
    "wu300_local_noscale": (
        "warm-up 300, local q/k, embeddings not scaled by √d",
        ["train.warmup=300", "model.attn_init=local", "model.scale_embeddings=false"],
    ),
    "recipe": ("the recipe: warm-up 1,000 steps, peak lr 2e-3, mimetic q/k", []),
}


def _run(name: str, seed: int, overrides: list[str], a: argparse.Namespace) -> tuple[str, int, float]:
    run = f"{name}_s{seed}"
    points, _ = curve(a.out / run)
    if points and points[-1][0] >= a.stop:
        return run, 0, 0.0
    cmd = [
        sys.executable,
        "-m",
        "fullrank",
        "train",
        CONFIG,
        f"name={run}",
        f"out_dir={a.out}",
        f"data.tokenizer_file={a.vocab.resolve()}",
        f"train.seed={seed}",
        f"train.stop_after={a.stop}",
        "train.threads=1",
        *overrides,
        *a.set,
        "--quiet",
    ]
    start = time.perf_counter()
    a.out.mkdir(parents=True, exist_ok=True)
    with open(a.out / f"{run}.log", "ab") as log:
        rc = subprocess.call(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    return run, rc, time.perf_counter() - start


def report(a: argparse.Namespace) -> None:
    marks = tuple(s for s in (250, 500, 750, 1000, 1250, 1500, 2000, 3000, 5000) if s <= a.stop)
    at_marks = " / ".join(map(str, marks))
    rows = [
        f"| setting | what changes | seed | MLM acc % at {at_marks} steps | left the plateau |",
        "|---|---|---|---|---|",
    ]
    fig, ax = plt.subplots(figsize=(8, 5))
    for i, (name, (what, _)) in enumerate(SETTINGS.items()):
        left = total = 0
        for seed in a.seeds:
            points = [p for p in curve(a.out / f"{name}_s{seed}")[0] if p[0] <= a.stop]
            if not points:
                continue
            steps, acc, _ = zip(*points)
            ax.plot(steps, acc, color=f"C{i}", lw=1, label=name if total == 0 else None)
            at = {s: acc for s, acc, _ in points}
            cells = " / ".join(f"{at[s]:.1f}" if s in at else "–" for s in marks)
            if steps[-1] < a.stop:
                rows.append(f"| {name} | {what} | {seed} | {cells} | stopped at step {steps[-1]} |")
                continue
            out = acc[-1] > a.plateau
            left, total = left + out, total + 1
            rows.append(f"| {name} | {what} | {seed} | {cells} | {'yes' if out else 'no'} |")
        if total:
            rows.append(f"| {name} | | all | | **{left} of {total}** |")
    ax.set_xlabel("step (32 × 128 tokens)")
    ax.set_title("Leaving the plateau, seed by seed: the first steps of the Wikipedia recipe")
    ax.legend(fontsize=7, loc="upper left")
    save_report(fig, ax, rows, a.plot, a.results)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--run", action="store_true", help="train the runs that have not reached --stop")
    ap.add_argument("--jobs", type=int, default=2, help="runs trained side by side")
    ap.add_argument("--only", nargs="*", default=None, help="these settings only")
    ap.add_argument("--seeds", nargs="*", type=int, default=[0, 1, 2, 3])
    ap.add_argument("--stop", type=int, default=1500, help="train.stop_after of every run")
    ap.add_argument("--plateau", type=float, default=15.0, help="MLM accuracy %% that counts as left")
    ap.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="overrides for all")
    ap.add_argument("--vocab", type=Path, default=ROOT / "runs" / "probes" / "wordpiece.json")
    ap.add_argument("--out", type=Path, default=ROOT / "runs" / "seeds")
    ap.add_argument("--results", type=Path, default=ROOT / "bench" / "results" / "bert_seeds.md")
    ap.add_argument("--plot", type=Path, default=ROOT / "docs" / "img" / "bert_seeds.png")
    a = ap.parse_args()
    if a.run:
        if not a.vocab.is_file():
            sys.exit(
                f"{a.vocab}: no WordPiece vocabulary; run bench/bert_probes.py --run first or pass --vocab"
            )
        jobs = [(n, s) for n in (a.only or SETTINGS) for s in a.seeds]
        with ThreadPoolExecutor(a.jobs) as pool:
            for run, rc, secs in pool.map(lambda j: _run(j[0], j[1], SETTINGS[j[0]][1], a), jobs):
                print(f"{run}: {'ok' if rc == 0 else f'failed (exit {rc})'} in {secs / 60:.1f} min")
    report(a)


if __name__ == "__main__":
    main()
