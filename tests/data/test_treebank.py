"""Treebank reading, cleaning and file patterns: the bundled hand-written sample, and one-line
errors (file and line) for every kind of malformed tree."""

from __future__ import annotations

from pathlib import Path

import pytest

from fullrank.data.treebank import (
    Tree,
    clean,
    load_treebank,
    read_tree_file,
    read_tree_line,
    read_trees,
    strip_function_tags,
    treebank_files,
)
from fullrank.errors import ConfigError, DataError

TINY = Path(__file__).parent / "treebank" / "tiny.mrg"


def test_the_bundled_sample_reads_with_the_line_each_tree_starts_on():
    found = read_tree_file(TINY)
    assert [line for line, _ in found] == [1, 13, 25, 41, 54, 57, 58, 59]
    line, first = found[0]
    top = first.children[0]
    assert first.label == "" and isinstance(top, Tree) and top.label == "S"  # the unlabelled outer bracket
    assert first.leaves()[:3] == ["The", "small", "company"]
    assert "0" in first.leaves()  # a trace, still there before cleaning


def test_clean_drops_traces_empty_constituents_function_tags_and_the_outer_bracket():
    ((_, raw),) = read_trees(
        "( (S (NP-SBJ-1 (-NONE- *)) (VP (VBD said) (SBAR (-NONE- 0) "
        "(S (-NONE- *T*-2)))) (PP-LOC=2 (IN in) (NP (-LRB- -LRB-) "
        "(NNP Paris) (-RRB- -RRB-))) (. .)) )"
    )
    assert clean(raw) == Tree(
        "S",
        [
            Tree("VP", [Tree("VBD", ["said"])]),
            Tree(
                "PP",
                [
                    Tree("IN", ["in"]),
                    Tree("NP", [Tree("-LRB-", ["-LRB-"]), Tree("NNP", ["Paris"]), Tree("-RRB-", ["-RRB-"])]),
                ],
            ),
            Tree(".", ["."]),
        ],
    )


def test_clean_labels_an_outer_bracket_over_several_constituents_top_and_keeps_nothing_of_traces():
    ((_, raw),) = read_trees("( (NP (NNP Acme)) (. .) )")
    cleaned = clean(raw)
    assert cleaned is not None and cleaned.label == "TOP"
    ((_, traces),) = read_trees("( (S (NP-SBJ (-NONE- *)) (VP (-NONE- *?*))) )")
    assert clean(traces) is None


@pytest.mark.parametrize(
    "label,stripped",
    [
        ("NP-SBJ-1", "NP"),
        ("PP=2", "PP"),
        ("S-TPC-3", "S"),
        ("NP-SBJ=4", "NP"),
        ("PRT|ADVP", "PRT|ADVP"),
        ("-LRB-", "-LRB-"),
        ("-NONE-", "-NONE-"),
        ("PRP$", "PRP$"),
    ],
)
def test_function_tags_and_indices_are_stripped(label, stripped):
    assert strip_function_tags(label) == stripped


def test_to_string_writes_one_line_and_escapes_bracket_words():
    tree = Tree("S", [Tree("NP", [Tree("XX", ["("]), Tree("XX", ["it"]), Tree("XX", [")"])])])
    assert tree.to_string() == "(S (NP (XX -LRB-) (XX it) (XX -RRB-)))"
    back = read_tree_line(tree.to_string(), source="x", line_number=1)
    assert back is not None and back.leaves() == ["-LRB-", "it", "-RRB-"]


@pytest.mark.parametrize(
    "word,written",
    [("(a)", "-LRB-a-RRB-"), (":-)", ":--RRB-"), ("f(x)(y", "f-LRB-x-RRB--LRB-y"), ("(", "-LRB-")],
)
def test_brackets_inside_a_word_are_escaped_so_the_tree_reads_back(word, written):
    line = Tree("S", [Tree("XX", [word]), Tree("XX", ["b"])]).to_string()
    assert line == f"(S (XX {written}) (XX b))"
    back = read_tree_line(line, source="x", line_number=1)
    assert back is not None and back.leaves() == [written, "b"]


