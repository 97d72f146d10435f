"""BLEU and chrF with ``sacrebleu`` (and ``sacremoses`` for Multi30k's own tokenization).

Four figures, each labelled:

- **sacreBLEU** — detokenized, cased output against the raw references with sacrebleu's default
  ``13a`` tokenization; the comparable, reproducible figure, printed with its signature.
- **chrF** — character n-gram F-score (sacrebleu defaults).
- **tokenized BLEU (lowercased)** — BLEU on lowercased, ``13a``-tokenized text.
- **Moses-tokenized BLEU (lowercased)** — BLEU on text put through the pipeline that made the
  Multi30k release's ``*.lc.norm.tok.*`` files (``scripts/task1-tokenize.sh`` of
  ``multi30k/dataset``: ``lowercase.perl | normalize-punctuation.perl -l L | tokenizer.perl -l
  L``), here ``sacremoses``'s ports of those scripts, with sacrebleu's BLEU on the resulting
  tokens (``multi-bleu.perl``'s computation). Published Multi30k figures are this measure: the
  models are trained and scored on those files. On our En→De outputs it lands within 0.05 BLEU
  of the ``13a`` figure (README, *Results*); the two differ on apostrophes (Moses splits
  ``geht's``, ``13a`` keeps it) and on quotes (Moses normalises „…“ to ``"`` first).

:func:`paired_bootstrap` asks whether two systems' scores on the same references differ by more
than chance (sacrebleu's paired bootstrap resampling, Koehn 2004): e.g. an averaged checkpoint
against the last one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sacrebleu.metrics import BLEU, CHRF
from sacrebleu.metrics.base import Metric
from sacrebleu.significance import PairedTest

from fullrank.errors import DataError


@dataclass
class BleuReport:
    sacrebleu: float
    signature: str
    chrf: float
    chrf_signature: str
    tokenized_lowercased: float
    moses_lowercased: float
    lang: str

    def lines(self) -> list[str]:
        return [
            f"sacreBLEU {self.sacrebleu:.2f}  ({self.signature})",
            f"chrF      {self.chrf:.2f}  ({self.chrf_signature})",
            f"tokenized BLEU, lowercased {self.tokenized_lowercased:.2f}  (13a tokens, lowercase)",
            f"Moses-tokenized BLEU, lowercased {self.moses_lowercased:.2f}  (lowercase, "
            f"normalize-punctuation and Moses tokenizer, -l {self.lang}: the Multi30k release's "
            f"lc.norm.tok files, the measure of published Multi30k figures)",
        ]


def moses_tokenize(lines: Sequence[str], lang: str) -> list[str]:
    """``lines`` as the Multi30k release tokenizes them: lowercased, punctuation normalised
    and Moses-tokenized for language ``lang`` (XML characters escaped, as ``tokenizer.perl``
    does by default); tokens joined by single spaces."""
    # imported where it is used: sacremoses compiles its rules on import (half a second)
    from sacremoses import MosesPunctNormalizer, MosesTokenizer

    norm, tok = MosesPunctNormalizer(lang=lang), MosesTokenizer(lang=lang)
    return [tok.tokenize(norm.normalize(line.lower()), escape=True, return_str=True) for line in lines]


def score(hypotheses: Sequence[str], references: Sequence[str], *, lang: str) -> BleuReport:
    """Corpus-level BLEU/chrF of detokenized ``hypotheses`` against raw ``references``, in
    target language ``lang`` (an ISO code: it picks the Moses tokenizer's rules)."""
    if len(hypotheses) != len(references):
        raise DataError(
            f"{len(hypotheses)} hypotheses but {len(references)} references; they must be line-aligned"
        )
    if not hypotheses:
        raise DataError("no hypotheses to score")
    hyps, refs = list(hypotheses), [list(references)]
    bleu = BLEU()
    chrf = CHRF()
    b = bleu.corpus_score(hyps, refs)
    c = chrf.corpus_score(hyps, refs)
    low = BLEU(lowercase=True, tokenize="13a").corpus_score(hyps, refs)
    moses = BLEU(tokenize="none", force=True).corpus_score(
        moses_tokenize(hyps, lang), [moses_tokenize(references, lang)]
    )
    return BleuReport(
        sacrebleu=b.score,
        signature=str(bleu.get_signature()),
        chrf=c.score,
        chrf_signature=str(chrf.get_signature()),
        tokenized_lowercased=low.score,
        moses_lowercased=moses.score,
        lang=lang,
    )


@dataclass
class PairedResult:
    """One metric of a paired bootstrap test: ``system`` against ``baseline``."""

    metric: str
    system: float
    baseline: float
    ci: float  # half-width of the 95% interval of the system's bootstrap mean
    p_value: float  # chance of a difference at least this large if both came from one system
    signature: str

    def line(self) -> str:
        star = "  *" if self.p_value < 0.05 else ""
        return (
            f"{self.metric:<27}{self.system:6.2f} vs {self.baseline:6.2f}  "
            f"Δ {self.system - self.baseline:+.2f}  95% CI ±{self.ci:.2f}  "
            f"p = {self.p_value:.3f}{star}  ({self.signature})"
        )


def paired_bootstrap(
    hypotheses: Sequence[str], baseline: Sequence[str], references: Sequence[str], *, resamples: int = 1000
) -> list[PairedResult]:
    """sacreBLEU, chrF and tokenized lowercased BLEU of ``hypotheses`` against ``baseline``
    (both detokenized, line-aligned with ``references``), each with the p-value of sacrebleu's
    paired bootstrap test over ``resamples`` resamplings of the test set (seed: sacrebleu's,
    ``SACREBLEU_SEED``, default 12345, so the figures repeat).

    Equal scores (identical translations, say) get p = 1: sacrebleu's test follows multeval,
    which counts a zero difference as significant (p = 1 / (resamples + 1)), a reading this
    report does not take."""
    for name, lines in (("hypotheses", hypotheses), ("baseline", baseline)):
        if len(lines) != len(references):
            raise DataError(
                f"{len(lines)} {name} but {len(references)} references; they must be line-aligned"
            )
    if not references:
        raise DataError("no hypotheses to score")
    if resamples < 1:
        raise DataError(f"resamples = {resamples} must be at least 1 (1000 is usual)")
    metrics: dict[str, Metric] = {
        "sacreBLEU": BLEU(),
        "chrF": CHRF(),
        "tokenized BLEU, lowercased": BLEU(lowercase=True),
    }
    out = []
    for label, metric in metrics.items():
        # one metric per test: sacrebleu keys its results by metric name, and two BLEUs collide
        signatures, scores = PairedTest(
            [("baseline", list(baseline)), ("system", list(hypotheses))],
            {label: metric},
            [list(references)],
            test_type="bs",
            n_samples=resamples,
        )()
        # results under sacrebleu's own metric name (e.g. "chrF2"), beside the "System" column
        ((name, signature),) = signatures.items()
        base, system = scores[name]
        assert not isinstance(base, str) and not isinstance(system, str)  # results, not names
        p_value = 1.0 if system.score == base.score else float(system.p_value or 0.0)
        out.append(
            PairedResult(label, system.score, base.score, float(system.ci or 0.0), p_value, str(signature))
        )
    return out
