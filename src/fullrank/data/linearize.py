"""Trees as token sequences for sequence-to-sequence parsing (Vinyals et al. 2015, "Grammar as a
Foreign Language"; [V17] §6.3), and back.

The scheme, exactly:

- **source**: the sentence's words, separated by spaces (after :func:`~fullrank.data.treebank.clean`:
  no traces);
- **target**: the tree depth-first, one token per bracket and per word: a constituent labelled
  ``L`` opens with ``(L`` and closes with ``)L``; each preterminal — every part-of-speech tag,
  punctuation tags (``,`` ``.`` ``:`` `````` ``''`` ``-LRB-``…) included — becomes the one
  placeholder ``XX``. The words themselves are not in the target: the ``i``-th ``XX`` stands
  for the ``i``-th word of the source.

``Ms. Haag plays Elianti .`` with the tree ``(S (NP (NNP Ms.) (NNP Haag)) (VP (VBZ plays) (NP
(NNP Elianti))) (. .))`` gives ``(S (NP XX XX )NP (VP XX (NP XX )NP )VP XX )S``.

Vinyals et al. replace every tag by ``XX`` too ("since POS tags are not evaluated in the
syntactic parsing F1 score"); EVALB's punctuation rule reads the tags of the *reference* tree
(:mod:`fullrank.evaluation.parse_eval`), so nothing is lost by not predicting them.

With ``leaves="word"`` each preterminal becomes its word instead of ``XX``: ``(S (NP Ms. Haag
)NP (VP plays (NP Elianti )NP )VP . )S``. The tags are still not predicted; the decoder reads
back the words it has placed, so it knows where in the sentence it is without counting
placeholders. Every token that is not a bracket stands for the next word (:func:`placeholders`
turns such a sequence back into the ``XX`` scheme).

With ``order="in_order"`` a constituent's opening bracket comes after its first child (the
in-order traversal of Liu & Zhang 2017, "In-Order Transition-based Constituent Parsing"):
``Ms. (NP Haag )NP (S plays (VP Elianti (NP )NP )VP . )S`` — the parser names a constituent
once its first child is done, so it need not foresee, at a noun phrase's first word, that the
phrase will be modified. :func:`top_down` turns such a sequence back into the first order.

:func:`delinearize` turns any output sequence into a tree over the input's words, repairing what
is malformed (:data:`REPAIRS` lists each repair and what it does).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from fullrank.data.tokenizers import Tokenizer
from fullrank.data.treebank import Tree, map_up

PLACEHOLDER = "XX"
# what stands for each word in the target: the placeholder XX (Vinyals et al.) or the word itself
Leaves = Literal["placeholder", "word"]
LEAVES: tuple[Leaves, ...] = ("placeholder", "word")
# where a constituent's opening bracket goes: before its first child (Vinyals et al.), or after
# it (the in-order traversal of Liu & Zhang 2017)
Order = Literal["top_down", "in_order"]
ORDERS: tuple[Order, ...] = ("top_down", "in_order")
# the label of a root made by repair (over several top-level pieces, or over nothing): the most
# frequent root label of the Penn Treebank
ROOT_LABEL = "S"

# every repair delinearize may make, and what it does
REPAIRS: dict[str, str] = {
    "unopened": "a closing bracket with nothing open is dropped",
    "mismatched": "a closing bracket closes the innermost open constituent whatever its label",
    "unclosed": "constituents still open at the end are closed there",
    "unknown": "a token that is neither a bracket nor the placeholder (e.g. <unk>) is dropped",
    "empty": "a constituent over no word is dropped",
    "roots": "several top-level pieces (or none) are put under one root labelled S",
    "surplus": "placeholders beyond the number of words are dropped from the end",
    "missing": "missing placeholders are added at the end of the root",
}


def linearize(tree: Tree, leaves: Leaves = "placeholder", order: Order = "top_down") -> list[str]:
    """The target tokens of ``tree`` (see the module docstring), each word written as ``XX`` or
    (``leaves="word"``) as itself, each constituent opened before its first child
    (``order="top_down"``) or after it (``"in_order"``); ``tree`` must be cleaned (no
    unlabelled node)."""
    out: list[str] = []
    _linearize(tree, out, leaves == "word", order == "in_order")
    return out


def _linearize(tree: Tree, out: list[str], words: bool, in_order: bool) -> None:
    stack: list[Tree | str] = [tree]  # a string is a token to write
    while stack:
        node = stack.pop()
        if isinstance(node, str):
            out.append(node)
        elif node.is_preterminal:
            out.append(node.children[0] if words else PLACEHOLDER)  # type: ignore[arg-type]  # the word
        else:
            items: list[Tree | str] = []
            for i, child in enumerate(node.children):
                if i == (1 if in_order else 0):
                    items.append("(" + node.label)
                items.append(child)
            if in_order and len(node.children) == 1:
                items.append("(" + node.label)
            items.append(")" + node.label)
            stack.extend(reversed(items))


def top_down(tokens: Sequence[str]) -> list[str]:
    """An ``in_order`` token sequence in the ``top_down`` order: exactly, for a well-formed one.

    Each ``(L`` makes the finished piece before it (a word, or a closed constituent) the first
    child of a new constituent ``L``; each closing bracket closes the innermost open one over
    the pieces after it. A malformed sequence is carried over as it is, for :func:`delinearize`
    to repair: an opening bracket with no finished piece before it opens an empty constituent,
    a closing bracket with nothing open stays where it is, constituents left open stay open.
    """
    stack: list[tuple[str | None, list[str]]] = []  # (label of an open constituent, or None
    for tok in tokens:  # for a finished piece; its tokens)
        if is_bracket(tok) and tok[0] == "(":
            first = stack.pop()[1] if stack and stack[-1][0] is None else []
            stack.append((tok[1:], first))
        elif is_bracket(tok):
            at = next((i for i in range(len(stack) - 1, -1, -1) if stack[i][0] is not None), None)
            if at is None:
                stack.append((None, [tok]))
                continue
            label, first = stack[at]
            assert label is not None  # stack[at] is an open constituent
            rest = [t for _, piece in stack[at + 1 :] for t in piece]
            del stack[at:]
            stack.append((None, ["(" + label, *first, *rest, tok]))
        else:
            stack.append((None, [tok]))
    return [t for label, piece in stack for t in (piece if label is None else ["(" + label, *piece])]


def is_bracket(token: str) -> bool:
    """Whether ``token`` opens (``(L``) or closes (``)L``) a constituent."""
    return len(token) > 1 and token[0] in "()"


def word_tokens(trees: Tokenizer) -> list[bool]:
    """For each token id of a tree vocabulary, whether it places a word (``XX``, a word,
    ``<unk>``): not a bracket, and not padding, BOS or EOS."""
    skip = {trees.pad_id, trees.bos_id, trees.eos_id}
    return [not is_bracket(trees.id_to_token(i) or "") and i not in skip for i in range(trees.vocab_size)]


def placeholders(tokens: Sequence[str]) -> list[str]:
    """A ``leaves="word"`` target sequence in the ``XX`` scheme: every token that is not a
    bracket (a word, or ``<unk>`` for a word outside the vocabulary) becomes ``XX``."""
    return [t if is_bracket(t) else PLACEHOLDER for t in tokens]


def with_placeholder_tags(tree: Tree) -> Tree:
    """A copy of ``tree`` with every part-of-speech tag replaced by ``XX``: what
    ``delinearize(linearize(tree), tree.leaves())`` gives back."""
    out = map_up(
        tree,
        lambda node, kids: (
            Tree(PLACEHOLDER, list(node.children)) if node.is_preterminal else Tree(node.label, list(kids))
        ),
    )
    assert out is not None
    return out


@dataclass(frozen=True)
class Delinearized:
    """A tree read back from target tokens, and the repairs it needed (keys of
    :data:`REPAIRS`, each once, in the order first needed; empty for a well-formed output)."""

    tree: Tree
    repairs: tuple[str, ...]

    @property
    def repaired(self) -> bool:
        return bool(self.repairs)


def delinearize(tokens: Sequence[str], words: Sequence[str]) -> Delinearized:
    """The tree that target ``tokens`` describe, over ``words`` (tagged ``XX``).

    Always a tree whose leaves are exactly ``words`` (``words`` must not be empty): brackets
    are balanced and placeholders counted as :data:`REPAIRS` says; a well-formed sequence with
    one placeholder per word needs no repair.
    """
    if not words:
        raise ValueError("delinearize needs at least one word")
    repairs: dict[str, None] = {}  # an ordered set
    tops: list[Tree] = []  # finished top-level pieces
    stack: list[Tree] = []  # open constituents, outermost first
    for tok in tokens:
        if tok == PLACEHOLDER:
            (stack[-1].children if stack else tops).append(Tree(PLACEHOLDER, [""]))
        elif is_bracket(tok) and tok[0] == "(":
            node = Tree(tok[1:])
            (stack[-1].children if stack else tops).append(node)
            stack.append(node)
        elif tok[:1] == ")":
            if not stack:
                repairs["unopened"] = None
                continue
            node = stack.pop()
            if tok[1:] != node.label:
                repairs["mismatched"] = None
        else:
            repairs["unknown"] = None
    if stack:
        repairs["unclosed"] = None
    if any(not t.children for top in tops for t in top.subtrees()):
        repairs["empty"] = None
    pieces = [p for p in (_pruned(t) for t in tops) if p is not None]
    if len(pieces) == 1 and not pieces[0].is_preterminal:
        root = pieces[0]
    else:
        root = Tree(ROOT_LABEL, pieces)  # type: ignore[arg-type]  # trees and words
        repairs["roots"] = None
    leaves = root.preterminals()
    if len(leaves) > len(words):
        repairs["surplus"] = None
        root = _drop_last_leaves(root, len(leaves) - len(words))
        leaves = root.preterminals()
    if len(leaves) < len(words):
        repairs["missing"] = None
        root.children.extend(Tree(PLACEHOLDER, [""]) for _ in range(len(words) - len(leaves)))
        leaves = root.preterminals()
    for leaf, word in zip(leaves, words):
        leaf.children[0] = word
    return Delinearized(root, tuple(repairs))


def _pruned(tree: Tree) -> Tree | None:
    """``tree`` without its constituents over no word; ``None`` if it is one."""
    return map_up(
        tree,
        lambda node, kids: node if node.is_preterminal else Tree(node.label, list(kids)) if kids else None,
    )


def _drop_last_leaves(root: Tree, n: int) -> Tree:
    """``root`` without its last ``n`` preterminals and the constituents they leave empty
    (never the root itself: ``n`` is less than its preterminals)."""
    for leaf in root.preterminals()[-n:]:
        leaf.children = []  # now a constituent over no word, which pruning removes
    pruned = _pruned(root)
    assert pruned is not None
    return pruned
