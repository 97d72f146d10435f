"""SQuAD training paragraphs with questions made from their own sentences: an augmentation of
the fine-tuning data that asks a model to find the question's words in the paragraph.

For every sentence of a training paragraph, one name, title or number (a maximal run of
capitalised words or digits, as in ``squad_cloze.py``) that occurs once in the paragraph is the
answer; the question is the question word for it (``when``, ``how many``, ``what``) followed by
the sentence's words within ``--near`` words of the run, the run left out and each other word
dropped with probability ``--drop``. With ``--common P``, a sentence's answer is instead, with
probability P, a run of at most three lowercase content words (``professional football``), as
most of SQuAD's answers are. Unlike ``squad_cloze.py``, whose questions come from other
sentences of the article, the question's words are in the paragraph beside the answer, so the
task is the overlap rule of ``squad_overlap_baseline.py`` learned end to end. The test articles
(``i % test_every == test_every - 1``) are copied unchanged; nothing but the training paragraphs
is read, so no label is added that SQuAD's training part does not give.

    python bench/squad_copy_questions.py ../shared/data/squad-v1.1/dev-v1.1.json OUT_ROOT \
        [--per-paragraph 4] [--near 8] [--drop 0.25] [--seed 0]
    fullrank train configs/bert/squad.yaml data.root=OUT_ROOT …

writes ``OUT_ROOT/squad-v1.1/dev-v1.1.json`` (the path ``configs/bert/squad.yaml`` reads).
With ``--wikipedia CORPUS … --articles N`` it makes the same questions on passages of at most
100 words of the first ``N`` articles of each WikiExtractor file instead (a SQuAD file of its own,
every 40th article its test part, for a stage before SQuAD).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from squad_cloze import Word, is_content, is_name, name_runs, passages, question_word, words

from fullrank.data.documents import iter_documents, split_sentences


def common_runs(ws: list[Word], longest: int = 3) -> list[tuple[int, int]]:
    """``(a, n)``: the maximal runs ``ws[a:a+n]`` of lowercase content words, at most ``longest``."""
    runs, a = [], 0
    while a < len(ws):
        b = a
        while b < len(ws) and is_content(ws[b][0]) and not is_name(ws[b][0]):
            b += 1
        if 0 < b - a <= longest:
            runs.append((a, b - a))
        a = max(b, a + 1)
    return runs


def paragraph_questions(
    context: str,
    pid: str,
    rng: random.Random,
    per_paragraph: int,
    near: int,
    drop: float,
    common: float = 0.0,
) -> list[dict]:
    """Up to ``per_paragraph`` questions on ``context``, one a sentence at most (SQuAD v1.1 ``qas``);
    with probability ``common`` a sentence's answer is a run of lowercase content words."""
    cw = words(context)
    low = [w.lower() for w, _, _ in cw]
    names = name_runs(cw)
    commons = common_runs(cw) if common > 0 else []
    counts: dict[tuple[str, ...], int] = {}
    for a, n in names:  # a name counts once per run of names it makes
        key = tuple(low[a : a + n])
        counts[key] = counts.get(key, 0) + 1
    if commons:  # other words once per occurrence anywhere in the passage
        grams = Counter(tuple(low[k : k + n]) for n in range(1, 4) for k in range(len(low) - n + 1))
        for a, n in commons:
            counts[tuple(low[a : a + n])] = grams[tuple(low[a : a + n])]
    # sentence boundaries in characters
    bounds, pos = [], 0
    for s in split_sentences(context):
        start = context.index(s, pos)
        bounds.append((start, start + len(s)))
        pos = start + len(s)
    qas: list[dict] = []
    order = list(range(len(bounds)))
    rng.shuffle(order)
    for si in order:
        lo, hi = bounds[si]
        idx = [k for k, (_, s, e) in enumerate(cw) if s >= lo and e <= hi]
        if not 6 <= len(idx) <= 60:
            continue
        first, last = idx[0], idx[-1]
        kinds = [
            [
                (a, n)
                for a, n in runs
                if first <= a and a + n - 1 <= last and counts[tuple(low[a : a + n])] == 1
            ]
            for runs in (names, commons)
        ]
        if common > 0 and rng.random() < common:
            kinds.reverse()
        runs = kinds[0] or kinds[1]
        if not runs:
            continue
        a, n = rng.choice(runs)
        around = [
            cw[k][0]
            for k in range(max(first, a - near), min(last, a + n - 1 + near) + 1)
            if not a <= k < a + n and cw[k][0][0].isalnum() and (rng.random() >= drop)
        ]
        if len(around) < 2:
            continue
        start, end = cw[a][1], cw[a + n - 1][2]
        qas.append(
            {
                "id": f"copy-{pid}-{len(qas)}",
                "question": f"{question_word(cw[a][0])} {' '.join(around)}?",
                "answers": [{"text": context[start:end], "answer_start": start}],
            }
        )
        if len(qas) == per_paragraph:
            break
    return qas


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "squad",
        type=Path,
        help="SQuAD v1.1 file split by article (configs/bert/squad.yaml's); - with --wikipedia",
    )
    ap.add_argument("out_root", type=Path, help="written as OUT_ROOT/squad-v1.1/dev-v1.1.json")
    ap.add_argument("--test-every", type=int, default=4, help="data.test_every of the config")
    ap.add_argument("--per-paragraph", type=int, default=4)
    ap.add_argument("--near", type=int, default=8, help="words kept on each side of the answer")
    ap.add_argument("--drop", type=float, default=0.25, help="chance that a kept word is dropped")
    ap.add_argument(
        "--common", type=float, default=0.0, help="chance that an answer is lowercase content words"
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--wikipedia", nargs="+", help="WikiExtractor files to make the questions from instead")
    ap.add_argument("--articles", type=int, default=4000, help="articles read from each --wikipedia file")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    if args.wikipedia:
        wiki: list[dict[str, Any]] = []
        for corpus in args.wikipedia:
            for a, doc in enumerate(iter_documents(corpus, "wikiextractor")):
                if a == args.articles:
                    break
                pars: list[dict[str, Any]] = []
                for g, group in enumerate(passages(doc)):
                    context = " ".join(doc[i] for i in group)
                    qas = paragraph_questions(
                        context,
                        f"w{len(wiki)}-{g}",
                        rng,
                        args.per_paragraph,
                        args.near,
                        args.drop,
                        args.common,
                    )
                    if qas:
                        pars.append({"context": context, "qas": qas})
                if pars:
                    wiki.append({"title": f"{Path(corpus).name}:{a}", "paragraphs": pars})
        out = args.out_root / "copy.json"
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps({"version": "1.1", "data": wiki}), encoding="utf-8")
        made = sum(len(p["qas"]) for art in wiki for p in art["paragraphs"])
        print(f"{made:,} questions from {len(wiki):,} articles → {out}")
        return
    data = json.loads(args.squad.read_text(encoding="utf-8"))
    made = real = 0
    for i, art in enumerate(data["data"]):
        if i % args.test_every == args.test_every - 1:
            continue
        for p, par in enumerate(art["paragraphs"]):
            real += len(par["qas"])
            extra = paragraph_questions(
                par["context"], f"{i}-{p}", rng, args.per_paragraph, args.near, args.drop, args.common
            )
            par["qas"].extend(extra)
            made += len(extra)
    out = args.out_root / "squad-v1.1" / "dev-v1.1.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(data), encoding="utf-8")
    print(f"{made:,} questions made beside {real:,} training questions → {out}")


if __name__ == "__main__":
    main()
