"""The EVALB-rule scorer on hand-worked pairs, one rule at a time, and against PYEVALB (an
independent implementation) where their rules coincide."""

from __future__ import annotations

import random

import pytest

from fullrank.data.treebank import Tree, read_tree_line
from fullrank.errors import DataError
from fullrank.evaluation.parse_eval import format_report, score_sentence, score_trees


def tree(text: str) -> Tree:
    found = read_tree_line(text, source="test", line_number=1)
    assert found is not None
    return found


def counts(hyp: str, ref: str) -> tuple[int, int, int, int]:
    """``(matched, gold, test, crossing)`` of one pair."""
    s = score_sentence(tree(hyp), tree(ref))
    return s.matched, s.gold, s.test, s.crossing


GOLD = "(S (NP (DT the) (NN dog)) (VP (VBZ sees) (NP (PRP it))) (. .))"


def test_identical_trees_score_100_and_match_exactly():
    r = score_trees([tree(GOLD)], [tree(GOLD)])
    assert (r.all.precision, r.all.recall, r.all.f1, r.all.exact_match) == (100, 100, 100, 100)


def test_crossing_brackets():
    # gold: S[0,4] NP[0,2] VP[2,4] NP[3,4]; test: S[0,4] NP[0,1] X[1,3] NP[3,4]; S and NP[3,4]
    # match; X[1,3] crosses NP[0,2] and VP[2,4]: one crossing test bracket
    hyp = "(S (NP (DT the)) (X (NN dog) (VBZ sees)) (NP (PRP it)) (. .))"
    assert counts(hyp, GOLD) == (2, 4, 4, 1)
    r = score_trees([tree(hyp)], [tree(GOLD)])
    assert r.all.precision == r.all.recall == r.all.f1 == 50.0 and r.all.exact_match == 0.0
    assert r.all.average_crossing == 1.0


def test_unary_chains_count_as_a_multiset():
    chain = "(S (NP (NP (DT the) (NN dog))) (VP (VBZ barks)))"
    single = "(S (NP (DT the) (NN dog)) (VP (VBZ barks)))"
    assert counts(single, chain) == (3, 4, 3, 0)  # recall 3/4, precision 1
    assert counts(chain, single) == (3, 3, 4, 0)  # recall 1, precision 3/4
    assert counts(chain, chain) == (4, 4, 4, 0)


def test_punctuation_is_deleted_so_where_it_attaches_does_not_count():
    hyp = "(S (NP (DT the) (NN dog)) (VP (VBZ sees) (NP (PRP it)) (. .)))"
    assert counts(hyp, GOLD) == (4, 4, 4, 0)
    # a bracket over punctuation alone spans no word and is not counted
    assert counts("(S (NP (DT the) (NN dog)) (VP (VBZ sees) (NP (PRP it))) (X (. .)))", GOLD) == (4, 4, 4, 0)
    # every punctuation tag of COLLINS.prm, plus nk.prm's ? and !
    ref = "(S (`` ``) (NP (NN a)) (, ,) (VP (VB b) (: ;) ('' '')) (. .) (? ?) (! !))"
    hyp = "(S (NP (`` ``) (NN a) (, ,)) (VP (VB b)) (: ;) ('' '') (. .) (? ?) (! !))"
    assert counts(hyp, ref) == (3, 3, 3, 0)


def test_punctuation_is_read_from_the_reference_so_placeholder_tags_score_the_same():
    hyp = "(S (NP (XX the) (XX dog)) (VP (XX sees) (NP (XX it)) (XX .)))"
    assert counts(hyp, GOLD) == (4, 4, 4, 0)


def test_a_wrong_label_is_a_wrong_bracket():
    hyp = "(S (NP (DT the) (NN dog)) (ADJP (VBZ sees) (NP (PRP it))) (. .))"
    assert counts(hyp, GOLD) == (3, 4, 4, 0)


def test_advp_and_prt_are_one_label():
    ref = "(S (NP (PRP They)) (VP (VBD gave) (PRT (RP up))))"
    assert counts(ref.replace("PRT", "ADVP"), ref) == (4, 4, 4, 0)
    assert counts(ref.replace("PRT", "PP"), ref) == (3, 4, 4, 0)


def test_function_tags_top_s1_and_the_outer_bracket_are_ignored():
    ref = "(S (NP (PRP They)) (VP (VBD left)))"
    for hyp in (
        "(TOP (S-TPC-1 (NP-SBJ=2 (PRP They)) (VP (VBD left))))",
        "(S1 (S (NP (PRP They)) (VP (VBD left))))",
        "( (S (NP (PRP They)) (VP (VBD left))) )",
    ):
        assert counts(hyp, ref) == (3, 3, 3, 0)


