"""A parser run on given trees: the source and target text it reads and writes in training."""

from __future__ import annotations

import pytest

from fullrank.data.linearize import linearize
from fullrank.data.tokenizers import Tokenizer
from fullrank.data.treebank import read_tree_line


def test_teacher_forced_pairs_are_what_the_parser_reads_and_writes(tmp_path):
    from fullrank.data.unknown_words import signature
    from fullrank.errors import DataError
    from fullrank.inference.parse import teacher_forced

    f = tmp_path / "words.txt"
    f.write_text(f"the dog barks . {signature('Zorba')} the dog\n")
    words = Tokenizer.train("word", [f])
    tree = read_tree_line(
        "(S (NP (NNP Zorba)) (VP (VBZ barks) (PRN (-LRB- -LRB-) (NP (DT the) "
        "(NN dog)) (-RRB- -RRB-))) (. .))",
        source="t",
        line_number=1,
    )
    assert tree is not None
    sentence = "Zorba barks ( the dog ) ."
    sig = signature("Zorba")
    [(src, tgt)] = teacher_forced(
        words, [sentence], [tree], leaves="word", order="in_order", where=["t line 1"]
    )
    # the unknown word goes in as its signature on both sides; brackets are the treebank's
    assert src == f"{sig} barks -LRB- the dog -RRB- ."
    assert tgt.split() == [t if t != "Zorba" else sig for t in linearize(tree, "word", "in_order")]
    [(_, xx)] = teacher_forced(
        words, [sentence], [tree], leaves="placeholder", order="top_down", where=["t line 1"]
    )
    assert xx.split() == linearize(tree)
    with pytest.raises(DataError, match="t line 1: the tree's words .* are not the sentence's"):
        teacher_forced(words, ["Zorba barks ."], [tree], leaves="word", order="top_down", where=["t line 1"])
