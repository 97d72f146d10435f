"""bench/squad_copy_questions.py: every question it makes has its answer in the passage, once,
beside the question's words, and the file it writes reads as SQuAD."""

from __future__ import annotations

import json
import random
import subprocess
import sys

import pytest

from fullrank.data.finetuning import read_squad
from tests.helpers import BENCH, bench_module

CONTEXT = (
    "Nikola Tesla was born in Smiljan in 1856. He moved to New York in 1884 to work for Thomas "
    "Edison. Tesla later founded his own laboratory in Colorado Springs, where he built a large "
    "coil. He died in New York City in January 1943 at the age of 86."
)


@pytest.fixture(scope="module")
def copy_questions():
    return bench_module("squad_copy_questions")


def test_answers_are_in_the_passage_once_and_not_in_the_question(copy_questions):
    ws = copy_questions.words(CONTEXT)
    runs = [" ".join(w for w, _, _ in ws[a : a + n]) for a, n in copy_questions.name_runs(ws)]
    qas = copy_questions.paragraph_questions(CONTEXT, "t", random.Random(0), 4, 8, 0.0)
    assert len(qas) >= 3
    for qa in qas:
        (ans,) = qa["answers"]
        text, start = ans["text"], ans["answer_start"]
        assert CONTEXT[start : start + len(text)] == text
        assert runs.count(text) == 1  # the only run of names with that text
        assert text not in qa["question"]
        assert qa["question"].split()[0] in {"what", "when", "how"}


def test_written_file_keeps_the_test_articles_and_reads_as_squad(tmp_path):
    articles = [
        {"title": f"a{i}", "paragraphs": [{"context": CONTEXT, "qas": [
            {"id": f"q{i}", "question": "Where was Tesla born?",
             "answers": [{"text": "Smiljan", "answer_start": CONTEXT.index("Smiljan")}]}]}]}
        for i in range(4)
    ]  # fmt: skip
    src = tmp_path / "dev.json"
    src.write_text(json.dumps({"version": "1.1", "data": articles}), encoding="utf-8")
    subprocess.run(
        [sys.executable, str(BENCH / "squad_copy_questions.py"), str(src), str(tmp_path / "out")],
        check=True,
        capture_output=True,
    )
    out = read_squad(tmp_path / "out" / "squad-v1.1" / "dev-v1.1.json")
    assert [len(a) for a in out][3] == 1  # the test article (index 3 with test_every 4) unchanged
    assert all(len(a) > 1 for a in out[:3])


def test_common_answers_are_lowercase_content_words_found_once(copy_questions):
    qas = copy_questions.paragraph_questions(CONTEXT, "t", random.Random(0), 4, 8, 0.0, common=1.0)
    assert len(qas) >= 3
    low = [w.lower() for w, _, _ in copy_questions.words(CONTEXT)]
    for qa in qas:
        (ans,) = qa["answers"]
        text = ans["text"]
        assert CONTEXT[ans["answer_start"] :].startswith(text)
        assert text.islower() and 1 <= len(text.split()) <= 3
        assert all(copy_questions.is_content(w) for w in text.split())
        n = len(text.split())
        hits = [k for k in range(len(low)) if " ".join(low[k : k + n]) == text]
        assert len(hits) == 1
        assert qa["question"].startswith("what ")