def test_traces_in_either_tree_are_deleted_and_not_counted_in_the_length():
    ref = "(S (NP-SBJ-1 (-NONE- *)) (VP (VB go) (ADVP (RB home))) (. .))"
    s = score_sentence(tree("(S (VP (VB go) (ADVP (RB home))) (. .))"), tree(ref))
    assert (s.matched, s.gold, s.test, s.length) == (3, 3, 3, 3)  # '.' counts in the length


def test_totals_are_summed_before_dividing_and_split_at_40_words():
    long_words = " ".join(f"(NN w{i})" for i in range(41))
    long_ref = f"(S (NP {long_words}) (VP (VB x)))"
    long_hyp = f"(S {long_words} (VP (VB x)))"  # 2 of 3 brackets
    short_ref, short_hyp = GOLD, GOLD
    r = score_trees([tree(long_hyp), tree(short_hyp)], [tree(long_ref), tree(short_ref)])
    assert (r.all.matched, r.all.gold, r.all.test) == (6, 7, 6)
    assert r.all.recall == pytest.approx(600 / 7) and r.all.precision == 100.0
    assert r.all.exact_match == 50.0
    assert (r.short.sentences, r.short.matched, r.short.gold) == (1, 4, 4)
    assert r.short.f1 == 100.0


def test_an_empty_hypothesis_is_skipped_and_counted_as_evalb_does():
    r = score_trees([None, tree(GOLD)], [tree(GOLD), tree(GOLD)])
    assert (r.all.sentences, r.all.skipped, r.all.valid, r.all.f1) == (2, 1, 1, 100.0)
    assert "skipped (no tree)" in format_report(r)


def test_a_tree_over_other_words_is_one_line_naming_the_line():
    with pytest.raises(DataError) as e:
        score_trees(
            [tree(GOLD), tree(GOLD.replace("dog", "cat"))],
            [tree(GOLD)] * 2,
            where="hyp.txt line",
            lines=[3, 7],
        )
    message = str(e.value)
    assert message.startswith("hyp.txt line 7: the tree's 5 words differ") and "\n" not in message
    assert "at word 2 ('cat' against 'dog')" in message
    with pytest.raises(DataError, match="4 words differ from the reference's 5 at word 5"):
        score_trees([tree("(S (NP (DT the) (NN dog)) (VP (VBZ sees) (NP (PRP it))))")], [tree(GOLD)])
    with pytest.raises(DataError, match="1 hypothesis trees for 2 references"):
        score_trees([tree(GOLD)], [tree(GOLD)] * 2)


# ------------------------------------------------------------------ a second implementation
LABELS = ["S", "NP", "VP", "PP", "SBAR", "ADJP"]


def random_tree(rng: random.Random, words: list[str]) -> Tree:
    """A random bracketing of ``words`` (tagged NN), random labels from :data:`LABELS`."""
    nodes: list[Tree | str] = [Tree("NN", [w]) for w in words]
    while len(nodes) > 1:
        i = rng.randrange(len(nodes))
        j = rng.randint(i + 1, min(len(nodes), i + 3))
        nodes[i:j] = [Tree(rng.choice(LABELS), nodes[i:j])]
    root = nodes[0]
    assert isinstance(root, Tree)
    return root if not root.is_preterminal else Tree("S", [root])


def spans(t: Tree) -> list[tuple[int, int, str]]:
    out, pos = [], 0

    def walk(n: Tree | str) -> None:
        assert isinstance(n, Tree)
        nonlocal pos
        if n.is_preterminal:
            pos += 1
            return
        start = pos
        for c in n.children:
            walk(c)
        out.append((start, pos, n.label))

    walk(t)
    return out


@pytest.mark.reference
def test_agrees_with_pyevalb_where_their_rules_coincide():
    """PYEVALB counts brackets as a set and keeps punctuation: on trees without punctuation, TOP,
    function tags, ADVP/PRT or repeated (span, label) pairs, both must give the same counts."""
    pyevalb = pytest.importorskip("PYEVALB", reason="PYEVALB is a test dependency (pip install -e '.[test]')")
    from PYEVALB import parser, scorer

    rng = random.Random(0)
    compared = 0
    while compared < 300:
        words = [f"w{i}" for i in range(rng.randint(2, 12))]
        ref, hyp = random_tree(rng, words), random_tree(rng, words)
        if any(len(set(spans(t))) != len(spans(t)) for t in (ref, hyp)):
            continue  # a repeated (span, label): PYEVALB's set counts it once
        theirs = scorer.Scorer().score_trees(
            parser.create_from_bracket_string(ref.to_string()),
            parser.create_from_bracket_string(hyp.to_string()),
        )
        ours = score_sentence(hyp, ref)
        assert (ours.matched, ours.gold, ours.test, ours.crossing) == (
            theirs.matched_brackets,
            theirs.gold_brackets,
            theirs.test_brackets,
            theirs.cross_brackets,
        ), (ref, hyp)
        compared += 1
    assert pyevalb is not None
