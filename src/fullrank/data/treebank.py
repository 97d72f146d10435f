"""Penn Treebank trees: read bracketed (``.mrg``) files, clean them as parsing work does, pick
files by pattern.

A file holds trees such as ``( (S (NP-SBJ (NNP Mr.) (NNP Vinken) ) (VP (VBZ is) …) (. .) ))``,
one after another, over as many lines as they like. :func:`read_trees` reads them with a small
reader of its own (no NLTK), and a malformed tree is one :class:`~fullrank.errors.DataError`
naming the file and the line.

:func:`clean` prepares a tree for parsing as the literature does (Collins 1997; Vinyals et al.
2015; the EVALB gold files): traces (``-NONE-``) and the constituents left empty without them
are dropped, function tags and indices are stripped from phrase labels (``NP-SBJ-1`` → ``NP``,
``PP=2`` → ``PP``; part-of-speech tags such as ``-LRB-`` stay as they are), and the unlabelled
outer bracket goes.

:func:`treebank_files` expands a file pattern of the experiment file: a range
``wsj_{0001..0159}.mrg`` (zero-padded as written) and/or glob characters.
"""

from __future__ import annotations

import bisect
import glob
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from fullrank.data.text import read_text
from fullrank.errors import ConfigError, DataError

TRACE = "-NONE-"
# the label given to an unlabelled outer bracket that holds several constituents (EVALB drops it)
TOP = "TOP"
_TOKEN = re.compile(r"\(|\)|[^\s()]+")
_RANGE = re.compile(r"\{(\d+)\.\.(\d+)\}")
# what stands for a bracket inside a word, as the Penn Treebank writes a word "(" or ")"
ESCAPES = {"(": "-LRB-", ")": "-RRB-"}


def escape_word(word: str) -> str:
    """``word`` as a tree writes it: every bracket in it as the treebank writes a bracket word
    (``(`` → ``-LRB-``), so that ``(a)`` becomes ``-LRB-a-RRB-`` and the tree reads back."""
    for bracket, escaped in ESCAPES.items():
        word = word.replace(bracket, escaped)
    return word


@dataclass
class Tree:
    """A constituent: ``label`` over ``children``. A preterminal (part-of-speech tag) has one
    child, its word, a ``str``; every other node has subtrees alone.

    Every walk over a tree keeps its own stack (no recursion), so a tree nested thousands of
    levels deep is read, written, cleaned and scored like any other."""

    label: str
    children: list[Tree | str] = field(default_factory=list)

    @property
    def is_preterminal(self) -> bool:
        return len(self.children) == 1 and isinstance(self.children[0], str)

    def subtrees(self) -> Iterator[Tree]:
        """Every constituent, preterminals included, depth-first from this one (pre-order)."""
        stack = [self]
        while stack:
            node = stack.pop()
            yield node
            stack.extend(c for c in reversed(node.children) if isinstance(c, Tree))

    def postorder(self) -> Iterator[Tree]:
        """Every constituent, each after all of its subtrees, left to right."""
        stack: list[tuple[Tree, bool]] = [(self, False)]
        while stack:
            node, expanded = stack.pop()
            if expanded:
                yield node
                continue
            stack.append((node, True))
            stack.extend((c, False) for c in reversed(node.children) if isinstance(c, Tree))

    def preterminals(self) -> list[Tree]:
        """The ``(tag word)`` nodes, left to right."""
        return [t for t in self.subtrees() if t.is_preterminal]

    def leaves(self) -> list[str]:
        """The words, left to right."""
        return [t.children[0] for t in self.preterminals()]  # type: ignore[misc]  # a preterminal's child is its word

    def to_string(self) -> str:
        """The tree on one line: ``(S (NP (NNP Ms.) (NNP Haag)) (VP (VBZ plays)) (. .))``;
        brackets inside a word are written ``-LRB-``/``-RRB-`` (:func:`escape_word`), so the
        line reads back with :func:`read_tree_line`."""
        parts: list[str] = []
        stack: list[Tree | str] = [self]  # a string is text to write as it is
        while stack:
            item = stack.pop()
            if isinstance(item, str):
                parts.append(item)
                continue
            parts.append("(" + item.label)
            stack.append(")")
            for child in reversed(item.children):
                stack.append(" " + escape_word(child) if isinstance(child, str) else child)
                if isinstance(child, Tree):
                    stack.append(" ")
        return "".join(parts)

    def __str__(self) -> str:
        return self.to_string()


