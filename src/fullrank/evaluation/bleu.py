"""BLEU and chrF with ``sacrebleu``.

Three figures, each labelled:

- **sacreBLEU** — detokenized, cased output against the raw references with sacrebleu's default
  ``13a`` tokenization; the comparable, reproducible figure, printed with its signature.
- **chrF** — character n-gram F-score (sacrebleu defaults).
- **tokenized BLEU (lowercased)** — BLEU on lowercased, ``13a``-tokenized text, the measure most
  published Multi30k figures use (``multi-bleu.perl`` on tokenized lowercased text).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sacrebleu.metrics import BLEU, CHRF

from fullrank.errors import DataError


@dataclass
class BleuReport:
    sacrebleu: float
    signature: str
    chrf: float
    chrf_signature: str
    tokenized_lowercased: float

    def lines(self) -> list[str]:
        return [f"sacreBLEU {self.sacrebleu:.2f}  ({self.signature})",
                f"chrF      {self.chrf:.2f}  ({self.chrf_signature})",
                f"tokenized BLEU, lowercased {self.tokenized_lowercased:.2f}  "
                f"(13a tokens, lowercase; the measure of published Multi30k figures)"]


def score(hypotheses: Sequence[str], references: Sequence[str]) -> BleuReport:
    """Corpus-level BLEU/chrF of detokenized ``hypotheses`` against raw ``references``."""
    if len(hypotheses) != len(references):
        raise DataError(f"{len(hypotheses)} hypotheses but {len(references)} references; "
                        f"they must be line-aligned")
    if not hypotheses:
        raise DataError("no hypotheses to score")
    refs = [list(references)]
    bleu = BLEU()
    chrf = CHRF()
    lower = BLEU(lowercase=True, tokenize="13a")
    b = bleu.corpus_score(list(hypotheses), refs)
    c = chrf.corpus_score(list(hypotheses), refs)
    low = lower.corpus_score(list(hypotheses), refs)
    return BleuReport(sacrebleu=b.score, signature=str(bleu.get_signature()), chrf=c.score,
                      chrf_signature=str(chrf.get_signature()), tokenized_lowercased=low.score)
