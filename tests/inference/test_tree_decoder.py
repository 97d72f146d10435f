"""Constrained parsing search (:class:`TreeDecoder`): whatever the model prefers, greedy and beam
search finish only well-formed trees over the sentence's words, in both target schemes; a model
that already prefers a well-formed tree gets it unchanged."""

from __future__ import annotations

import random

import pytest
import torch

from fullrank.data.linearize import PLACEHOLDER, delinearize, is_bracket, linearize, placeholders, top_down
from fullrank.data.tokenizers import Tokenizer
from fullrank.data.treebank import read_tree_line
from fullrank.inference import beam_search, greedy_search
from fullrank.inference.parse import InOrderTreeDecoder, TreeDecoder
from tests.inference.toy import ScriptedDecoder

SYMBOLS = "(S )S (NP )NP (VP )VP (PP )PP XX the dog sees a cat".split()


@pytest.fixture(scope="module")
def trees(tmp_path_factory) -> Tokenizer:
    f = tmp_path_factory.mktemp("vocab") / "trees.txt"
    f.write_text(" ".join(SYMBOLS) + "\n")
    return Tokenizer.train("word", [f])


def slots(trees: Tokenizer, words: list[str], leaves: str) -> list[int]:
    if leaves == "placeholder":
        return [trees.token_to_id(PLACEHOLDER) or trees.unk_id] * len(words)
    return [trees.token_to_id(w) or trees.unk_id for w in words]


def search(decoder, trees: Tokenizer, n: int, beam: int, max_len) -> list[list[int]]:
    if beam == 1:
        return greedy_search(decoder, batch_size=n, bos_id=trees.bos_id, eos_id=trees.eos_id, max_len=max_len)
    hyps = beam_search(
        decoder,
        batch_size=n,
        beam_size=beam,
        bos_id=trees.bos_id,
        eos_id=trees.eos_id,
        max_len=max_len,
        alpha=0.3,
    )
    return [h[0].tokens for h in hyps]


def noisy(vocab: int, favour: dict[int, float]):
    """Next-token probabilities drawn at random for each prefix (the same for the same prefix),
    with the tokens of ``favour`` weighted up: a model that does not know what a tree is."""

    def probs(prefix: tuple[int, ...]) -> list[float]:
        rng = random.Random(hash(prefix))
        p = [rng.random() * favour.get(i, 1.0) for i in range(vocab)]
        return [x / sum(p) for x in p]

    return probs


@pytest.mark.parametrize("order", ["top_down", "in_order"])
@pytest.mark.parametrize("leaves", ["placeholder", "word"])
@pytest.mark.parametrize("beam", [1, 4])
@pytest.mark.parametrize("tempt", ["eos", "open", "close"])
def test_any_model_writes_only_well_formed_trees_over_the_words(trees, leaves, beam, tempt, order):
    rng = random.Random(len(leaves) + beam)
    sentences = [
        [rng.choice(["the", "dog", "sees", "a", "cat", "zebra"]) for _ in range(rng.randint(1, 7))]
        for _ in range(12)
    ]
    vocab = trees.vocab_size
    ids = {
        "eos": [trees.eos_id],
        "open": [trees.token_to_id("(NP"), trees.token_to_id("(PP")],
        "close": [trees.token_to_id(")VP"), trees.token_to_id(")S")],
    }[tempt]
    decoder = ScriptedDecoder(noisy(vocab, {i: 50.0 for i in ids}), len(sentences))
    limits = torch.tensor([len(s) + 30 for s in sentences])
    kind = InOrderTreeDecoder if order == "in_order" else TreeDecoder
    wrapped = kind(decoder, trees, [slots(trees, s, leaves) for s in sentences], limits)
    for words, out in zip(sentences, search(wrapped, trees, len(sentences), beam, limits)):
        written = [trees.id_to_token(i) for i in out]
        tokens = top_down(written) if order == "in_order" else written
        assert len(tokens) == len(written)
        parsed = delinearize(placeholders(tokens) if leaves == "word" else tokens, words)
        assert parsed.repairs == (), tokens
        assert parsed.tree.leaves() == words
        placed = [t for t in tokens if not is_bracket(t)]
        want = slots(trees, words, leaves)
        assert [trees.token_to_id(t) for t in placed] == want  # each word's own token, in order


