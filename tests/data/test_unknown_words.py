"""Unknown-word signatures: each rule on hand-picked words, and the agreement of the training
map (by frequency) with the map of any later text (by the vocabulary built from it)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from fullrank.data.linearize import linearize
from fullrank.data.tokenizers import Tokenizer
from fullrank.data.treebank import load_treebank
from fullrank.data.unknown_words import SignatureDropout, known_word, rare_to_signatures, signature
from fullrank.errors import ConfigError, DataError

TINY = Path(__file__).parent / "treebank"


@pytest.mark.parametrize(
    "word, sig",
    [
        ("Nissans", "<unk-INITC-s>"),  # capitalised, plural
        ("IBM", "<unk-CAPS>"),  # all capitals
        ("RMS", "<unk-CAPS-s>"),  # the ending is read on the lower-cased word
        ("1,000", "<unk-NUM>"),  # no letter: no case class
        ("2645.90", "<unk-NUM>"),
        ("Interleukin-3", "<unk-INITC-NUM-DASH>"),
        ("profit-taking", "<unk-LC-DASH>"),  # a hyphen: no ending but -s
        ("anti-dumping", "<unk-LC-DASH>"),
        ("fourth-quarters", "<unk-LC-DASH-s>"),
        ("softening", "<unk-LC-ing>"),
        ("warned", "<unk-LC-ed>"),
        ("exploration", "<unk-LC-ion>"),
        ("quickly", "<unk-LC-ly>"),
        ("subdued", "<unk-LC-ed>"),
        ("bus", "<unk-LC>"),  # -us, -ss, -is are not plurals
        ("class", "<unk-LC>"),
        ("analysis", "<unk-LC>"),
        ("ships", "<unk-LC-s>"),
        ("ton", "<unk-LC>"),  # too short for an ending
        ("Army", "<unk-INITC>"),
        ("Hurricane", "<unk-INITC>"),
        ("Spiegel", "<unk-INITC>"),
        ("bushel", "<unk-LC>"),
        ("harvest", "<unk-LC-est>"),
        ("qualified", "<unk-LC-ed>"),
        ("electricity", "<unk-LC-ity>"),
        ("Federal", "<unk-INITC-al>"),
        ("worker", "<unk-LC-er>"),
        ("-", "<unk-DASH>"),
        ("%", "<unk>"),
    ],
)
def test_each_rule(word, sig):
    assert signature(word) == sig


def test_no_treebank_word_looks_like_a_signature():
    words = {w for t in load_treebank(TINY, "*.mrg").trees for w in t.leaves()}
    assert words and not any(w.startswith("<unk") for w in words)
    assert all(signature(w).startswith("<unk") and signature(w).endswith(">") for w in words)


def test_rare_training_words_become_their_signatures():
    rare = rare_to_signatures(["the Nissans ran", "the dog ran ."], min_frequency=2)
    assert [rare(w) for w in "the Nissans ran dog . unseen".split()] == [
        "the",
        "<unk-INITC-s>",
        "ran",
        "<unk-LC>",
        "<unk>",
        "<unk-LC>",
    ]
    keep = rare_to_signatures(["a b"], min_frequency=1)
    assert keep("a") == "a" and keep("c") == "<unk-LC>"


def test_the_vocabulary_maps_words_as_training_did(tmp_path):
    sentences = [" ".join(t.leaves()) for t in load_treebank(TINY, "*.mrg").trees]
    rare = rare_to_signatures(sentences, min_frequency=2)
    text = tmp_path / "train.source"
    text.write_text("".join(" ".join(map(rare, s.split())) + "\n" for s in sentences))
    tok = Tokenizer.train("word", [text], min_frequency=2)
    known = known_word(lambda w: tok.token_to_id(w) is not None)
    assert any(
        tok.token_to_id(rare(w)) is not None and rare(w) != w for s in sentences for w in s.split()
    )  # some signature made it in
    for w in {w for s in sentences for w in s.split()}:
        # the id a word gets later is the id its training form got
        assert tok.encode(known(w)) == tok.encode(rare(w)), w
    assert known("Zyzzyvas") in ("<unk-INITC-s>", "Zyzzyvas")
    assert tok.encode(known("Zyzzyvas")) == tok.encode(signature("Zyzzyvas"))


def dropout_fixture(tmp_path, alpha=0.5):
    trees = load_treebank(TINY, "*.mrg").trees
    sentences = [" ".join(t.leaves()) for t in trees]
    rare = rare_to_signatures(sentences, min_frequency=2)
    sentences = [" ".join(map(rare, s.split())) for s in sentences]
    targets = [" ".join(rare(x) if x[0] not in "()" else x for x in linearize(t, "word")) for t in trees]
    (tmp_path / "src").write_text("\n".join(sentences) + "\n")
    (tmp_path / "tgt").write_text("\n".join(targets) + "\n")
    words = Tokenizer.train("word", [tmp_path / "src"], min_frequency=2)
    tree_tok = Tokenizer.train("word", [tmp_path / "tgt"])
    src = [np.array(words.encode(s)) for s in sentences]
    tgt = [np.array(tree_tok.encode(t)) for t in targets]
    return (
        sentences,
        src,
        tgt,
        words,
        tree_tok,
        SignatureDropout(sentences, src, tgt, words, tree_tok, alpha, seed=3),
    )


def test_word_dropout_puts_signatures_in_both_sides_at_the_same_words(tmp_path):
    sentences, src, tgt, words, trees, drop = dropout_fixture(tmp_path)
    s0, t0 = drop.epoch(0)
    again, other = drop.epoch(0), drop.epoch(1)
    assert all((a == b).all() for a, b in zip(s0, again[0]))  # a function of (seed, epoch)
    assert any((a != b).any() for a, b in zip(s0, other[0]))
    changed = 0
    for sent, s, t, ds, dt in zip(sentences, src, tgt, s0, t0):
        assert len(ds) == len(s) and len(dt) == len(t)
        leaves = [j for j, x in enumerate(t.tolist()) if trees.id_to_token(x)[0] not in "()"]
        for k, w in enumerate(sent.split()):
            if ds[k] != s[k]:
                changed += 1
                assert words.id_to_token(int(ds[k])) in (signature(w), "<unk>")
                assert trees.id_to_token(int(dt[leaves[k]])) in (signature(w), "<unk>")
            else:
                assert dt[leaves[k]] == t[leaves[k]]
        brackets = [j for j in range(len(t)) if j not in leaves]
        assert (dt[brackets] == t[brackets]).all()  # the brackets never change
    assert changed > 0


def test_word_dropout_rate_is_alpha_over_alpha_plus_count(tmp_path):
    sentences, src, *_, drop = dropout_fixture(tmp_path, alpha=0.5)
    counts = Counter(w for s in sentences for w in s.split())
    w, c = next((w, c) for w, c in counts.most_common() if not w.startswith("<unk"))
    where = [(i, k) for i, s in enumerate(sentences) for k, x in enumerate(s.split()) if x == w]
    epochs = 400
    dropped = sum(int(drop.epoch(e)[0][i][k] != src[i][k]) for e in range(epochs) for i, k in where)
    rate, p = dropped / (epochs * len(where)), 0.5 / (0.5 + c)
    assert abs(rate - p) < 4 * (p * (1 - p) / (epochs * len(where))) ** 0.5, (w, c, rate, p)


def test_word_dropout_needs_a_positive_alpha_and_one_id_per_word(tmp_path):
    sentences, src, tgt, words, trees, _ = dropout_fixture(tmp_path)
    with pytest.raises(ConfigError, match="α = 0 must be positive"):
        SignatureDropout(sentences, src, tgt, words, trees, 0)
    with pytest.raises(DataError, match="training sentence 1 has .* words but .* token ids"):
        SignatureDropout(sentences, [s[:-1] for s in src], tgt, words, trees, 0.5)