def map_up(tree: Tree, make: Callable[[Tree, list[Tree]], Tree | None]) -> Tree | None:
    """``make(node, kids)`` for every node of ``tree``, children first, where ``kids`` are the
    results for its subtrees that are not ``None``; the result for ``tree``. (Bottom-up without
    recursion, for any depth.)"""
    done: dict[int, Tree | None] = {}
    for node in tree.postorder():
        kids = [done.pop(id(c)) for c in node.children if isinstance(c, Tree)]
        done[id(node)] = make(node, [k for k in kids if k is not None])
    return done[id(tree)]


# ------------------------------------------------------------------------------- reading
def read_trees(text: str, *, source: str = "<text>", first_line: int = 1) -> list[tuple[int, Tree]]:
    """Every tree of ``text``, with the line it starts on (counted from ``first_line``).

    The outer bracket may have no label (``( (S …) )``); every other bracket needs one.
    Raises :class:`DataError` ``"SOURCE line N: …"`` for a malformed tree: a bracket that is
    never closed or closes nothing, a word outside any bracket, a bracket with no label or no
    children, a word beside subtrees, or two words under one tag.
    """
    newlines = [m.start() for m in re.finditer("\n", text)]

    def line_of(pos: int) -> int:
        return first_line + bisect.bisect_left(newlines, pos)

    def fail(pos: int, what: str) -> DataError:
        return DataError(f"{source} line {line_of(pos)}: {what}; fix the tree or leave the file out")

    trees: list[tuple[int, Tree]] = []
    stack: list[tuple[int, Tree, bool]] = []  # (position opened, node, has a label)
    expect_label = False
    for m in _TOKEN.finditer(text):
        tok, pos = m.group(), m.start()
        if tok == "(":
            if stack and stack[-1][1].is_preterminal:
                raise fail(pos, f"the tag '{stack[-1][1].label}' holds a word and a bracket")
            stack.append((pos, Tree(""), False))
            expect_label = True
        elif tok == ")":
            if not stack:
                raise fail(pos, "')' closes no bracket")
            opened, node, labelled = stack.pop()
            expect_label = False
            if not node.children:
                raise fail(
                    pos,
                    f"the bracket '({node.label}' has nothing inside" if labelled else "empty brackets '()'",
                )
            if not labelled and (stack or node.is_preterminal):
                raise fail(
                    opened,
                    f"a bracket with no label holds "
                    f"{node.children[0] if node.is_preterminal else 'subtrees'}"
                    f" (only the outer bracket may go without one)",
                )
            if stack:
                stack[-1][1].children.append(node)
            else:
                trees.append((line_of(opened), node))
        elif not stack:
            raise fail(pos, f"'{tok}' is outside any bracket")
        elif expect_label:
            opened, node, _ = stack[-1]
            node.label = tok
            stack[-1] = (opened, node, True)
            expect_label = False
        else:
            node = stack[-1][1]
            if node.children:
                what = (
                    f"two words under the tag '{node.label}'"
                    if node.is_preterminal
                    else f"the word '{tok}' beside subtrees in '({node.label}'"
                )
                raise fail(pos, what)
            node.children.append(tok)
    if stack:
        raise fail(stack[0][0], "a bracket opened here is never closed")
    return trees


def read_tree_file(path: str | Path) -> list[tuple[int, Tree]]:
    """The trees of one bracketed file with their line numbers (see :func:`read_trees`)."""
    return read_trees(read_text(path), source=str(path))


def read_tree_line(line: str, *, source: str, line_number: int) -> Tree | None:
    """The one tree on a line of a one-tree-per-line file (``None`` for an empty line), its
    unlabelled outer bracket removed as :func:`clean` does; anything else on the line is a
    :class:`DataError`."""
    if not line.strip():
        return None
    found = read_trees(line, source=source, first_line=line_number)
    if len(found) != 1:
        raise DataError(
            f"{source} line {line_number}: {len(found)} trees on one line; write one tree per line"
        )
    return _unwrap(found[0][1])


