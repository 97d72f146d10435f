"""Which pre-training settings make a small BERT leave the unigram plateau fastest? Short runs of
``configs/bert/wikipedia/bert.yaml`` (BERT's own recipe on the Wikipedia corpus), each changing
a few settings, all with the same WordPiece vocabulary and token budget; validation MLM accuracy
(BERT's 15% masking, the same fixed masks for every run) against the tokens seen.

    python bench/bert_probes.py --run --jobs 2          # train the probes missing so far
    python bench/bert_probes.py                         # table and plot of what has finished

Each probe is ``fullrank train configs/bert/wikipedia/bert.yaml name=PROBE`` plus the shared
settings of :data:`COMMON` and its own overrides (:data:`PROBES`); ``--set`` adds overrides to all
(e.g. ``data.root=…``). One WordPiece vocabulary, trained first as the config trains it
(``OUT/wordpiece.json``), serves every probe, so all read the same tokens from one cache. Runs go
to ``--out`` (``runs/probes``); a finished probe is skipped. The report is ``--results`` (a
markdown table) and ``--plot`` (MLM accuracy against tokens seen).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

ROOT = Path(__file__).resolve().parents[1]
CONFIG = "configs/bert/wikipedia/bert.yaml"
# every probe: 2,000 steps of 32 sequences of 128 tokens (8.2M tokens), warm-up 10%, one thread
COMMON = [
    "train.steps=2000",
    "train.warmup=200",
    "train.eval_every=250",
    "train.eval_batches=20",
    "train.save_every=1000",
    "train.log_every=50",
    "train.threads=1",
]
# pre-LN, masked LM alone, 40% masking, no dropout, lr 2e-3: the settings Cramming (Geiping &
# Goldstein 2022) and Izsak et al. (2021) train small BERTs with
CRAM = [
    "model.norm_first=true",
    "model.next_sentence=false",
    "data.mlm_prob=0.4",
    "data.max_predictions=52",
    "model.dropout=0",
    "model.attn_dropout=0",
    "train.lr=2e-3",
]
PROBES: dict[str, tuple[str, list[str]]] = {
    "pA_bert": ("BERT's recipe: post-LN, NSP, 15% masking, dropout 0.1, lr 1e-3", []),
    "pZ_all": ("pre-LN, no NSP, 40% masking, no dropout, lr 2e-3", CRAM),
    "pS_sinusoid": (
        "pZ_all with sinusoidal positions and embeddings scaled by √d",
        [*CRAM, "model.positions=sinusoidal", "model.scale_embeddings=true"],
    ),
    "pH_lr5e-3": ("pZ_all with lr 5e-3", [*CRAM, "train.lr=5e-3"]),
    "pL_seq32": (
        "pZ_all with n = 32, batch 128 (same tokens a step)",
        [*CRAM, "model.seq_len=32", "data.max_predictions=13", "train.batch_size=128"],
    ),
}
# the shipped recipe (configs/bert/wikipedia/recipe.yaml), trained on its own; its curve is drawn
# beside the probes when --recipe-run holds it
RECIPE = ("recipe", "pre-LN, no NSP, 15% masking, sinusoidal positions, mimetic q/k, lr 2e-3")


def _run(name: str, overrides: list[str], out: Path, extra: list[str]) -> tuple[str, int, float]:
    run_dir = out / name
    if (run_dir / "results.json").is_file():
        return name, 0, 0.0
    resume = ["--resume"] if (run_dir / "checkpoints").is_dir() else []
    cmd = [
        sys.executable,
        "-m",
        "fullrank",
        "train",
        CONFIG,
        f"name={name}",
        f"out_dir={out}",
        f"data.tokenizer_file={(out / 'wordpiece.json').resolve()}",
        *COMMON,
        *overrides,
        *extra,
        "--quiet",
        *resume,
    ]
    start = time.perf_counter()
    out.mkdir(parents=True, exist_ok=True)
    with open(out / f"{name}.log", "ab") as log:
        rc = subprocess.call(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    return name, rc, time.perf_counter() - start


def finished(run_dir: Path) -> dict | None:
    """A run's ``results.json``, or None while it has not finished."""
    path = run_dir / "results.json"
    return json.loads(path.read_text()) if path.is_file() else None


