"""fullrank's scorer against EVALB itself, sentence by sentence.

EVALB (``evalb.c``, Sekine & Collins) is C and not shipped: compile it from a copy of EVALB
(e.g. the ``EVALB/`` folder of nikitakit/self-attentive-parser: ``gcc -O2 -o evalb evalb.c``) and
set ``FULLRANK_EVALB`` to the binary. The parameter file is written here with the rules of
:mod:`fullrank.evaluation.parse_eval` (COLLINS.prm's, with nk.prm's ``S1``, ``?``, ``!``). The
hypotheses are random edits of the gold trees: removed, added, relabelled (``ADVP``/``PRT``,
function tags) and crossing brackets, unary chains, empty lines; traces and function tags stay
in the gold trees for both scorers to remove.
"""

from __future__ import annotations

import copy
import os
import random
import re
import subprocess
from pathlib import Path

import pytest

from fullrank.data.treebank import Tree, read_tree_file, read_tree_line, treebank_files
from fullrank.evaluation.parse_eval import score_trees
from tests.helpers import SHARED_DATA

EVALB = os.environ.get("FULLRANK_EVALB")
PRM = """CUTOFF_LEN 40
LABELED 1
MAX_ERROR 1000000
DELETE_LABEL TOP
DELETE_LABEL S1
DELETE_LABEL -NONE-
DELETE_LABEL ,
DELETE_LABEL :
DELETE_LABEL ``
DELETE_LABEL ''
DELETE_LABEL .
DELETE_LABEL ?
DELETE_LABEL !
DELETE_LABEL_FOR_LENGTH -NONE-
EQ_LABEL ADVP PRT
"""
LABELS = ["NP", "VP", "PP", "ADVP", "PRT", "S", "NP-SBJ", "PP-TMP=2", "SBAR", "S1", "TOP"]


def perturb(tree: Tree, rng: random.Random) -> Tree:
    t = copy.deepcopy(tree)
    for _ in range(rng.randint(0, 6)):
        n = rng.choice([x for x in t.subtrees() if not x.is_preterminal])
        op = rng.randrange(5)
        kids = n.children
        if op == 0:  # remove a constituent, its children join n
            inner = [i for i, c in enumerate(kids) if isinstance(c, Tree) and not c.is_preterminal]
            if inner:
                i = rng.choice(inner)
                kids[i : i + 1] = kids[i].children  # type: ignore[union-attr]  # a tree
        elif op == 1 and len(kids) >= 2:  # a new bracket over some of n's children
            a = rng.randrange(len(kids))
            b = rng.randrange(a, len(kids)) + 1
            kids[a:b] = [Tree(rng.choice(LABELS), kids[a:b])]
        elif op == 2:  # relabel
            base = n.label.split("-")[0]
            n.label = rng.choice(LABELS + [{"ADVP": "PRT", "PRT": "ADVP"}.get(base, base + "-CLR")])
        elif op == 3:  # a unary chain
            n.children = [Tree(n.label, kids)]
        elif len(kids) >= 2 and isinstance(kids[1], Tree) and len(kids[1].children) >= 2:
            # crossing: the first child joins the first child of its right sibling
            first, second = kids[0], kids[1]
            kids[0:2] = [
                Tree(rng.choice(LABELS), [first, second.children[0]]),
                Tree(second.label, second.children[1:]),
            ]
    return t


def gold_tree(line: str, line_number: int) -> Tree:
    tree = read_tree_line(line, source="gold", line_number=line_number)
    assert tree is not None  # gold lines are never empty
    return tree


def evalb_lines(output: str) -> list[list[str]]:
    return [line.split() for line in output.splitlines() if re.match(r"^\s*\d+\s+\d+\s+\d\s", line)]


@pytest.mark.reference
@pytest.mark.skipif(not EVALB, reason="set FULLRANK_EVALB to a compiled evalb binary")
@pytest.mark.parametrize("source", ["bundled", "nltk"])
def test_every_sentence_scores_as_evalb_scores_it(tmp_path, source):
    if source == "bundled":
        files = [Path(__file__).parents[1] / "data" / "treebank" / "tiny.mrg"]
        repeats = 40
    else:
        root = SHARED_DATA / "ptb-treebank-sample" / "treebank" / "combined"
        if not root.exists():
            pytest.skip(f"needs the shared datasets: {root} is absent")
        files, repeats = treebank_files(root, "wsj_*.mrg"), 1
    golds = [Tree("TOP", t.children) for f in files for _, t in read_tree_file(f)] * repeats
    rng = random.Random(0)
    gold_lines = [g.to_string() for g in golds]
    hyp_lines = [perturb(g, rng).to_string() if rng.random() > 0.02 else "" for g in golds]
    for name, lines in (("gold", gold_lines), ("hyp", hyp_lines)):
        (tmp_path / name).write_text("\n".join(lines) + "\n")
    (tmp_path / "rules.prm").write_text(PRM)
    assert EVALB is not None  # skipped without it
    out = subprocess.run(
        [EVALB, "-p", str(tmp_path / "rules.prm"), str(tmp_path / "gold"), str(tmp_path / "hyp")],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    theirs = evalb_lines(out)
    ours = score_trees(
        [read_tree_line(h, source="hyp", line_number=i) for i, h in enumerate(hyp_lines, 1)],
        [gold_tree(g, i) for i, g in enumerate(gold_lines, 1)],
    )
    assert len(theirs) == len(ours.sentences) == len(golds)
    for row, s in zip(theirs, ours.sentences):
        # EVALB: id, length, status (2 = skipped), recall, precision, matched, gold, test, crossing
        assert int(row[2] == "2") == s.skipped and int(row[1]) == s.length
        if not s.skipped:
            assert [int(x) for x in row[5:9]] == [s.matched, s.gold, s.test, s.crossing], row
    summary = out[out.index("=== Summary ===") :].split("-- len<=40 --")
    for block, mine in zip(summary, (ours.all, ours.short)):
        for name, value in (
            ("Bracketing FMeasure", mine.f1),
            ("Complete match", mine.exact_match),
            ("Number of Skip  sentence", mine.skipped),
        ):
            found = re.search(name + r"\s*=\s*([\d.]+)", block)
            assert found is not None, name
            assert float(found.group(1)) == pytest.approx(value, abs=0.006)
