"""Linearized trees: the scheme, the exact round trip over every cleaned tree (the bundled sample
always, the NLTK sample when ../shared/data is there), and each repair of a malformed output."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from fullrank.data.linearize import (
    PLACEHOLDER,
    REPAIRS,
    delinearize,
    linearize,
    placeholders,
    top_down,
    with_placeholder_tags,
)
from fullrank.data.treebank import Tree, load_treebank, read_tree_line, read_trees
from fullrank.evaluation.parse_eval import score_trees
from tests.helpers import shared_data

TINY = Path(__file__).parent / "treebank"


def tree(text: str) -> Tree:
    found = read_tree_line(text, source="test", line_number=1)
    assert found is not None
    return found


def test_the_scheme_of_vinyals_et_al():
    t = tree("(S (NP (NNP Ms.) (NNP Haag)) (VP (VBZ plays) (NP (NNP Elianti))) (. .))")
    assert " ".join(linearize(t)) == "(S (NP XX XX )NP (VP XX (NP XX )NP )VP XX )S"


def test_the_word_scheme_writes_each_word_where_its_tag_was():
    t = tree("(S (NP (NNP Ms.) (NNP Haag)) (VP (VBZ plays) (NP (NNP Elianti))) (. .))")
    words = linearize(t, "word")
    assert " ".join(words) == "(S (NP Ms. Haag )NP (VP plays (NP Elianti )NP )VP . )S"
    assert placeholders(words) == linearize(t)
    assert placeholders(["(S", "<unk>", ")", ")S"]) == ["(S", "XX", "XX", ")S"]


def test_in_order_opens_each_constituent_after_its_first_child():
    t = tree("(S (NP (NNP Ms.) (NNP Haag)) (VP (VBZ plays) (NP (NNP Elianti))) (. .))")
    assert (
        " ".join(linearize(t, "word", "in_order")) == "Ms. (NP Haag )NP (S plays (VP Elianti (NP )NP )VP . )S"
    )
    # a unary chain, and a noun phrase inside a noun phrase: named once its first child is done
    t = tree("(S (NP (NP (DT the) (NN issue)) (VP (VBN raised))) (VP (VBZ is)))")
    assert (
        " ".join(linearize(t, "placeholder", "in_order"))
        == "XX (NP XX )NP (NP XX (VP )VP )NP (S XX (VP )VP )S"
    )
    assert top_down(linearize(t, "placeholder", "in_order")) == linearize(t)


def test_top_down_carries_a_malformed_in_order_sequence_over_for_repair():
    assert top_down("(NP XX )NP".split()) == "(NP XX )NP".split()  # opened over nothing
    assert top_down("XX )S XX".split()) == "XX )S XX".split()  # closed with nothing open
    assert top_down("XX (S XX (VP XX".split()) == "(S XX (VP XX XX".split()  # left open
    assert delinearize(placeholders(top_down("XX (S XX (VP XX".split())), ["a", "b", "c"]).repairs == (
        "unclosed",
    )


def assert_round_trip(trees: list[Tree]) -> None:
    back = [delinearize(linearize(t), t.leaves()) for t in trees]
    assert [delinearize(placeholders(linearize(t, "word")), t.leaves()) for t in trees] == back
    for leaves in ("placeholder", "word"):  # the in-order sequence holds the same tree
        assert [top_down(linearize(t, leaves, "in_order")) for t in trees] == [
            linearize(t, leaves) for t in trees
        ]
    assert [b.repairs for b in back] == [()] * len(trees)
    assert [b.tree for b in back] == [with_placeholder_tags(t) for t in trees]
    report = score_trees([b.tree for b in back], trees)
    assert report.all.f1 == 100.0 and report.all.exact_match == 100.0
    assert report.all.skipped == 0 and report.all.gold > 0


def test_round_trip_of_the_bundled_sample():
    assert_round_trip(load_treebank(TINY, "tiny.mrg").trees)


@pytest.mark.slow
def test_round_trip_of_every_tree_of_the_nltk_sample():
    root = shared_data("ptb-treebank-sample", "treebank", "combined")
    split = load_treebank(root, "wsj_*.mrg")
    assert len(split) == 3914
    assert_round_trip(split.trees)


WORDS = "a b c d e".split()


def repaired(text: str, words: list[str] = WORDS) -> tuple[str, tuple[str, ...]]:
    out = delinearize(text.split(), words)
    assert out.tree.leaves() == words
    return out.tree.to_string(), out.repairs


@pytest.mark.parametrize(
    "text,expected,repairs",
    [
        ("(S (NP XX XX )NP (VP XX XX XX )VP )S", "(S (NP (XX a) (XX b)) (VP (XX c) (XX d) (XX e)))", ()),
        (
            "(S (NP XX XX )NP (VP XX XX XX",  # never closed
            "(S (NP (XX a) (XX b)) (VP (XX c) (XX d) (XX e)))",
            ("unclosed",),
        ),
        (
            ")NP (S (NP XX XX )NP (VP XX XX XX )VP )S )S",  # closes nothing, twice
            "(S (NP (XX a) (XX b)) (VP (XX c) (XX d) (XX e)))",
            ("unopened",),
        ),
        (
            "(S (NP XX XX )VP (VP XX XX XX )NP )S",  # the innermost closes, whatever the label says
            "(S (NP (XX a) (XX b)) (VP (XX c) (XX d) (XX e)))",
            ("mismatched",),
        ),
        (
            "(S (NP XX <unk> XX )NP (VP XX XX XX )VP )S",
            "(S (NP (XX a) (XX b)) (VP (XX c) (XX d) (XX e)))",
            ("unknown",),
        ),
        (
            "(S (NP XX XX )NP (PP )PP (VP XX XX XX (NP )NP )VP )S",
            "(S (NP (XX a) (XX b)) (VP (XX c) (XX d) (XX e)))",
            ("empty",),
        ),
        (
            "(NP XX XX )NP (VP XX XX XX )VP",  # two roots
            "(S (NP (XX a) (XX b)) (VP (XX c) (XX d) (XX e)))",
            ("roots",),
        ),
        ("", "(S (XX a) (XX b) (XX c) (XX d) (XX e))", ("roots", "missing")),
        ("XX XX XX XX XX", "(S (XX a) (XX b) (XX c) (XX d) (XX e))", ("roots",)),
        (
            "(S (NP XX XX )NP (VP XX XX XX (NP XX XX )NP )VP )S",  # two placeholders too many
            "(S (NP (XX a) (XX b)) (VP (XX c) (XX d) (XX e)))",
            ("surplus",),
        ),
        (
            "(S (NP XX XX )NP (VP XX )VP )S",  # two too few
            "(S (NP (XX a) (XX b)) (VP (XX c)) (XX d) (XX e))",
            ("missing",),
        ),
        (
            "(S (NP XX XX (VP XX XX XX XX XX XX",
            "(S (NP (XX a) (XX b) (VP (XX c) (XX d) (XX e))))",
            ("unclosed", "surplus"),
        ),
    ],
)
def test_each_repair(text, expected, repairs):
    assert repaired(text) == (expected, repairs)
    assert set(repairs) <= set(REPAIRS)


def test_any_token_sequence_becomes_a_well_formed_tree_over_the_words():
    rng = random.Random(0)
    vocab = ["(S", ")S", "(NP", ")NP", "(VP", ")VP", PLACEHOLDER, PLACEHOLDER, "<unk>", ")"]
    for _ in range(500):
        words = [f"w{i}" for i in range(rng.randint(1, 9))]
        out = delinearize([rng.choice(vocab) for _ in range(rng.randint(0, 30))], words)
        assert out.tree.leaves() == words
        assert all(t.children for t in out.tree.subtrees())  # no constituent over no word
        ((_, again),) = read_trees(out.tree.to_string())  # and it is a readable tree
        assert again == out.tree
        # a repaired output's tree linearizes into a sequence that needs no repair
        assert not delinearize(linearize(out.tree), words).repaired


def test_delinearize_needs_words():
    with pytest.raises(ValueError, match="at least one word"):
        delinearize(["(S", "XX", ")S"], [])
