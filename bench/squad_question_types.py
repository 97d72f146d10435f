"""Does a SQuAD model read the question's wh-word? From fine-tuned ``task: squad`` runs'
``predictions.json`` (the whole test part of each run's own split), by the question's first
words: the number of questions, EM and F1, and the share of predicted answers that hold a digit
beside the share of reference answers that do. A model that answers "who" questions with dates
as often as "when" questions has not used the wh-word.

    python bench/squad_question_types.py RUN [RUN ...] [--out bench/results/squad_question_types.md]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path

from fullrank.evaluation.squad import squad_scores
from fullrank.recipes.config import SquadExperiment, load_experiment
from fullrank.recipes.squad import squad_parts

KINDS = ("who", "when", "how many", "what")
DIGIT = re.compile(r"\d")


def rows(run: Path) -> list[str]:
    """One Markdown row per question kind of ``run``'s test part."""
    exp = load_experiment(run / "config.yaml")
    if not isinstance(exp, SquadExperiment):
        sys.exit(f"{run}: not a `task: squad` run")
    _, test = squad_parts(exp.data)
    predicted = json.loads((run / "predictions.json").read_text(encoding="utf-8"))
    out = []
    for kind in KINDS:
        questions = [q for q in test if q.question.lower().startswith(kind + " ") and q.id in predicted]
        answers = [predicted[q.id] for q in questions]
        scores = squad_scores(answers, [[text for text, _ in q.answers] for q in questions])
        digits = 100 * sum(bool(DIGIT.search(a)) for a in answers) / len(questions)
        gold = 100 * sum(bool(DIGIT.search(q.answers[0][0])) for q in questions) / len(questions)
        out.append(
            f"| {run.name} | {kind} | {len(questions)} | {scores['em']:.2f} | {scores['f1']:.2f} "
            f"| {digits:.0f} | {gold:.0f} |"
        )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", type=Path, help="run directories of `task: squad` runs")
    ap.add_argument("--out", type=Path, default=None, help="also write the table to this Markdown file")
    args = ap.parse_args()
    lines = [
        f"SQuAD test questions by their first words, {time.strftime('%Y-%m-%d %H:%M')}",
        "",
        "| run | question | questions | EM | F1 | predicted answers with a digit % "
        "| reference answers with a digit % |",
        "|---|---|---|---|---|---|---|",
    ]
    print("\n".join(lines), flush=True)
    for run in args.runs:
        for row in rows(run):
            lines.append(row)
            print(row, flush=True)
    if args.out:
        args.out.write_text("# SQuAD: does the model read the wh-word?\n\n" + "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
