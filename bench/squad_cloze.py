"""Self-supervised question answering between masked-LM pre-training and SQuAD: cloze questions
made from Wikipedia articles (Dhingra et al. 2018; Lewis et al. 2019), fine-tuned as SQuAD
(``configs/bert/squad.yaml``) from a pre-trained run, then SQuAD itself from that checkpoint.

A cloze question is a sentence of an article with one name, title or number (a maximal run of
capitalised words or digits, outside a list of function words) replaced by a question word
(``when`` for a year, ``how many`` for another number, ``what`` otherwise); its context is a
passage of at most 100 words of the same article that does not hold the sentence, holds the run
exactly once, and shares at least two content words with the sentence within 15 words of it. The
answer is the run in the passage. No labels: the questions come from the corpus alone.

    python bench/squad_cloze.py RUN CORPUS [CORPUS …] [--articles 4000] [--steps 4000]
        [--seeds 0 1 2] [--threads 2] [--out-dir runs/squad_cloze]
    python bench/squad_cloze.py RUN --questions runs/squad_cloze/cloze.json --scratch …

``--scratch`` runs the cloze stage from the run's architecture with random weights (no masked-LM
pre-training); ``--questions`` reuses a cloze file made before.

Writes ``OUT/cloze.json`` (SQuAD v1.1 format; every 40th article is its test part) and prints a
table: the cloze test part after stage one, SQuAD without SQuAD training (zero-shot) and SQuAD
fine-tuned from the cloze checkpoint for each seed.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from fullrank.data.documents import iter_documents

REPO = Path(__file__).resolve().parents[1]
SQUAD = REPO / "configs" / "bert" / "squad.yaml"
STOP = set(
    """a an the of in on at to for from by with as and or but is was were are be been being it its
    this that these those he she they his her their him them we our you your i not no which who
    whom whose what when where why how than then there here also has have had do does did can could
    will would shall should may might must one two into over after before during about under
    between through while such only other more most some any all each both either neither so if
    because since until up out s 's first new many later""".split()
)
WORD = re.compile(r"\w+(?:[-'.,]\w+)*|[^\w\s]")
MAX_WORDS, MAX_RUN, NEAR, MIN_SHARED, PER_PASSAGE, TRIES = 100, 5, 15, 2, 4, 40

Word = tuple[str, int, int]  # text, start, end (characters)


def words(text: str) -> list[Word]:
    return [(m.group(), m.start(), m.end()) for m in WORD.finditer(text)]


def is_content(w: str) -> bool:
    return w[0].isalnum() and w.lower() not in STOP


def is_name(w: str) -> bool:
    """A word that may be part of an answer: capitalised or a number, not a function word."""
    return (w[0].isupper() or w[0].isdigit()) and w.lower() not in STOP


def name_runs(ws: Sequence[Word]) -> list[tuple[int, int]]:
    """``(a, n)``: the maximal runs of names ``ws[a:a+n]`` of at most ``MAX_RUN`` words."""
    runs, a = [], 0
    while a < len(ws):
        if not is_name(ws[a][0]):
            a += 1
            continue
        b = a
        while b + 1 < len(ws) and is_name(ws[b + 1][0]):
            b += 1
        if b - a + 1 <= MAX_RUN:
            runs.append((a, b - a + 1))
        a = b + 1
    return runs


def question_word(answer: str) -> str:
    if re.fullmatch(r"1\d{3}|20\d{2}", answer):
        return "when"
    return "how many" if re.fullmatch(r"[\d,.]+", answer) else "what"


def passages(sentences: Sequence[str]) -> list[list[int]]:
    """Consecutive sentences grouped into passages of at most ``MAX_WORDS`` words."""
    out: list[list[int]] = [[]]
    n = 0
    for i, s in enumerate(sentences):
        w = len(s.split())
        if out[-1] and n + w > MAX_WORDS:
            out.append([])
            n = 0
        out[-1].append(i)
        n += w
    return out


def best_run(
    sentence: list[Word], passage: list[Word], plow: list[str], index: dict[tuple[str, ...], list[int]]
) -> Any:
    """``(shared, a, length, k)``: the run of names at ``sentence[a:a+length]`` found once, as a
    maximal run, at ``passage[k]``, with the most content words shared near it; ``None`` if none
    shares ``MIN_SHARED``. ``plow``: the passage's words in lower case; ``index``: where each run
    of up to ``MAX_RUN`` of them starts."""
    low = [w.lower() for w, _, _ in sentence]
    best = None
    for a, n in name_runs(sentence):
        b = a + n - 1
        found = index.get(tuple(low[a : b + 1]), [])
        if len(found) == 1:
            k = found[0]
            maximal = (
                is_name(passage[k][0])
                and (k == 0 or not is_name(passage[k - 1][0]))
                and (k + n >= len(passage) or not is_name(passage[k + n][0]))
            )
            rest = {w for w in low[:a] + low[b + 1 :] if is_content(w)}
            near = {w for w in plow[max(0, k - NEAR) : k + n + NEAR] if is_content(w)}
            shared = len(rest & near)
            if maximal and shared >= MIN_SHARED and (best is None or shared > best[0]):
                best = (shared, a, n, k)
    return best


