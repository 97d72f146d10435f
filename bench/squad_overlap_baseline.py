"""Rules without a model on the SQuAD test part (every 4th article of the dev file, as
``configs/bert/squad.yaml`` splits it), to read the fine-tuned models' F1 against: EM and F1 of
answering each question with

- ``sentence``: the paragraph's sentence that shares the most words with the question;
- ``sentence minus question``: its words that are not in the question;
- ``after the question``: the longest run of words next to the question's words in that sentence,
  as a short span — the run after the last shared word, up to the sentence's end (capped at
  ``--max-words``).

With ``--predictions RUN/predictions.json …`` (fine-tuned runs' test answers), each run's
answers are described beside the rules: their mean length in words, the share inside the
sentence the first rule picks, and the share that repeat the answer given to another question
on the same paragraph (an answer that does not depend on its question).

    python bench/squad_overlap_baseline.py --predictions runs/bert/squad_true/predictions.json

``--without-questions FILE`` writes the SQuAD file with every question replaced by ``?``, to
fine-tune and test a model that cannot read them (``data.root``/``data.train`` pointing at it).
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

DATA = Path("../shared/data/squad-v1.1/dev-v1.1.json")
STOP = set(
    "a an the of in on at to for by with and or is was were are be been what which who whom whose "
    "when where why how did do does".split()
)


def words(text: str) -> list[str]:
    return re.findall(r"\w+", text.lower())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--squad", type=Path, default=DATA)
    p.add_argument("--test-every", type=int, default=4)
    p.add_argument("--max-words", type=int, default=4, help="longest span of the third rule")
    p.add_argument("--predictions", nargs="*", type=Path, default=[], help="runs' predictions.json")
    p.add_argument("--without-questions", type=Path, help="write the SQuAD file with every question '?'")
    a = p.parse_args()
    if a.without_questions:
        import json

        if a.without_questions.exists():
            raise SystemExit(f"{a.without_questions} exists; name a new file")
        data = json.loads(a.squad.read_text(encoding="utf-8"))
        for article in data["data"]:
            for paragraph in article["paragraphs"]:
                for qa in paragraph["qas"]:
                    qa["question"] = "?"
        a.without_questions.write_text(json.dumps(data), encoding="utf-8")
        return

    from fullrank.data.finetuning import read_squad, split_articles
    from fullrank.evaluation.squad import squad_scores

    _, test = split_articles(read_squad(a.squad), a.test_every)
    rules: dict[str, list[str]] = {"sentence": [], "sentence minus question": [], "after the question": []}
    for q in test:
        asked = set(words(q.question)) - STOP
        sentences = re.split(r"(?<=[.!?])\s+", q.context)
        best = max(sentences, key=lambda s: len(asked & set(words(s))))
        tokens = best.split()
        rules["sentence"].append(best)
        rules["sentence minus question"].append(
            " ".join(t for t in tokens if set(words(t)).isdisjoint(asked))
        )
        shared = [i for i, t in enumerate(tokens) if not set(words(t)).isdisjoint(asked)]
        start = shared[-1] + 1 if shared else 0
        rules["after the question"].append(" ".join(tokens[start : start + a.max_words]))
    references = [[text for text, _ in q.answers] for q in test]
    holds = sum(any(r in best for r in refs) for best, refs in zip(rules["sentence"], references))
    print(
        f"{len(test):,} test questions; the chosen sentence holds a reference answer for {holds:,} "
        f"({100.0 * holds / max(len(test), 1):.1f}%)"
    )
    print("| rule | EM | F1 |\n|---|---|---|")
    for name, answers in rules.items():
        s = squad_scores(answers, references)
        print(f"| {name} | {s['em']:.2f} | {s['f1']:.2f} |")

    if not a.predictions:
        return
    import json

    print(
        "\n| predictions | EM | F1 | mean words | inside the rule's sentence % "
        "| the same answer as another question on its paragraph % |\n|---|---|---|---|---|---|"
    )
    first = {q.id: q.answers[0][0] for q in test}  # the references' row: each first answer
    for path in [None, *a.predictions]:
        given = first if path is None else json.loads(path.read_text(encoding="utf-8"))
        answers = [given[q.id] for q in test]
        s = squad_scores(answers, references)
        by_paragraph: dict[str, list[str]] = {}
        for q, ans in zip(test, answers):
            by_paragraph.setdefault(q.context, []).append(ans)
        repeated = sum(by_paragraph[q.context].count(ans) > 1 for q, ans in zip(test, answers))
        inside = sum(ans in best for ans, best in zip(answers, rules["sentence"]))
        n = max(len(test), 1)
        length = sum(len(x.split()) for x in answers) / n
        name = path or "the first reference answers"
        print(
            f"| {name} | {s['em']:.2f} | {s['f1']:.2f} | {length:.1f} "
            f"| {100.0 * inside / n:.1f} | {100.0 * repeated / n:.1f} |"
        )


if __name__ == "__main__":
    main()