@pytest.mark.parametrize("beam", [1, 5])
def test_a_model_that_prefers_a_well_formed_tree_gets_it_unchanged(trees, beam):
    gold = "(S (NP XX XX )NP (VP XX (NP XX XX )NP )VP )S".split()
    target = [trees.token_to_id(t) for t in gold] + [trees.eos_id]

    def probs(prefix):
        p = [0.1 / (trees.vocab_size - 1)] * trees.vocab_size
        p[target[min(len(prefix), len(target) - 1)]] = 0.9
        return p

    wrapped = TreeDecoder(
        ScriptedDecoder(probs, 1), trees, [[trees.token_to_id("XX")] * 5], torch.tensor([40])
    )
    (out,) = search(wrapped, trees, 1, beam, 40)
    assert [trees.id_to_token(i) for i in out] == gold


def test_end_of_sequence_waits_for_every_word_and_the_length_limit_is_kept(trees):
    # a model that always wants to stop, or to open one more bracket, with room for one
    # constituent only: the root over the 4 words, its close and EOS (4 + 3 tokens)
    xx = trees.token_to_id("XX")
    for want in (trees.eos_id, trees.token_to_id("(NP")):
        probs = noisy(trees.vocab_size, {want: 1e4})
        wrapped = TreeDecoder(ScriptedDecoder(probs, 1), trees, [[xx] * 4], torch.tensor([7]))
        (out,) = search(wrapped, trees, 1, 3, 7)
        tokens = [trees.id_to_token(i) for i in out]
        assert tokens[1:5] == ["XX"] * 4 and len(tokens) == 6 and tokens[0][1:] == tokens[5][1:]
        assert not delinearize(tokens, list("abcd")).repaired


def test_model_vocabulary_padding_is_never_written(trees):
    # a model whose output layer is wider than the tree vocabulary (padded rows) and likes them
    wide = trees.vocab_size + 3

    def probs(prefix):
        return [1.0 if i >= trees.vocab_size else 1e-3 for i in range(wide)]

    xx = trees.token_to_id("XX")
    wrapped = TreeDecoder(ScriptedDecoder(probs, 2), trees, [[xx] * 2, [xx] * 3], torch.tensor([20, 20]))
    for out, n in zip(search(wrapped, trees, 2, 4, 20), (2, 3)):
        assert max(out) < trees.vocab_size
        assert not delinearize([trees.id_to_token(i) for i in out], ["w"] * n).repaired


def test_a_model_that_only_wants_to_open_brackets_is_held_to_the_bounds(trees):
    probs = noisy(trees.vocab_size, {trees.token_to_id("(NP"): 1e6, trees.token_to_id("(PP"): 1e6})
    xx = trees.token_to_id("XX")
    wrapped = TreeDecoder(
        ScriptedDecoder(probs, 1), trees, [[xx] * 6], torch.tensor([200]), max_depth=5, max_opens=3
    )
    (out,) = search(wrapped, trees, 1, 4, 200)
    tokens = [trees.id_to_token(i) for i in out]
    run = depth = most_run = most_depth = 0
    for t in tokens:
        run = run + 1 if t[0] == "(" else 0
        depth += {"(": 1, ")": -1}.get(t[0], 0)
        most_run, most_depth = max(most_run, run), max(most_depth, depth)
    assert most_run == 3 and most_depth == 5
    assert not delinearize(tokens, list("abcdef")).repaired