def test_a_tree_nested_ten_thousand_deep_reads_writes_cleans_and_linearizes():
    from fullrank.data.linearize import delinearize, linearize, with_placeholder_tags
    from fullrank.evaluation.parse_eval import score_trees

    depth = 10_000  # ten times Python's recursion limit
    line = "( " + "(NP-SBJ " * depth + "(NN a) (-NONE- *T*)" + ")" * depth + " )"
    tree = read_tree_line(line, source="x", line_number=1)
    assert tree is not None and tree.to_string() == "(NP-SBJ " * depth + "(NN a) (-NONE- *T*)" + ")" * depth
    cleaned = clean(tree)
    assert cleaned is not None and cleaned.to_string() == "(NP " * depth + "(NN a)" + ")" * depth
    tokens = linearize(cleaned)
    assert tokens == ["(NP"] * depth + ["XX"] + [")NP"] * depth
    assert delinearize(tokens, ["a"]).tree.to_string() == with_placeholder_tags(cleaned).to_string()
    assert score_trees([cleaned], [cleaned]).all.matched == depth


@pytest.mark.parametrize(
    "text,line,what",
    [
        ("(S (NP (DT a) (NN b))\n", 1, "never closed"),
        ("(S (NP (DT a)))\n\n(NP (DT b)))", 3, "closes no bracket"),
        ("(S (NP (DT a)))\nstray (NP (DT b))", 2, "'stray' is outside any bracket"),
        ("(S\n  (NP (DT a) ()) )", 2, "empty brackets"),
        ("(S (NP (DT a b)))", 1, "two words under the tag 'DT'"),
        ("(S\n (NP (DT a) the))", 2, "the word 'the' beside subtrees"),
        ("(S (NN dog (DT a)))", 1, "holds a word and a bracket"),
        ("(S\n\n  ( (DT a)))", 3, "no label holds subtrees"),
        ("(S (NP))", 1, "'(NP' has nothing inside"),
    ],
)
def test_a_malformed_tree_is_one_line_naming_the_file_and_line(tmp_path, text, line, what):
    path = tmp_path / "bad.mrg"
    path.write_text(text)
    with pytest.raises(DataError) as e:
        read_tree_file(path)
    message = str(e.value)
    assert message.startswith(f"{path} line {line}: ") and what in message and "\n" not in message


def test_read_tree_line_takes_one_tree_per_line():
    assert read_tree_line("  ", source="f", line_number=3) is None
    tree = read_tree_line("( (S (NN x)) )", source="f", line_number=3)
    assert tree is not None and tree.label == "S"
    with pytest.raises(DataError, match="^f line 3: 2 trees on one line"):
        read_tree_line("(S (NN x)) (S (NN y))", source="f", line_number=3)


def test_file_patterns_expand_ranges_with_their_padding_and_globs(tmp_path):
    for n in (1, 2, 3, 10, 11):
        (tmp_path / f"wsj_{n:04d}.mrg").write_text("(S (NN x))")
    assert [p.name for p in treebank_files(tmp_path, "wsj_{0002..0003}.mrg")] == [
        "wsj_0002.mrg",
        "wsj_0003.mrg",
    ]
    assert [p.name for p in treebank_files(tmp_path, "wsj_001?.mrg")] == ["wsj_0010.mrg", "wsj_0011.mrg"]
    with pytest.raises(DataError, match=r"wsj_0004\.mrg: no such treebank file"):
        treebank_files(tmp_path, "wsj_{0001..0004}.mrg")
    with pytest.raises(DataError, match="matches no file"):
        treebank_files(tmp_path, "ptb_*.mrg")
    with pytest.raises(ConfigError, match="runs backwards"):
        treebank_files(tmp_path, "wsj_{0003..0001}.mrg")


def test_load_treebank_cleans_every_tree_and_remembers_where_it_came_from():
    split = load_treebank(TINY.parent, "tiny.mrg")
    assert len(split) == 8 and split.n_files == 1
    assert split.origins[2] == (str(TINY), 25)
    assert all(t.label and "-NONE-" not in t.to_string() for t in split.trees)
    assert split.n_words == sum(len(t.leaves()) for t in split.trees)
