"""Labelled bracket precision, recall, F1 and exact match with the rules of EVALB's
``COLLINS.prm`` (Sekine & Collins 1997), the standard parsing score ([V17] Table 4).

No maintained Python package applies these rules (PYEVALB counts brackets as a set, keeps
punctuation, ``TOP`` and function tags), so this module implements them, as EVALB's ``evalb.c``
and its README define them:

1. **Deleted terminals.** Words tagged ``-NONE-`` (traces) or with a punctuation tag (``,`` ``:``
   `````` ``''`` ``.``, and ``?`` ``!`` of ``nk.prm``) are removed, with their brackets; spans are
   counted over the words that remain. The tags are read from the **reference** tree, for both
   trees: a parser that writes placeholder tags (``XX``, :mod:`fullrank.data.linearize`) is
   scored as EVALB scores it with the gold tags put back (the usual practice). On every
   sentence EVALB accepts this is EVALB's count; a tagged hypothesis that disagrees with the
   reference on which words are punctuation is a "length unmatch" error sentence for EVALB and
   scored here.
2. **Labels** are cut at the first ``-`` or ``=`` (``NP-SBJ`` → ``NP``); brackets labelled ``TOP``
   or ``S1`` are not counted, nor brackets over no remaining word (e.g. over punctuation alone).
   An unlabelled outer bracket ``( (S …) )`` is removed when the trees are read, like ``TOP``.
3. **Equal labels**: ``ADVP`` = ``PRT``.
4. **Matching**: brackets are ``(start, end, label)`` triples counted as a *multiset*: ``n`` gold
   and ``m`` test copies of one triple match ``min(n, m)`` times (a unary chain ``(NP (NP …))``
   counts twice).
5. **Totals** are summed over sentences before dividing (precision = matched / test brackets,
   recall = matched / gold brackets, F1 their harmonic mean); **exact match** is the share of
   sentences with gold = test = matched brackets; **crossing** counts test brackets that cross a
   gold bracket. Results are given for all sentences and for those of at most 40 words
   (``CUTOFF_LEN 40``; the length counts every word but traces, punctuation included).
6. **Skipped**: an empty hypothesis (a parser that gave no tree) is skipped, counted but left out
   of the totals, as EVALB does. A hypothesis whose words differ from the reference's is an
   error here (EVALB counts it as an error sentence and stops after ten).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from fullrank.data.treebank import TRACE, Tree
from fullrank.errors import DataError

# COLLINS.prm's DELETE_LABEL, with nk.prm's S1, ? and !
DELETE_LABELS = frozenset({"TOP", "S1", TRACE, ",", ":", "``", "''", ".", "?", "!"})
LENGTH_DELETE_LABELS = frozenset({TRACE})
EQUAL_LABELS = {"PRT": "ADVP"}  # EQ_LABEL ADVP PRT
CUTOFF_LEN = 40


@dataclass(frozen=True)
class SentenceScore:
    """The bracket counts of one sentence (EVALB's per-sentence line)."""

    length: int
    gold: int
    test: int
    matched: int
    crossing: int
    skipped: bool = False

    @property
    def exact(self) -> bool:
        return not self.skipped and self.gold == self.test == self.matched


def _label(label: str) -> str:
    """EVALB's ``modify_label`` (cut at the first ``-`` or ``=``), then equal labels merged."""
    for i, c in enumerate(label):
        if c in "-=":
            label = label[:i]
            break
    return EQUAL_LABELS.get(label, label)


def brackets(tree: Tree, kept: Sequence[bool]) -> list[tuple[int, int, str]]:
    """The scored brackets of ``tree``: ``(start, end, label)`` over the words whose ``kept`` is
    true (one entry per preterminal, left to right), labels as EVALB compares them, with
    deleted labels and brackets over no kept word left out."""
    out: list[tuple[int, int, str]] = []
    position = 0
    index = 0  # preterminals seen
    # (node, None) on the way down; (node, the position it starts at) once its children are
    # queued, to close it when they are done
    stack: list[tuple[Tree, int | None]] = [(tree, None)]
    while stack:
        node, start = stack.pop()
        if node.is_preterminal:
            position += kept[index]
            index += 1
        elif start is None:
            stack.append((node, position))
            stack.extend((c, None) for c in reversed(node.children) if isinstance(c, Tree))
        else:
            label = _label(node.label)
            if position > start and label not in DELETE_LABELS:
                out.append((start, position, label))
    return out


def score_sentence(hyp: Tree | None, ref: Tree, *, where: str = "") -> SentenceScore:
    """EVALB's counts for one hypothesis against its reference (module docstring); ``hyp``
    ``None`` is skipped. A hypothesis over other words is a :class:`DataError` (``where`` says
    which line)."""
    ref_tags = ref.preterminals()
    length = sum(t.label not in LENGTH_DELETE_LABELS for t in ref_tags)
    if hyp is None:
        return SentenceScore(length, 0, 0, 0, 0, skipped=True)
    hyp_tags = hyp.preterminals()
    ref_words = [t.children[0] for t in ref_tags if t.label != TRACE]
    hyp_words = [t.children[0] for t in hyp_tags if t.label != TRACE]
    if ref_words != hyp_words:
        diff = next(
            (i for i, (a, b) in enumerate(zip(hyp_words, ref_words)) if a != b),
            min(len(hyp_words), len(ref_words)),
        )
        got = hyp_words[diff] if diff < len(hyp_words) else "(end)"
        want = ref_words[diff] if diff < len(ref_words) else "(end)"
        raise DataError(
            f"{where}the tree's {len(hyp_words)} words differ from the reference's "
            f"{len(ref_words)} at word {diff + 1} ('{got}' against '{want}'); "
            f"parse the reference's sentences, line by line"
        )
    # the reference decides which words are punctuation (rule 1), for both trees
    deleted = iter([t.label in DELETE_LABELS for t in ref_tags if t.label != TRACE])
    ref_kept = [t.label != TRACE and t.label not in DELETE_LABELS for t in ref_tags]
    hyp_kept = [t.label != TRACE and not next(deleted) for t in hyp_tags]
    gold, test = brackets(ref, ref_kept), brackets(hyp, hyp_kept)
    if not any(ref_kept):  # nothing but punctuation: EVALB skips the sentence
        return SentenceScore(length, 0, 0, 0, 0, skipped=True)
    matched = sum((Counter(gold) & Counter(test)).values())
    # each test bracket that crosses a gold one, compared span by distinct span: a tree over n
    # words has at most 2n - 1 of them, however deep its unary chains
    gold_spans = {(g0, g1) for g0, g1, _ in gold}
    crossing = sum(
        n
        for (t0, t1), n in Counter((t0, t1) for t0, t1, _ in test).items()
        if any(g0 < t0 < g1 < t1 or t0 < g0 < t1 < g1 for g0, g1 in gold_spans)
    )
    return SentenceScore(length, len(gold), len(test), matched, crossing)


@dataclass
class BracketScores:
    """Totals over a set of sentences (EVALB's summary block)."""

    sentences: int = 0
    skipped: int = 0
    gold: int = 0
    test: int = 0
    matched: int = 0
    exact: int = 0
    crossing: int = 0

    def add(self, s: SentenceScore) -> None:
        self.sentences += 1
        if s.skipped:
            self.skipped += 1
            return
        self.gold += s.gold
        self.test += s.test
        self.matched += s.matched
        self.exact += s.exact
        self.crossing += s.crossing

    @property
    def valid(self) -> int:
        return self.sentences - self.skipped

    @property
    def recall(self) -> float:
        return 100.0 * self.matched / self.gold if self.gold else 0.0

    @property
    def precision(self) -> float:
        return 100.0 * self.matched / self.test if self.test else 0.0

    @property
    def f1(self) -> float:
        p, r = self.precision, self.recall
        return 2 * p * r / (p + r) if p + r else 0.0

    @property
    def exact_match(self) -> float:
        return 100.0 * self.exact / self.valid if self.valid else 0.0

    @property
    def average_crossing(self) -> float:
        return self.crossing / self.valid if self.valid else 0.0

    def to_dict(self) -> dict[str, float]:
        return {
            "sentences": self.sentences,
            "skipped": self.skipped,
            "recall": self.recall,
            "precision": self.precision,
            "f1": self.f1,
            "exact_match": self.exact_match,
            "average_crossing": self.average_crossing,
            "matched": self.matched,
            "gold_brackets": self.gold,
            "test_brackets": self.test,
        }


@dataclass
class ParseReport:
    """Scores for all sentences and for those of at most :data:`CUTOFF_LEN` words."""

    all: BracketScores = field(default_factory=BracketScores)
    short: BracketScores = field(default_factory=BracketScores)
    sentences: list[SentenceScore] = field(default_factory=list)

    def to_dict(self) -> dict[str, dict[str, float]]:
        return {"all": self.all.to_dict(), f"len<={CUTOFF_LEN}": self.short.to_dict()}


def score_trees(
    hyps: Sequence[Tree | None],
    refs: Sequence[Tree],
    *,
    where: str = "sentence",
    lines: Sequence[int] | None = None,
) -> ParseReport:
    """Score hypotheses against references, sentence ``i`` against sentence ``i``; an error
    names ``where`` and the sentence's line (``lines[i]``, else ``i + 1``): ``"HYP line 12: …"``."""
    if len(hyps) != len(refs):
        raise DataError(
            f"{len(hyps)} hypothesis trees for {len(refs)} references; give one tree per reference, in order"
        )
    report = ParseReport()
    for i, (hyp, ref) in enumerate(zip(hyps, refs)):
        s = score_sentence(hyp, ref, where=f"{where} {lines[i] if lines else i + 1}: ")
        report.sentences.append(s)
        report.all.add(s)
        if s.length <= CUTOFF_LEN:
            report.short.add(s)
    return report


def format_report(report: ParseReport) -> str:
    """The summary as a small table, one column for all sentences and one for ≤ 40 words."""
    rows = [
        ("sentences", "sentences", "d"),
        ("skipped (no tree)", "skipped", "d"),
        ("recall", "recall", ".2f"),
        ("precision", "precision", ".2f"),
        ("F1", "f1", ".2f"),
        ("exact match", "exact_match", ".2f"),
        ("average crossing", "average_crossing", ".2f"),
    ]
    head = f"{'EVALB (COLLINS.prm)':<20}{'all':>10}{f'≤{CUTOFF_LEN} words':>12}"
    lines = [head, "-" * len(head)]
    for name, attr, fmt in rows:
        a, s = getattr(report.all, attr), getattr(report.short, attr)
        lines.append(f"{name:<20}{a:>10{fmt}}{s:>12{fmt}}")
    return "\n".join(lines)