@pytest.mark.parametrize("beam", [1, 5])
def test_a_model_unsure_of_labels_and_words_still_gets_the_tree_it_means(trees, beam):
    # it closes every constituent with ")PP" and writes "cat" for every word: the closes and
    # words it means are read as "close the innermost" and "place the next word"
    words = "the dog sees a cat".split()
    gold = "(S (NP the dog )NP (VP sees (NP a cat )NP )VP )S".split()
    meant = [t if t[0] == "(" else ")PP" if t[0] == ")" else "cat" for t in gold] + ["</s>"]
    target = [trees.token_to_id(t) if t != "</s>" else trees.eos_id for t in meant]

    def probs(prefix):
        p = [0.1 / (trees.vocab_size - 1)] * trees.vocab_size
        p[target[min(len(prefix), len(target) - 1)]] = 0.9
        return p

    wrapped = TreeDecoder(ScriptedDecoder(probs, 1), trees, [slots(trees, words, "word")], torch.tensor([40]))
    (out,) = search(wrapped, trees, 1, beam, 40)
    assert [trees.id_to_token(i) for i in out] == gold


@pytest.mark.parametrize("order", ["top_down", "in_order"])
@pytest.mark.parametrize("leaves", ["placeholder", "word"])
@torch.inference_mode()
def test_a_cursor_model_decodes_the_same_cached_uncached_and_in_the_beam_layout(trees, leaves, order):
    """A model told its next word counts the word tokens of each row in its cache; beam
    search reorders the rows at every step, and the count must follow: the constrained search
    over the plain cache, the engine's beam cache and no cache finds the same trees."""
    from fullrank import fast
    from fullrank.inference import Seq2SeqDecoder, UncachedSeq2SeqDecoder
    from fullrank.inference.parse import tell_words
    from fullrank.models import EncoderDecoder
    from tests.inference.toy import padded_sources, translation_model

    torch.manual_seed(1)
    model = tell_words(translation_model(trees.vocab_size, decoder_cursor=True), trees)
    assert isinstance(model, EncoderDecoder)
    sentences = [["the", "dog", "sees", "a", "cat"], ["dog"], ["a", "zebra", "sees"]]
    src, keep = padded_sources([len(s) + 1 for s in sentences], 9)
    limits = torch.tensor([len(s) + 12 for s in sentences])
    kind = InOrderTreeDecoder if order == "in_order" else TreeDecoder
    outs = []
    for decoder in (
        Seq2SeqDecoder(model, src, keep),
        UncachedSeq2SeqDecoder(model, src, keep),
        fast.BeamDecoder(model, src, keep),
    ):
        wrapped = kind(decoder, trees, [slots(trees, s, leaves) for s in sentences], limits)
        outs.append(search(wrapped, trees, len(sentences), 4, limits))
    assert outs[0] == outs[1] == outs[2]
    words = {trees.token_to_id(w) for w in SYMBOLS if not is_bracket(w)} | {trees.unk_id}
    assert [sum(i in words for i in out) for out in outs[0]] == [5, 1, 3]


@pytest.mark.parametrize("beam", [1, 5])
def test_a_model_that_prefers_a_well_formed_in_order_tree_gets_it_unchanged(trees, beam):
    gold = read_tree_line(
        "(S (NP (NP (DT the) (NN dog)) (PP (IN a) (NP (NN cat)))) (VP (VBZ sees)))",
        source="gold",
        line_number=1,
    )
    assert gold is not None
    written = linearize(gold, "word", "in_order")
    assert written[:3] == ["the", "(NP", "dog"]  # the outer NP is named after the inner one
    target = [trees.token_to_id(t) for t in written] + [trees.eos_id]

    def probs(prefix):
        p = [0.1 / (trees.vocab_size - 1)] * trees.vocab_size
        p[target[min(len(prefix), len(target) - 1)]] = 0.9
        return p

    wrapped = InOrderTreeDecoder(
        ScriptedDecoder(probs, 1), trees, [slots(trees, gold.leaves(), "word")], torch.tensor([40])
    )
    (out,) = search(wrapped, trees, 1, beam, 40)
    assert [trees.id_to_token(i) for i in out] == written
