"""SQuAD EM/F1 as the official v1.1 script defines them: hand-checked cases and a second
implementation (torchmetrics), and the span post-processing."""

from __future__ import annotations

import numpy as np
import pytest

from fullrank.evaluation.squad import best_span, exact_match, f1, normalize_answer, squad_scores


def test_normalisation_and_hand_checked_scores():
    assert normalize_answer("The  Denver Broncos!") == "denver broncos"
    assert normalize_answer("an apple, a pear") == "apple pear"
    assert normalize_answer("theatre") == "theatre"  # articles only as whole words
    assert exact_match("the Broncos.", "Broncos") == 1.0
    # prediction "denver broncos team" vs reference "broncos": precision 1/3, recall 1 → F1 0.5
    assert f1("Denver Broncos team", "the Broncos") == pytest.approx(0.5)
    assert f1("a", "the") == 0.0  # both normalise to nothing: no common token
    assert f1("Paris Paris", "Paris") == pytest.approx(2 * 0.5 * 1 / 1.5)  # multiset overlap
    scores = squad_scores(["Denver Broncos", "1856"], [["Broncos", "Denver Broncos"], ["1857"]])
    assert scores == {"em": 50.0, "f1": 50.0, "questions": 2}  # max over references


def test_matches_torchmetrics():
    # torchmetrics scores an empty normalised answer as the v2.0 script does (F1 = 1 when both
    # are empty); v1.1 has no such case (F1 = 0), so every answer here keeps a word
    torchmetrics = pytest.importorskip("torchmetrics.text")
    rng = np.random.default_rng(0)
    words = ["the", "a", "Denver", "Broncos", "1856", "won,", "Super", "Bowl", "an", "(50)", "it's"]

    def answer() -> str:
        return " ".join([*rng.choice(words, int(rng.integers(0, 4))), str(rng.choice(words[2:8]))])

    preds, refs = [], []
    for i in range(300):
        pred = answer()
        answers = [answer() for _ in range(int(rng.integers(1, 4)))]
        if i % 5 == 0:
            answers[0] = pred.upper()
        preds.append(pred)
        refs.append(answers)
    ours = squad_scores(preds, refs)
    metric = torchmetrics.SQuAD()
    theirs = metric(
        [{"prediction_text": p, "id": str(i)} for i, p in enumerate(preds)],
        [{"answers": {"answer_start": [0] * len(r), "text": r}, "id": str(i)} for i, r in enumerate(refs)],
    )
    assert ours["em"] == pytest.approx(float(theirs["exact_match"]), abs=1e-4)
    assert ours["f1"] == pytest.approx(float(theirs["f1"]), abs=1e-4)


def test_best_span_keeps_to_the_context_the_max_context_window_and_the_length_limit():
    context = "Tesla was born in 1856 in Smiljan"
    # tokens: [CLS] q [SEP] Tesla was born in 1856 in Smiljan [SEP]
    spans = [(0, 5), (6, 9), (10, 14), (15, 17), (18, 22), (23, 25), (26, 33)]
    off = np.full((10, 2), -1)
    off[2:9] = spans
    maxc = np.zeros(10, bool)
    maxc[2:9] = True
    start, end = np.zeros(10), np.zeros(10)
    start[0] = end[0] = 9.0  # [CLS]: never an answer
    start[1] = 8.0  # the question: never an answer
    start[6], end[6] = 3.0, 3.0  # "1856"
    start[8], end[8] = 2.0, 2.5
    assert best_span([start], [end], [off], [maxc], context) == ("1856", 6.0)
    maxc[6] = False  # "1856" starts a span only in another window: the next best
    assert best_span([start], [end], [off], [maxc], context) == ("Smiljan", 4.5)
    maxc[6] = True
    end[8] = 5.0  # "1856 in Smiljan" (3 tokens) scores 8
    assert best_span([start], [end], [off], [maxc], context)[0] == "1856 in Smiljan"
    assert best_span([start], [end], [off], [maxc], context, max_answer_len=2)[0] == "Smiljan"
