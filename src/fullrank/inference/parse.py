"""Parse sentences with an encoder-decoder trained on linearized trees ([V17] §6.3): the words go
in, beam search writes the tree's bracket sequence (:mod:`fullrank.data.linearize`), and each
output is read back into a tree over the input's words, repaired where it is malformed.

A parsing checkpoint carries two vocabularies: its ``tokenizer.json`` holds the words (source),
its ``meta.json`` the tree symbols (target) under :data:`TREE_VOCABULARY`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import torch
from torch import Tensor, nn

from fullrank.data.linearize import (
    LEAVES,
    ORDERS,
    PLACEHOLDER,
    Delinearized,
    Leaves,
    Order,
    delinearize,
    is_bracket,
    linearize,
    placeholders,
    top_down,
    word_tokens,
)
from fullrank.data.tokenizers import Tokenizer
from fullrank.data.treebank import Tree, escape_word
from fullrank.data.unknown_words import known_word
from fullrank.errors import CheckpointError, DataError
from fullrank.inference.decoders import Decoder
from fullrank.inference.translate import translate

# the key of meta.json that holds the tree symbols' tokenizer (JSON of a word-level tokenizer)
TREE_VOCABULARY = "tree_tokenizer"
# the key of meta.json that says what stands for each word in the trees (data.tree_leaves)
TREE_LEAVES = "tree_leaves"
# the key of meta.json that says where the trees open each constituent (data.tree_order)
TREE_ORDER = "tree_order"
# [V17] §6.3: beam size 21, α = 0.3, maximum output length input length + 300
BEAM, ALPHA, MAX_LEN_A, MAX_LEN_B = 21, 0.3, 1.0, 300


def tree_vocabulary(meta: dict[str, Any], where: str) -> Tokenizer:
    """The tree symbols' tokenizer stored in a parsing checkpoint's ``meta`` (``where`` names
    the checkpoint in the error when there is none)."""
    if meta.get("task") != "parse" or TREE_VOCABULARY not in meta:
        raise CheckpointError(
            f"{where}: not a parsing checkpoint (task={meta.get('task')!r}, no "
            f"tree vocabulary); train one with a task: parse experiment, e.g. "
            f"configs/parse/ptb_sample.yaml"
        )
    return Tokenizer.from_str(meta[TREE_VOCABULARY], where=f"{where} ({TREE_VOCABULARY})")


def tree_leaves(meta: dict[str, Any], where: str) -> Leaves:
    """What stands for each word in a parsing checkpoint's trees (``placeholder`` when its
    ``meta`` does not say)."""
    return cast(Leaves, _setting(meta, TREE_LEAVES, LEAVES, where))


def tree_order(meta: dict[str, Any], where: str) -> Order:
    """Where a parsing checkpoint's trees open each constituent (``top_down`` when its
    ``meta`` does not say)."""
    return cast(Order, _setting(meta, TREE_ORDER, ORDERS, where))


def _setting(meta: dict[str, Any], key: str, choices: Sequence[str], where: str) -> str:
    value = meta.get(key, choices[0])
    if value not in choices:
        raise CheckpointError(
            f"{where}: meta.json has {key}={value!r}, not one of "
            f"{', '.join(choices)}; use a checkpoint written by a parsing run"
        )
    return str(value)


def tell_words(model: nn.Module, trees: Tokenizer) -> nn.Module:
    """Tell a parser which of its target tokens place a word (``XX``, the words, ``<unk>``:
    :func:`~fullrank.data.linearize.word_tokens` of the tree vocabulary ``trees``): a model with
    ``decoder_cursor`` counts them to know the next word it places. Other models are left as
    they are. Returns ``model``."""
    if getattr(getattr(model, "config", None), "decoder_cursor", False):
        weight = next(model.parameters())
        model.word_tokens = torch.tensor(word_tokens(trees), dtype=torch.long, device=weight.device)
    return model


def parse(
    model: nn.Module | Sequence[nn.Module],
    words: Tokenizer,
    trees: Tokenizer,
    sentences: Sequence[str],
    *,
    beam: int = BEAM,
    alpha: float = ALPHA,
    a: float = MAX_LEN_A,
    b: int = MAX_LEN_B,
    batch_size: int = 32,
    progress: bool = False,
    workers: int = 1,
    processes: bool = False,
    leaves: Leaves = "placeholder",
    order: Order = "top_down",
    constrained: bool = True,
) -> list[Delinearized | None]:
    """Parse tokenized ``sentences`` (words separated by spaces); ``None`` for an empty one.
    Several models parse as an ensemble (the mean of their next-token probabilities,
    :class:`~fullrank.inference.decoders.EnsembleDecoder`); they share ``words`` and ``trees``.

    Decoding is :func:`~fullrank.inference.translate.translate`'s beam search with the GNMT
    length penalty ``alpha`` and at most ``a·|words| + b`` output tokens (capped by the model's
    ``max_len``); a sentence longer than ``max_len`` is a :class:`~fullrank.errors.DataError`
    naming its line. Each tree's leaves are the sentence's words, tagged ``XX``; a bracket in a
    word is read as the treebank writes it, ``-LRB-`` or ``-RRB-`` (``(a)`` is
    ``-LRB-a-RRB-``). A word the source vocabulary lacks goes in as its signature when the
    vocabulary has that
    (:func:`~fullrank.data.unknown_words.known_word`; ``data.unknown_words: signature``).

    ``leaves``: what the model writes for each word, ``XX`` or the word itself (the
    checkpoint's ``data.tree_leaves``); ``order``: where it opens each constituent (its
    ``data.tree_order``; an ``in_order`` output is read back through
    :func:`~fullrank.data.linearize.top_down`). ``constrained``: the search only writes
    well-formed trees over the sentence's words (:class:`TreeDecoder`,
    :class:`InOrderTreeDecoder`), so no output needs repair;
    ``False``: the model writes freely and :func:`delinearize` repairs what is malformed.
    """
    lines, inputs = source_words(words, sentences)
    if leaves == "word":
        unk = trees.unk_id
        slots = [[trees.token_to_id(w) or unk for w in line.split()] for line in inputs]
    else:
        xx = trees.token_to_id(PLACEHOLDER)
        if xx is None:
            raise CheckpointError(
                f"the tree vocabulary has no {PLACEHOLDER}; these trees have "
                f"the words as leaves (leaves='word')"
            )
        slots = [[xx] * len(line.split()) for line in lines]

    models = [model] if isinstance(model, nn.Module) else list(model)
    for m in models:
        tell_words(m, trees)

    def constrain(decoder: Decoder, batch: Sequence[int], max_len: Tensor) -> Decoder:
        kind = InOrderTreeDecoder if order == "in_order" else TreeDecoder
        return kind(decoder, trees, [slots[i] for i in batch], max_len)

    outputs = translate(
        models,
        words,
        inputs,
        beam=beam,
        alpha=alpha,
        a=a,
        b=b,
        batch_size=batch_size,
        progress="parse" if progress else False,
        workers=workers,
        processes=processes,
        target=trees,
        strict=True,
        constrain=constrain if constrained else None,
    )

    def tree(tokens: list[str], words: list[str]) -> Delinearized:
        tokens = top_down(tokens) if order == "in_order" else tokens
        return delinearize(placeholders(tokens) if leaves == "word" else tokens, words)

    return [tree(out[0].split(), line.split()) if line else None for line, out in zip(lines, outputs)]


def source_words(words: Tokenizer, sentences: Sequence[str]) -> tuple[list[str], list[str]]:
    """Each tokenized sentence with its words as the treebank writes them (``(`` is ``-LRB-``,
    ``)`` is ``-RRB-``, inside a word too), and as the parser reads it: each word the
    vocabulary ``words`` lacks as its signature where the vocabulary has that."""
    lines = [" ".join(map(escape_word, s.split())) for s in sentences]
    known = known_word(lambda w: words.token_to_id(w) is not None)
    return lines, [" ".join(map(known, line.split())) for line in lines]


def teacher_forced(
    words: Tokenizer,
    sentences: Sequence[str],
    trees: Sequence[Tree],
    *,
    leaves: Leaves,
    order: Order,
    where: Sequence[str],
) -> list[tuple[str, str]]:
    """``(source, target)`` text of each sentence and its tree as a parser reads and writes
    them in training (its ``data.tree_leaves`` and ``data.tree_order``), to run the model on
    a given tree. A tree whose words are not the sentence's is a :class:`DataError` naming
    the tree's ``where`` (e.g. its file and line)."""
    lines, inputs = source_words(words, sentences)
    pairs = []
    for line, source, tree, place in zip(lines, inputs, trees, where, strict=True):
        if tree.leaves() != line.split():
            raise DataError(
                f"{place}: the tree's words ({' '.join(tree.leaves())}) "
                f"are not the sentence's ({line}); give the tree of that sentence"
            )
        known = dict(zip(line.split(), source.split()))
        target = [t if is_bracket(t) else known.get(t, t) for t in linearize(tree, leaves, order)]
        pairs.append((source, " ".join(target)))
    return pairs