def curve(run_dir: Path) -> tuple[list[tuple[int, float, float]], dict | None]:
    """``(step, MLM accuracy %, MLM perplexity)`` of each validation line (none for a run that
    has not started), and the final full-validation scores when the run has finished."""
    metrics = run_dir / "metrics.jsonl"
    points = []
    for line in metrics.read_text().splitlines() if metrics.is_file() else []:
        d = json.loads(line)
        if d.get("split") == "valid" and "mlm_acc" in d:
            points.append((d["step"], d["mlm_acc"], d["mlm_ppl"]))
    return points, finished(run_dir)


def report(
    out: Path, results: Path, plot: Path, tokens_per_step: int, recipe_run: Path | None = None
) -> None:
    rows = [
        "| probe | what changes | MLM acc % at 1M / 2M / 4M / 8.2M / 12.3M / 20.5M tokens | "
        "final MLM acc % (all valid) | final MLM ppl | NSP acc % |",
        "|---|---|---|---|---|---|",
    ]
    fig, ax = plt.subplots(figsize=(8, 5))
    runs = [(name, what, out / name) for name, (what, _) in PROBES.items()]
    if recipe_run is not None:
        runs.append((*RECIPE, recipe_run))
    for name, what, run_dir in runs:
        points, final = curve(run_dir)
        if not points:
            continue
        steps, acc, _ = zip(*points)
        ax.plot([s * tokens_per_step / 1e6 for s in steps], acc, marker="o", ms=3, label=name)
        at = {s: a for s, a, _ in points}
        marks = " / ".join(f"{at[s]:.1f}" if s in at else "–" for s in (250, 500, 1000, 2000, 3000, 5000))
        v = (final or {}).get("valid") or {}
        if v:
            nsp = f"{v['nsp_acc']:.1f}" if "nsp_acc" in v else "–"
            last = f"{v['mlm_acc']:.2f} | {v['mlm_ppl']:.1f} | {nsp}"
        else:
            last = f"stopped at step {steps[-1]} | – | –"
        rows.append(f"| {name} | {what} | {marks} | {last} |")
    ax.text(0.1, 15.4, "unigram plateau (~15%)", color="grey", fontsize=8)
    ax.set_xlabel("tokens seen (millions; steps × 32 × 128)")
    ax.set_title("Leaving the plateau: probes and the recipe on the Wikipedia corpus")
    ax.legend(fontsize=7, loc="upper left")
    save_report(fig, ax, rows, plot, results)


def save_report(fig, ax, rows: list[str], plot: Path, results: Path) -> None:
    """Finish an MLM-accuracy plot (the plateau line, the y label, a grid), save it and the
    markdown ``rows``, and print the table."""
    ax.axhline(15, color="grey", lw=0.8, ls="--")
    ax.set_ylabel("validation MLM accuracy % (15% masking, fixed masks)")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    plot.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(plot, dpi=120)
    results.write_text("\n".join(rows) + "\n", encoding="utf-8")
    print("\n".join(rows))
    print(f"plot: {plot}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--run", action="store_true", help="train the probes that have not finished")
    ap.add_argument("--jobs", type=int, default=2, help="probes trained side by side")
    ap.add_argument("--only", nargs="*", default=None, help="these probes only")
    ap.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="overrides for all")
    ap.add_argument("--out", type=Path, default=ROOT / "runs" / "probes")
    ap.add_argument("--results", type=Path, default=ROOT / "bench" / "results" / "bert_probes.md")
    ap.add_argument("--plot", type=Path, default=ROOT / "docs" / "img" / "bert_probes.png")
    ap.add_argument(
        "--recipe-run",
        type=Path,
        default=ROOT / "runs" / "bert" / "wiki_recipe",
        help="the recipe's run, drawn beside the probes when it has metrics",
    )
    args = ap.parse_args()
    names = args.only or list(PROBES)
    if args.run:
        vocab = args.out / "wordpiece.json"
        if not vocab.is_file():
            from fullrank.recipes.bert import train_wordpiece
            from fullrank.recipes.config import load_experiment

            exp = load_experiment(ROOT / CONFIG, args.set)
            train_wordpiece(exp.data, vocab)  # type: ignore[arg-type]  # a bert experiment's data
        with ThreadPoolExecutor(args.jobs) as pool:
            for name, rc, secs in pool.map(lambda n: _run(n, PROBES[n][1], args.out, args.set), names):
                print(f"{name}: {'ok' if rc == 0 else f'failed (exit {rc})'} in {secs / 60:.1f} min")
    recipe = args.recipe_run if (args.recipe_run / "metrics.jsonl").is_file() else None
    report(args.out, args.results, args.plot, tokens_per_step=32 * 128, recipe_run=recipe)


if __name__ == "__main__":
    main()
