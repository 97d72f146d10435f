"""BPE-dropout: standard BPE at p = 0 (token for token against Hugging Face ``tokenizers``),
text-preserving resegmentation at p > 0, determinism in (seed, epoch), and batching of the
resampled epochs within the token budget."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fullrank.data.bpe_dropout import BPEDropout, _segment
from fullrank.data.tokenizers import Tokenizer
from fullrank.data.translation import ParallelBatches, encode_pairs
from fullrank.errors import ConfigError

SHAKESPEARE = Path(__file__).resolve().parents[2] / "data" / "tinyshakespeare" / "train.txt"


@pytest.fixture(scope="module")
def lines() -> list[str]:
    text = SHAKESPEARE.read_text(encoding="utf-8").splitlines()
    return [t for t in text if t.strip()][:3000]


@pytest.fixture(scope="module", params=[False, True], ids=["cased", "lowercase"])
def tok(request, tmp_path_factory) -> Tokenizer:
    path = tmp_path_factory.mktemp("bpe") / "train.txt"
    path.write_text(SHAKESPEARE.read_text(encoding="utf-8")[:200_000], encoding="utf-8")
    return Tokenizer.train("bpe", [path], vocab_size=600, lowercase=request.param)


def test_p0_is_the_tokenizers_own_segmentation(tok, lines):
    # unseen characters (→ <unk>), umlauts, digits, punctuation runs, empty lines, a literal
    # special token (matched before pre-tokenization)
    extra = ["Zwölf Äpfel — 3,5 kg!", "", "?!...", "say <unk> twice", "  spaced   out  "]
    texts = lines + extra
    bd = BPEDropout(tok, texts, 0.0, variants=1)
    epoch = bd.epoch(0)
    expected = tok.encode_batch(texts)
    assert all(np.array_equal(e, x) for e, x in zip(epoch, expected))
    assert tok.unk_id in epoch[len(lines)]  # "ö", "Ä", "—" are unseen


def test_dropout_resegments_but_keeps_the_text(tok, lines):
    bd = BPEDropout(tok, lines, 0.1, seed=3)
    e1, e2 = bd.epoch(1), bd.epoch(2)
    n_std = sum(len(x) for x in bd.standard)
    n1 = sum(len(x) for x in e1)
    assert n1 > n_std  # smaller pieces, more of them
    assert sum(not np.array_equal(a, b) for a, b in zip(e1, bd.standard)) > len(lines) // 4
    assert any(not np.array_equal(a, b) for a, b in zip(e1, e2))  # a new epoch, new pieces
    for sampled, standard in zip(e1, bd.standard):
        assert tok.decode(sampled) == tok.decode(standard)  # the same text
        assert sampled.dtype == np.int32 and sampled.min() >= 0 and sampled.max() < tok.vocab_size


def test_sampling_is_a_function_of_seed_and_epoch(tok, lines):
    a = BPEDropout(tok, lines[:500], 0.2, seed=7)
    b = BPEDropout(tok, lines[:500], 0.2, seed=7)  # a resumed run rebuilds it
    c = BPEDropout(tok, lines[:500], 0.2, seed=8)
    assert all(np.array_equal(x, y) for x, y in zip(a.epoch(5), b.epoch(5)))
    assert any(not np.array_equal(x, y) for x, y in zip(a.epoch(5), c.epoch(5)))


def test_segment_follows_the_paper():
    ranks = {("a", "b"): 0, ("ab", "c"): 1, ("b", "c"): 2}
    rng = np.random.default_rng(0)
    assert _segment("abc", ranks, 0.0, rng) == ["abc"]  # best rank first: ab, then abc
    assert _segment("xbc", ranks, 0.0, rng) == ["x", "bc"]
    # p → 1: every merge dropped at the first step, so the characters stay
    assert _segment("abc", ranks, 0.999999, rng) == ["a", "b", "c"]
    seen = {tuple(_segment("abc", ranks, 0.5, rng)) for _ in range(200)}
    assert seen == {("abc",), ("a", "bc"), ("a", "b", "c"), ("ab", "c")}


def test_given_standard_encodings_are_used_as_they_are(tok, lines):
    texts = lines[:200]
    given = [np.asarray(ids, dtype=np.int32) for ids in tok.encode_batch(texts)]
    bd = BPEDropout(tok, texts, 0.2, standard=given)
    assert all(np.array_equal(a, b) for a, b in zip(bd.standard, given))
    with pytest.raises(ValueError, match="199 standard encodings for 200 texts"):
        BPEDropout(tok, texts, 0.2, standard=given[:-1])


def test_a_sampled_text_longer_than_max_len_keeps_its_standard_pieces(tok, lines):
    long = [max(lines, key=len)]
    bd = BPEDropout(tok, long, 0.9, max_len=len(tok.encode(long[0])))
    assert np.array_equal(bd.epoch(0)[0], bd.standard[0])


def test_bad_settings_are_config_errors(tok, tmp_path):
    with pytest.raises(ConfigError, match=r"\[0, 1\)"):
        BPEDropout(tok, ["a b"], 1.0)
    path = tmp_path / "c.txt"
    path.write_text("abc\n")
    with pytest.raises(ConfigError, match="needs a bpe tokenizer"):
        BPEDropout(Tokenizer.train("char", [path]), ["abc"], 0.1)


def test_parallel_batches_batch_each_epoch_by_its_own_lengths(tok, lines):
    pairs = list(zip(lines[:600], lines[600:1200]))
    data = encode_pairs(pairs, tok, max_len=200)
    sides = [BPEDropout(tok, [p[j] for p in pairs], 0.3, seed=j) for j in (0, 1)]

    def sampler(epoch):
        return sides[0].epoch(epoch), sides[1].epoch(epoch)

    kw = dict(max_tokens=512, pad_id=tok.pad_id, bos_id=tok.bos_id, eos_id=tok.eos_id, seed=1)
    plain, resampled = ParallelBatches(data, **kw), ParallelBatches(data, **kw, sampler=sampler)
    assert len(resampled) == len(plain)  # counted on the standard ids
    src, tgt = sampler(2)
    assert (
        resampled.n_tokens() == plain.n_tokens(2) == sum(len(x) + len(y) for x, y in zip(data.src, data.tgt))
    )
    assert resampled.n_tokens(2) == sum(len(x) + len(y) for x, y in zip(src, tgt))
    seen = []
    for i in range(resampled.epoch_length(2)):
        b = resampled.get(2, i)
        idx = resampled.indices(2, i)
        assert b.src.numel() <= 512 and b.tgt_in.numel() <= 512  # the budget holds for them
        assert [int(x) for x in b.src[0][: len(src[idx[0]])]] == src[idx[0]].tolist()
        seen.extend(idx.tolist())
    assert sorted(seen) == list(range(len(data)))  # every pair once (world 1)
    assert resampled.epoch_length(2) > plain.epoch_length(2)  # more tokens, more batches
