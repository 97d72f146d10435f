"""SQuAD v1.1: exact match and F1 as the official ``evaluate-v1.1.py`` defines them, and the
post-processing that turns start/end logits into answer text.

**Metric.** An answer is normalised — lowercased, punctuation (``string.punctuation``) removed,
the articles ``a``/``an``/``the`` removed as whole words, white space collapsed. EM is 1 when the
normalised prediction equals a normalised reference; F1 is the harmonic mean of precision and
recall of the normalised tokens' multiset overlap. Each question scores the maximum over its
references; the figures are means over questions, × 100.

**Post-processing** (BERT's ``write_predictions``, Hugging Face's ``postprocess_qa_predictions``):
in every window of a question, the ``n_best`` highest start logits × the ``n_best`` highest end
logits; a span counts when both ends lie in the window's context part, the start token is in its
max-context window, ``end ≥ start`` and it is at most ``max_answer_len`` tokens long; its score is
``start_logit + end_logit``; the best span over all windows of the question wins, and its text is
the paragraph between the start token's first character and the end token's last.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Sequence

import numpy as np

_PUNCTUATION = set(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")


def normalize_answer(text: str) -> str:
    """Lowercase, drop punctuation, drop articles, collapse white space (the official order)."""
    text = "".join(ch for ch in text.lower() if ch not in _PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def exact_match(prediction: str, reference: str) -> float:
    return float(normalize_answer(prediction) == normalize_answer(reference))


def f1(prediction: str, reference: str) -> float:
    pred, ref = normalize_answer(prediction).split(), normalize_answer(reference).split()
    common = sum((Counter(pred) & Counter(ref)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(pred), common / len(ref)
    return 2 * precision * recall / (precision + recall)


def squad_scores(predictions: Sequence[str], references: Sequence[Sequence[str]]) -> dict[str, float]:
    """``{"em", "f1"}`` in percent, and ``"questions"``: each prediction against the best of
    its references."""
    if len(predictions) != len(references):
        raise ValueError(f"{len(predictions)} predictions for {len(references)} questions")
    em = sum(max(exact_match(p, r) for r in refs) for p, refs in zip(predictions, references))
    f = sum(max(f1(p, r) for r in refs) for p, refs in zip(predictions, references))
    n = max(len(predictions), 1)
    return {"em": 100.0 * em / n, "f1": 100.0 * f / n, "questions": len(predictions)}


def best_span(
    start_logits: Sequence[np.ndarray],
    end_logits: Sequence[np.ndarray],
    offsets: Sequence[np.ndarray],
    max_context: Sequence[np.ndarray],
    context: str,
    *,
    n_best: int = 20,
    max_answer_len: int = 30,
) -> tuple[str, float]:
    """The answer text and score of one question from the logits of its windows.

    ``start_logits[w]``/``end_logits[w]`` ``(L_w,)``, ``offsets[w]`` ``(L_w, 2)`` character spans
    (``-1`` outside the context part), ``max_context[w]`` ``(L_w,)`` bool. Returns ``("", -inf)``
    when no window has a valid span.
    """
    best_text, best_score = "", float("-inf")
    for s_log, e_log, off, maxc in zip(start_logits, end_logits, offsets, max_context):
        tops = np.argsort(-s_log, kind="stable")[:n_best]
        tope = np.argsort(-e_log, kind="stable")[:n_best]
        for s in tops:
            if off[s, 0] < 0 or not maxc[s]:
                continue
            for e in tope:
                if off[e, 0] < 0 or e < s or e - s + 1 > max_answer_len:
                    continue
                score = float(s_log[s] + e_log[e])
                if score > best_score:
                    best_score = score
                    best_text = context[off[s, 0] : off[e, 1]]
    return best_text, best_score