def read_clean_tree_line(line: str, *, source: str, line_number: int) -> Tree:
    """The one tree on a line, cleaned as :func:`clean` does; a line without a tree, or with
    nothing but traces, is a :class:`DataError`."""
    tree = read_tree_line(line, source=source, line_number=line_number)
    tree = clean(tree) if tree is not None else None
    if tree is None:
        raise DataError(
            f"{source} line {line_number}: no tree; give the sentence's bracketed "
            f"tree, e.g. (S (NP (DT The) (NN dog)) (VP (VBD barked)))"
        )
    return tree


# ------------------------------------------------------------------------------ cleaning
def strip_function_tags(label: str) -> str:
    """``NP-SBJ-1`` → ``NP``, ``PP=2`` → ``PP`` (the label before the first ``-`` or ``=``);
    labels that start with ``-`` (``-NONE-``, ``-LRB-``) stay as they are."""
    if label.startswith("-"):
        return label
    return re.split(r"[-=]", label, maxsplit=1)[0]


def clean(tree: Tree) -> Tree | None:
    """A copy of ``tree`` ready for parsing: no traces, no constituent left empty without them,
    phrase labels without function tags or indices, no unlabelled outer bracket (an outer
    bracket over several constituents is labelled ``TOP``, which EVALB ignores). ``None`` if
    nothing but traces is left."""
    out = map_up(tree, _clean)
    return None if out is None else _unwrap(out)


def _clean(node: Tree, kids: list[Tree]) -> Tree | None:
    if node.is_preterminal:
        return None if node.label == TRACE else Tree(node.label, list(node.children))
    return Tree(strip_function_tags(node.label), list(kids)) if kids else None


def _unwrap(tree: Tree) -> Tree:
    """The tree without an unlabelled outer bracket (``TOP`` if that bracket holds several)."""
    if tree.label:
        return tree
    if len(tree.children) == 1 and isinstance(tree.children[0], Tree):
        return tree.children[0]
    return Tree(TOP, tree.children)


# ------------------------------------------------------------------------------ files
def treebank_files(root: str | Path, pattern: str) -> list[Path]:
    """The files a pattern names under ``root``, sorted.

    ``{A..B}`` is a numeric range written with the padding of ``A`` (``wsj_{0001..0159}.mrg``:
    159 files, each must exist); glob characters (``*``, ``?``, ``[…]``) match what is there.
    """
    full = str(Path(root) / pattern)
    m = _RANGE.search(full)
    if m:
        a, b = m.group(1), m.group(2)
        if int(a) > int(b):
            raise ConfigError(f"'{pattern}': the range {{{a}..{b}}} runs backwards; write {{{b}..{a}}}")
        names = [
            full[: m.start()] + str(i).zfill(len(a)) + full[m.end() :] for i in range(int(a), int(b) + 1)
        ]
    else:
        names = [full]
    files: list[Path] = []
    for name in names:
        if glob.has_magic(name):
            found = sorted(glob.glob(name))
            if not found:
                raise DataError(f"'{pattern}' matches no file under {root}; check data.root and the pattern")
            files.extend(Path(f) for f in found)
        elif Path(name).is_file():
            files.append(Path(name))
        else:
            raise DataError(
                f"{name}: no such treebank file (named by '{pattern}'); check data.root and the pattern"
            )
    return sorted(set(files))


@dataclass(frozen=True)
class TreebankSplit:
    """The cleaned trees of some files, each with the file and line it came from."""

    trees: list[Tree]
    origins: list[tuple[str, int]]
    n_files: int

    def __len__(self) -> int:
        return len(self.trees)

    @property
    def n_words(self) -> int:
        return sum(len(t.leaves()) for t in self.trees)


def load_treebank(root: str | Path, pattern: str) -> TreebankSplit:
    """Read and :func:`clean` every tree of the files of ``pattern`` (a tree of traces alone
    is left out)."""
    files = treebank_files(root, pattern)
    trees: list[Tree] = []
    origins: list[tuple[str, int]] = []
    for path in files:
        for line, tree in read_tree_file(path):
            cleaned = clean(tree)
            if cleaned is not None:
                trees.append(cleaned)
                origins.append((str(path), line))
    if not trees:
        raise DataError(f"'{pattern}' under {root}: {len(files)} file(s) but no tree in them")
    return TreebankSplit(trees, origins, len(files))
