"""Does SQuAD fine-tuning underfit or overfit? EM and F1 of fine-tuned ``task: squad`` runs on a
sample of their own training questions beside the same number of test questions (the run's own
split: ``data.test_every`` of its config). A run that scores the same on both has not fit its
training questions; one far ahead on them has memorised what it does not generalise. Beside
them, from the run's ``predictions.json`` (the whole test part): the share of test questions
whose predicted answer is the one predicted most often for their paragraph — a model that ignores
the question scores near 100%; the gold answers' share is printed once.

    python bench/squad_fit.py RUN [RUN ...] [--questions 1000] [--out bench/results/squad_fit.md]
"""

from __future__ import annotations

import argparse
import collections
import json
import random
import sys
import time
from pathlib import Path

import torch

from fullrank.recipes.config import SquadExperiment, load_experiment
from fullrank.recipes.squad import evaluate_questions, squad_parts
from fullrank.training.checkpoints import load_checkpoint


def paragraph_share(answers: dict[str, str], contexts: dict[str, str]) -> float:
    """% of the questions in ``answers`` (id → text) whose answer is their paragraph's most common."""
    by_paragraph: dict[str, list[str]] = collections.defaultdict(list)
    for qid, text in answers.items():
        by_paragraph[contexts[qid]].append(text)
    common = sum(collections.Counter(a).most_common(1)[0][1] for a in by_paragraph.values())
    return 100 * common / len(answers)


def score(run: Path, n: int, seed: int) -> dict[str, float | str]:
    """EM/F1 on ``n`` training and ``n`` test questions drawn with ``seed`` from ``run``'s split."""
    exp = load_experiment(run / "config.yaml")
    if not isinstance(exp, SquadExperiment):
        sys.exit(f"{run}: not a `task: squad` run")
    data = exp.data
    train_all, test_all = squad_parts(data)
    rng = random.Random(seed)
    train_q, test_q = (
        rng.sample(train_all, min(n, len(train_all))),
        rng.sample(test_all, min(n, len(test_all))),
    )
    ckpt = load_checkpoint(run)
    if ckpt.tokenizer is None:
        sys.exit(f"{run}: the checkpoint has no tokenizer")
    cpu = torch.device("cpu")
    seq_len = ckpt.config.seq_len
    fit, _ = evaluate_questions(ckpt.model, train_q, ckpt.tokenizer, data, seq_len, cpu, 64)
    test, _ = evaluate_questions(ckpt.model, test_q, ckpt.tokenizer, data, seq_len, cpu, 64)
    predicted = json.loads((run / "predictions.json").read_text(encoding="utf-8"))
    contexts = {q.id: q.context for q in test_all}
    gold = {q.id: q.answers[0][0] for q in test_all}
    return {
        "run": str(run),
        "steps": exp.train.steps,
        "lr": exp.train.lr,
        "dropout": exp.model.get("dropout", 0.0),
        "train_em": fit["em"],
        "train_f1": fit["f1"],
        "test_em": test["em"],
        "test_f1": test["f1"],
        "same": paragraph_share(predicted, contexts),
        "gold_same": paragraph_share(gold, contexts),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", type=Path, help="run directories of `task: squad` runs")
    ap.add_argument("--questions", type=int, default=1000, help="questions drawn from each part")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", type=Path, default=None, help="also write the table to this Markdown file")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    lines = [
        f"{args.questions} training and {args.questions} test questions per run (seed {args.seed}), "
        f"{time.strftime('%Y-%m-%d %H:%M')}",
        "",
        "| run | steps | lr | dropout | train EM | train F1 | test EM | test F1 | paragraph's answer % |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    print("\n".join(lines), flush=True)
    for run in args.runs:
        r = score(run, args.questions, args.seed)
        row = (
            f"| {r['run']} | {r['steps']} | {r['lr']} | {r['dropout']} | {r['train_em']:.2f} | "
            f"{r['train_f1']:.2f} | {r['test_em']:.2f} | {r['test_f1']:.2f} | {r['same']:.1f} |"
        )
        gold_share = r["gold_same"]
        lines.append(row)
        print(row, flush=True)
    note = f"\nThe gold answers: {gold_share:.1f}% are their paragraph's most common answer."
    lines.append(note)
    print(note, flush=True)
    if args.out:
        args.out.write_text("# SQuAD: fit on training questions against test\n\n" + "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