class TreeDecoder:
    """A decoder that can only write well-formed trees over the sentence's words.

    Wraps a decoder over linearized trees (:mod:`fullrank.data.linearize`) and sets to −∞ the
    logits of every token that would break the tree, so that a search (greedy or beam) only
    ever finishes an output that :func:`delinearize` reads back without repair:

    - the first token opens the root; after the root closes, only end-of-sequence;
    - the next word's token (``XX``, or the word itself: ``slots``) only inside a constituent
      and while fewer than the sentence's ``n`` words are placed; an opening bracket only while
      a word is left to go in it, at most ``max_depth`` open and ``max_opens`` opened in a row,
      and while the output can still be closed within its length limit;
    - a closing bracket only for the innermost open constituent, with its label, once that
      constituent holds a word, and the root's only once all ``n`` words are placed;
    - end-of-sequence only after the root closed over all ``n`` words; ``<unk>``, padding and
      beginning-of-sequence never.

    Which bracket closes and which word comes next are not the model's to choose: all closing
    brackets are one decision, "close the innermost constituent", and all word tokens one,
    "place the next word". Each gets the model's whole probability of that kind of token (the
    log-sum-exp of their logits, given to the one allowed token), so a model that closes with
    the wrong label, or writes a word other than the next, still scores the tree it meant. The
    search's log-softmax then renormalises each step over the allowed tokens.

    Args:
        decoder: the decoder to wrap (rows: sentences, or sentences × beams).
        trees: the tree symbols' tokenizer (the model's target side).
        slots: for each row, the token that places each word of its sentence in turn (``XX``
            for each, or each word's id in ``trees``, ``<unk>`` for one it lacks).
        max_len: ``(B,)`` most tokens each row may generate, end-of-sequence included.
        max_depth: most constituents open at once (the deepest tree of the Penn Treebank
            sample has 28).
        max_opens: most brackets opened in a row, with no word or closing bracket between (the
            sample's most is 6). Without this bound a model that has lost its place, offered
            nothing it likes, opens brackets without end.
    """

    def __init__(
        self,
        decoder: Decoder,
        trees: Tokenizer,
        slots: Sequence[Sequence[int]],
        max_len: Tensor,
        *,
        max_depth: int = 64,
        max_opens: int = 8,
    ) -> None:
        self.decoder, self.device = decoder, decoder.device
        self.eos_id = trees.eos_id
        tokens = [trees.id_to_token(i) or "" for i in range(trees.vocab_size)]
        closer = [trees.token_to_id(")" + t[1:]) if is_bracket(t) and t[0] == "(" else None for t in tokens]
        dev = self.device
        # (V,) for "(L" the id of ")L" (−1: another token, or an opening nobody closes)
        self.closer = torch.tensor([-1 if c is None else c for c in closer], device=dev)
        self.is_open = torch.tensor([is_bracket(t) and t[0] == "(" for t in tokens], device=dev)
        self.is_close = torch.tensor([is_bracket(t) and t[0] == ")" for t in tokens], device=dev)
        is_word = torch.tensor(word_tokens(trees), device=dev)  # (V,) XX, words, <unk>
        self.open_ids = self.is_open.nonzero().squeeze(1)  # token ids of each kind
        self.close_ids = self.is_close.nonzero().squeeze(1)
        self.word_ids = is_word.nonzero().squeeze(1)
        b, width = len(slots), max(map(len, slots), default=0) + 1
        self.slots = torch.full((b, width), -1, dtype=torch.long, device=dev)  # (B, n + 1)
        for r, ids in enumerate(slots):
            self.slots[r, : len(ids)] = torch.tensor(ids, dtype=torch.long)
        self.n_words = torch.tensor([len(ids) for ids in slots], device=dev)  # (B,)
        self.limit = max_len.to(dev)  # (B,)
        self.placed = torch.zeros(b, dtype=torch.long, device=dev)  # (B,) words placed
        self.depth = torch.zeros(b, dtype=torch.long, device=dev)  # (B,) constituents open
        self.opens = torch.zeros(b, dtype=torch.long, device=dev)  # (B,) opened in a row
        self.max_opens = max_opens
        # (B, D) the token that closes each open constituent, innermost at depth − 1
        self.stack = torch.full((b, max_depth), -1, dtype=torch.long, device=dev)
        self.filled = torch.zeros(b, max_depth, dtype=torch.bool, device=dev)  # (B, D) has a word
        self.written = -1  # tokens written (BOS: −1)

    def _next_slot(self) -> Tensor:
        """``(B,)``: the token that places each row's next word (−1 once all are placed)."""
        return self.slots.gather(1, self.placed[:, None]).squeeze(1)

    def _advance(self, tok: Tensor) -> None:
        """Update the rows' trees with their newest token ``tok (B,)``."""
        rows = torch.arange(len(tok), device=tok.device)
        word = (tok == self._next_slot()) & (self.depth > 0)
        vocab = len(self.is_open)
        known = tok < vocab
        tok = tok.clamp(max=vocab - 1)
        opened = known & self.is_open[tok]
        closed = known & self.is_close[tok] & (self.depth > 0)
        top = (self.depth - 1).clamp(min=0)
        self.filled[rows, top] |= word
        self.placed += word.long()
        depth_cap = self.stack.shape[1] - 1
        at = self.depth.clamp(max=depth_cap)
        self.stack[rows, at] = torch.where(opened, self.closer[tok], self.stack[rows, at])
        self.filled[rows, at] &= ~opened
        self.depth += opened.long() - closed.long()
        self.opens = torch.where(opened, self.opens + 1, torch.zeros_like(self.opens))
        parent = (self.depth - 1).clamp(min=0)
        self.filled[rows, parent] |= closed & (self.depth > 0)

    def _choices(self) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """Per row ``(B,)``, whether it may open a bracket, close its innermost constituent,
        place its next word, end: the moves that keep its tree well-formed and finishable."""
        rows = torch.arange(len(self.depth), device=self.device)
        top = (self.depth - 1).clamp(min=0)
        inside = self.depth > 0
        started = self.written > 0  # the first token opens the root
        left = self.placed < self.n_words  # (B,) words still to place
        # tokens still needed after an opening bracket: its close, the rest of the words, the
        # closes of what is open, end-of-sequence
        room = self.written + 3 + (self.n_words - self.placed) + self.depth <= self.limit
        can_open = (
            room
            & (self.depth < self.stack.shape[1])
            & (self.opens < self.max_opens)
            & (len(self.open_ids) > 0)
        )
        if started:  # after the root, only inside it and while a word is left for the new one
            can_open &= inside & left
        can_close = inside & self.filled[rows, top] & ((self.depth > 1) | ~left)
        can_close &= self.stack[rows, top] >= 0
        can_place = inside & left
        can_end = ~inside & ~left & started  # (B,)
        can_end |= ~(can_open | can_close | can_place)  # never: a guard, so no row is left empty
        return can_open, can_close, can_place, can_end

    def step(self, tokens: Tensor) -> Tensor:
        """``tokens (B, 1)`` → the wrapped decoder's logits ``(B, 1, V)``: −∞ where a token
        would break the tree; the one closing bracket and the one word allowed carry the
        log-sum-exp of all closing brackets' and all words' logits."""
        if self.written >= 0:
            self._advance(tokens[:, -1])
        self.written += tokens.shape[1]
        logits = self.decoder.step(tokens)  # (B, 1, V)
        last = logits[:, -1]  # (B, V)
        can_open, can_close, can_place, can_end = self._choices()  # (B,) each
        rows = torch.arange(len(last), device=last.device)
        close = self.stack[rows, (self.depth - 1).clamp(min=0)].clamp(min=0)
        word = self._next_slot().clamp(min=0)  # (B,)
        opening = last[:, self.open_ids]  # (B, O) copies
        closing = torch.logsumexp(last[:, self.close_ids], dim=1)  # (B,)
        placing = torch.logsumexp(last[:, self.word_ids], dim=1)  # (B,)
        ending = last[:, self.eos_id].clone()  # (B,)
        neg = float("-inf")
        last.fill_(neg)
        last[:, self.open_ids] = opening.masked_fill_(~can_open[:, None], neg)
        last[rows, close] = torch.where(can_close, closing, neg)
        last[rows, word] = torch.where(can_place, placing, neg)
        last[:, self.eos_id] = torch.where(can_end, ending, neg)
        return logits

    # the state each row keeps, which reorders follow
    ROW_STATE: tuple[str, ...] = ("slots", "n_words", "limit", "placed", "depth", "opens", "stack", "filled")

    def reorder(self, index: Tensor, *, sources: Tensor | None = None) -> None:
        """Keep rows ``index`` (see :meth:`Decoder.reorder`)."""
        self.decoder.reorder(index, sources=sources)
        for name in self.ROW_STATE:
            setattr(self, name, getattr(self, name)[index])