def article_paragraphs(sentences: Sequence[str], aid: int, rng: random.Random) -> list[dict]:
    """The SQuAD paragraphs (context and cloze questions) of one article."""
    groups = passages(sentences)
    split = [words(s) for s in sentences]
    out = []
    for g, group in enumerate(groups):
        if len(group) < 2:
            continue
        context = " ".join(sentences[i] for i in group)
        passage = words(context)
        plow = [w.lower() for w, _, _ in passage]
        index: dict[tuple[str, ...], list[int]] = {}
        for n in range(1, MAX_RUN + 1):
            for k in range(len(plow) - n + 1):
                index.setdefault(tuple(plow[k : k + n]), []).append(k)
        others = [i for h, other in enumerate(groups) if h != g for i in other]
        rng.shuffle(others)
        qas: list[dict] = []
        for i in others[:TRIES]:
            sentence = split[i]
            if not 6 <= len(sentence) <= 40:
                continue
            found = best_run(sentence, passage, plow, index)
            if found is None:
                continue
            _, a, n, k = found
            s = sentences[i]
            question = s[: sentence[a][1]] + question_word(sentence[a][0]) + s[sentence[a + n - 1][2] :]
            start, end = passage[k][1], passage[k + n - 1][2]
            qas.append(
                {
                    "id": f"cloze-{aid}-{g}-{len(qas)}",
                    "question": question.rstrip(" .") + "?",
                    "answers": [{"text": context[start:end], "answer_start": start}],
                }
            )
            if len(qas) == PER_PASSAGE:
                break
        if qas:
            out.append({"context": context, "qas": qas})
    return out


def cloze_file(corpora: Sequence[str], articles: int, seed: int = 0) -> dict:
    """A SQuAD v1.1 file of cloze questions from the first ``articles`` articles of each corpus
    (WikiExtractor format)."""
    rng = random.Random(seed)
    data: list[dict] = []
    for corpus in corpora:
        for a, doc in enumerate(iter_documents(corpus, "wikiextractor")):
            if a == articles:
                break
            paragraphs = article_paragraphs(doc, len(data), rng)
            if paragraphs:
                data.append({"title": f"{Path(corpus).name}:{a}", "paragraphs": paragraphs})
    return {"version": "1.1", "data": data}


def train(overrides: list[str], out: Path, name: str) -> dict:
    """``fullrank train configs/bert/squad.yaml`` with ``overrides``; its ``results.json``."""
    cmd = [sys.executable, "-m", "fullrank", "train", str(SQUAD), f"out_dir={out}", f"name={name}"]
    subprocess.run([*cmd, *overrides, "--quiet"], check=True, stdout=subprocess.DEVNULL)
    return json.loads((out / name / "results.json").read_text(encoding="utf-8"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run", type=Path, help="a BERT pre-training run (train.init_from)")
    ap.add_argument("corpora", nargs="*", help="WikiExtractor files for the questions")
    ap.add_argument("--questions", type=Path, help="a cloze file made before, instead of corpora")
    ap.add_argument("--scratch", action="store_true", help="the cloze stage from the run's random weights")
    ap.add_argument("--articles", type=int, default=4000, help="articles read from each corpus")
    ap.add_argument("--steps", type=int, default=4000, help="cloze fine-tuning steps")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="SQuAD fine-tuning seeds")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out-dir", type=Path, default=Path("runs/squad_cloze"))
    args = ap.parse_args()
    out = args.out_dir.resolve()
    out.mkdir(parents=True, exist_ok=True)
    if bool(args.corpora) == bool(args.questions):
        sys.exit("give either WikiExtractor corpora or --questions FILE (one of the two)")
    t0 = time.perf_counter()
    if args.questions:
        questions = args.questions.resolve()
        data = json.loads(questions.read_text(encoding="utf-8"))
    else:
        questions = out / "cloze.json"
        data = cloze_file(args.corpora, args.articles)
        questions.write_text(json.dumps(data), encoding="utf-8")
    qs = sum(len(p["qas"]) for a in data["data"] for p in a["paragraphs"])
    print(f"cloze questions: {qs:,} from {len(data['data']):,} articles in {time.perf_counter() - t0:.0f} s")
    common = [f"train.threads={args.threads}"]
    stage = train(
        [
            *common, f"train.init_from={args.run.resolve()}", f"data.root={questions.parent}",
            f"data.train={questions.name}",
            "data.test_every=40", "data.eval_questions=500", f"train.steps={args.steps}",
            f"train.warmup={args.steps // 10}", f"train.eval_every={args.steps // 4}",
            f"train.save_every={args.steps}", *(["train.init_weights=false"] if args.scratch else []),
        ],
        out, "cloze",
    )  # fmt: skip
    print(
        f"cloze test part after {args.steps} steps: EM {stage['test']['em']:.2f} F1 {stage['test']['f1']:.2f}"
    )
    cloze = str(out / "cloze")
    zero = train(
        [
            *common, f"train.init_from={cloze}", "train.steps=1", "train.lr=1e-12", "train.warmup=0",
            "train.eval_every=1", "train.save_every=1",
        ],
        out, "squad_zero_shot",
    )  # fmt: skip
    print(f"SQuAD test, no SQuAD training: EM {zero['test']['em']:.2f} F1 {zero['test']['f1']:.2f}")
    for seed in args.seeds:
        r = train([*common, f"train.init_from={cloze}", f"train.seed={seed}"], out, f"squad_s{seed}")
        print(f"SQuAD test, seed {seed}: EM {r['test']['em']:.2f} F1 {r['test']['f1']:.2f}")
    print(f"total {(time.perf_counter() - t0) / 60:.1f} min")


if __name__ == "__main__":
    main()