class InOrderTreeDecoder(TreeDecoder):
    """:class:`TreeDecoder` for trees written in order (``data.tree_order: in_order``): each
    constituent's opening bracket comes after its first child
    (:func:`~fullrank.data.linearize.linearize`).

    The moves that keep the output a well-formed tree over the sentence's ``n`` words:

    - the first token places the first word; a word, later, only inside an open constituent
      (outside, the one finished piece must first become the first child of a new one) and
      while words are left;
    - an opening bracket only right after a finished piece (a word or a closed constituent),
      which becomes its first child, and while the output can still be closed within its
      length limit;
    - a closing bracket for the innermost open constituent (it holds its first child already),
      the outermost one while words are left only if the output can still be finished;
    - end-of-sequence once all ``n`` words are placed, nothing is open and the one finished
      piece is a constituent.

    A closing bracket right after its opening one makes a unary constituent; at most
    ``max_opens`` of these in a row (no word or other closing bracket between), so that a model
    that only wants to close cannot stack unary constituents without end. Closing brackets and
    word tokens are merged into one decision each, as in :class:`TreeDecoder`; the arguments
    are the same.
    """

    ROW_STATE = (*TreeDecoder.ROW_STATE, "finished", "rooted", "unary")

    def __init__(
        self, decoder: Decoder, trees: Tokenizer, slots: Sequence[Sequence[int]], max_len: Tensor, **kw: Any
    ) -> None:
        super().__init__(decoder, trees, slots, max_len, **kw)
        b = len(self.n_words)
        # (B,) the last piece is finished (a word or a closed constituent): it may be projected
        self.finished = torch.zeros(b, dtype=torch.bool, device=self.device)
        # (B,) the root level holds one closed constituent (not a bare word, nothing open)
        self.rooted = torch.zeros(b, dtype=torch.bool, device=self.device)
        # (B,) unary constituents made in a row (at most max_opens)
        self.unary = torch.zeros(b, dtype=torch.long, device=self.device)

    def _advance(self, tok: Tensor) -> None:
        """Update the rows' trees with their newest token ``tok (B,)``."""
        rows = torch.arange(len(tok), device=tok.device)
        vocab = len(self.is_open)
        known = tok < vocab
        tok = tok.clamp(max=vocab - 1)
        word = (tok == self._next_slot()) & ((self.depth > 0) | (self.written == 0))
        opened = known & self.is_open[tok] & self.finished
        closed = known & self.is_close[tok] & (self.depth > 0)
        unary = closed & ~self.finished
        self.placed += word.long()
        at = self.depth.clamp(max=self.stack.shape[1] - 1)
        self.stack[rows, at] = torch.where(opened, self.closer[tok], self.stack[rows, at])
        self.depth += opened.long() - closed.long()
        self.finished = torch.where(word | closed, True, self.finished & ~opened)
        self.rooted = torch.where(closed & (self.depth == 0), True, self.rooted & ~(word | opened))
        self.unary = torch.where(unary, self.unary + 1, torch.where(word | closed, 0, self.unary))

    def _choices(self) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """Per row ``(B,)``, whether it may open a bracket, close its innermost constituent,
        place its next word, end."""
        rows = torch.arange(len(self.depth), device=self.device)
        inside = self.depth > 0
        left = self.placed < self.n_words
        first = self.written == 0  # only BOS so far
        room = self.written + 3 + (self.n_words - self.placed) + self.depth <= self.limit
        unary_ok = self.unary < self.max_opens
        # after all words, an opening bracket can only be closed at once: a unary constituent
        can_open = (
            self.finished
            & room
            & (self.depth < self.stack.shape[1])
            & (left | unary_ok)
            & (len(self.open_ids) > 0)
        )
        # closing the outermost while words are left: the root level must then be opened again
        can_close = (
            inside
            & (self.stack[rows, (self.depth - 1).clamp(min=0)] >= 0)
            & (self.finished | unary_ok)
            & ((self.depth > 1) | ~left | room)
        )
        can_place = left & (inside | first)
        can_end = ~inside & ~left & self.rooted
        can_end |= ~(can_open | can_close | can_place)  # never: a guard, so no row is left empty
        return can_open, can_close, can_place, can_end
