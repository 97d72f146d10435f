"""BERT pre-training data: documents and sentences, NSP pairs, masking statistics, determinism."""

from __future__ import annotations

import numpy as np
import pytest

from fullrank.data.bert_pretraining import MaskingRule, PretrainingBatches, make_instances, n_predictions
from fullrank.data.document_cache import TokenizedCorpus
from fullrank.data.documents import read_documents, split_sentences
from fullrank.errors import ConfigError, DataError

CLS, SEP, PAD, MASK = 2, 3, 0, 4
V = 1000


def corpus(n_docs: int = 7, sentences: int = 9, seed: int = 0) -> TokenizedCorpus:
    """Documents whose tokens tell where they come from: document d uses ids 100·(d+1)…"""
    rng = np.random.default_rng(seed)
    ids, sent, docs = [], [0], [0]
    for d in range(n_docs):
        for _ in range(sentences):
            n = int(rng.integers(3, 19))
            ids.append(100 * (d + 1) + rng.integers(0, 100, n))
            sent.append(sent[-1] + n)
        docs.append(docs[-1] + sentences)
    return TokenizedCorpus(np.concatenate(ids).astype(np.int32), np.asarray(sent), np.asarray(docs))


def rule(**kw) -> MaskingRule:
    return MaskingRule(mask_id=MASK, regular_ids=np.arange(5, V), **kw)


def batches(instances, masking="dynamic", batch_size=6, **kw) -> PretrainingBatches:
    return PretrainingBatches(
        instances,
        rule(**kw),
        cls_id=CLS,
        sep_id=SEP,
        pad_id=PAD,
        batch_size=batch_size,
        seed=5,
        masking=masking,
    )


def test_sentences_and_documents(tmp_path):
    assert split_sentences("It rained . Then it stopped ! Why ? ok") == [
        "It rained .",
        "Then it stopped !",
        "Why ?",
        "ok",
    ]
    wiki = tmp_path / "w.txt"
    wiki.write_text(
        " \n = First = \n \n A 1 @,@ 000 b . C <unk> d .\n = = Part = = \n E f .\n"
        " = Second = \n G h . I j .\n"
    )
    assert read_documents(wiki, "wikitext") == [["A 1,000 b .", "C [UNK] d .", "E f ."], ["G h .", "I j ."]]
    blocks = tmp_path / "b.txt"
    blocks.write_text("one. two.\nthree.\n\n\nfour. five.\n")
    assert read_documents(blocks, "blocks") == [["one.", "two.", "three."], ["four.", "five."]]


def test_a_corpus_without_document_boundaries_is_one_line_error(tmp_path):
    wiki = tmp_path / "w.txt"
    wiki.write_text(" A b . C d .\n E f .\n")
    with pytest.raises(DataError, match="no document boundary") as e:
        read_documents(wiki, "wikitext")
    assert "\n" not in str(e.value)
    with pytest.raises(DataError, match="no document boundary.*blank line"):
        read_documents(wiki, "blocks")


def test_a_one_sentence_document_is_an_error_or_skipped():
    import tokenizers

    from fullrank.data.document_cache import tokenize_documents
    from fullrank.data.tokenizers import Tokenizer

    hf = tokenizers.Tokenizer(
        tokenizers.models.WordPiece(
            {t: i for i, t in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "b", "."])},
            unk_token="[UNK]",
        )
    )
    hf.pre_tokenizer = tokenizers.pre_tokenizers.BertPreTokenizer()
    tok = Tokenizer(hf, "wordpiece")
    docs = [["a b .", "b a ."], ["a ."], ["b b .", "a a ."]]
    with pytest.raises(
        DataError,
        match=r"document 2 .* one sentence, too short to make a "
        r"sentence pair.*short_documents=skip",
    ):
        tokenize_documents(docs, tok)
    kept = tokenize_documents(docs, tok, skip_short=True)
    assert kept.n_docs == 2 and kept.skipped == 1


def test_pairs_fit_and_random_next_segments_come_from_other_documents():
    c = corpus(n_docs=9, sentences=30)
    instances = make_instances(c, max_seq_len=40, seed=1)
    assert len(instances) > 80

    def doc_of(t):
        return int(t) // 100

    for inst in instances:
        assert len(inst.a) >= 1 and len(inst.b) >= 1 and len(inst.a) + len(inst.b) + 3 <= 40
        a_doc = {doc_of(t) for t in inst.a}
        b_doc = {doc_of(t) for t in inst.b}
        assert len(a_doc) == 1 and len(b_doc) == 1
        assert (a_doc != b_doc) == inst.random_next
    share = np.mean([i.random_next for i in instances])
    assert 0.4 < share < 0.75  # ½, plus the one-sentence chunks that must take a random B
    assert [i.a.tolist() for i in make_instances(c, max_seq_len=40, seed=1)] == [
        i.a.tolist() for i in instances
    ]


def test_masking_statistics_over_many_draws():
    instances = make_instances(corpus(n_docs=9, sentences=20), max_seq_len=64, seed=0)
    data = batches(instances)
    chosen = masked = random = kept = 0
    for epoch in range(12):
        for i in range(len(instances)):
            tokens, segments, positions, labels = data.masked(i, epoch)
            original, _, candidates = data._sequence(i)
            assert set(positions) <= set(candidates)  # never [CLS], [SEP] (no padding here)
            assert len(positions) == min(n_predictions(len(original), 0.15, 20), len(candidates))
            assert (labels == original[positions]).all()
            assert (
                tokens[np.setdiff1d(np.arange(len(tokens)), positions)] == np.delete(original, positions)
            ).all()  # the rest untouched
            got = tokens[positions]
            chosen += len(positions)
            masked += int((got == MASK).sum())
            same = got == labels
            kept += int(same.sum())
            random += int(((got != MASK) & ~same).sum())
            assert not np.isin(got[got != MASK], [CLS, SEP, PAD]).any()
    # ~15% of tokens, 80/10/10 (a random token equal to the original counts as kept: 1/995)
    assert 0.13 < chosen / sum(len(data._sequence(i)[0]) for i in range(len(instances))) / 12 < 0.17
    assert abs(masked / chosen - 0.8) < 0.015
    assert abs(random / chosen - 0.1) < 0.01 and abs(kept / chosen - 0.1) < 0.01


def _words(tokens: np.ndarray, candidates: np.ndarray, continues: np.ndarray) -> list[set[int]]:
    """The candidate positions of each word (a word goes on while its ids continue it)."""
    words: list[set[int]] = []
    for p in candidates:
        if words and continues[tokens[p]] and p - 1 in words[-1]:
            words[-1].add(int(p))
        else:
            words.append({int(p)})
    return words


def _mask_shape(unit: str) -> tuple[float, float]:
    """(share of the touched words masked whole, mean run of consecutive masked positions)."""
    continues = np.arange(V) % 3 == 0  # a third of the ids continue a word (as ``##`` pieces)
    instances = make_instances(corpus(n_docs=9, sentences=20), max_seq_len=64, seed=0)
    data = batches(instances, unit=unit, continues=continues)
    whole = touched = runs = chosen = 0
    for epoch in range(4):
        for i in range(len(instances)):
            tokens, _, positions, labels = data.masked(i, epoch)
            original, _, candidates = data._sequence(i)
            assert len(positions) == min(n_predictions(len(original), 0.15, 20), len(candidates))
            assert (np.diff(positions) > 0).all() and set(positions) <= set(candidates)
            assert (labels == original[positions]).all()
            picked = set(positions.tolist())
            for w in _words(original, candidates, continues):
                if w & picked:
                    touched += 1
                    whole += w <= picked
            runs += 1 + int((np.diff(positions) != 1).sum())
            chosen += len(positions)
    return whole / touched, chosen / runs


def test_whole_word_and_span_masking_keep_the_count_and_mask_whole_words():
    token, word, span = (_mask_shape(unit) for unit in ("token", "word", "span"))
    # words are masked whole (a word cut to fill the count is rare), single tokens often are not
    assert word[0] > 0.97 and span[0] > 0.97 and token[0] < 0.7
    # spans run over several words (SpanBERT's mean is 3.8, cut here by a count of 9 at 64
    # tokens); words and tokens mostly stand alone
    assert span[1] > 2.5 and span[1] > 1.5 * word[1] and word[1] < 2 and token[1] < 1.3


def test_whole_word_masking_needs_to_know_where_words_start():
    with pytest.raises(ConfigError, match="mask_unit=word needs a wordpiece tokenizer"):
        rule(unit="word")
    with pytest.raises(ConfigError, match="mask_unit must be token, word or span"):
        rule(unit="sentence")


def test_max_predictions_caps_the_count():
    assert n_predictions(128, 0.15, 20) == 19 and n_predictions(200, 0.15, 20) == 20
    assert n_predictions(3, 0.15, 20) == 1


def test_batches_are_a_pure_function_of_seed_epoch_index_and_masks_follow_the_mode():
    instances = make_instances(corpus(), max_seq_len=40, seed=0)
    dyn, static = batches(instances), batches(instances, masking="static")
    a, b = dyn.get(2, 3), batches(instances).get(2, 3)
    assert a.inputs.tokens.equal(b.inputs.tokens) and a.mlm_index.equal(b.mlm_index)
    # an instance keeps its masks across epochs with static masking, not with dynamic
    assert static.masked(4, 0)[2].tolist() == static.masked(4, 7)[2].tolist()
    assert any(dyn.masked(i, 0)[2].tolist() != dyn.masked(i, 1)[2].tolist() for i in range(10))
    # the flat index points at the labels' places, and padding is never predicted
    flat = a.inputs.tokens.reshape(-1)
    assert a.inputs.mask.reshape(-1)[a.mlm_index].all()
    assert a.nsp_weight == pytest.approx(len(a.mlm_index) / 6)
    assert (flat[a.mlm_index] != PAD).all()


def test_ranks_share_the_global_batch():
    instances = make_instances(corpus(), max_seq_len=40, seed=0)
    data = batches(instances)
    whole = data.get(1, 2)
    parts = [data.get(1, 2, rank=r, world=2) for r in range(2)]
    assert sum(p.n_tokens for p in parts) == whole.n_tokens
    assert {p.nsp_weight for p in parts} == {whole.nsp_weight}  # N/B of the global batch
    rows = sorted(tuple(t[m].tolist()) for p in parts for t, m in zip(p.inputs.tokens, p.inputs.mask))
    assert rows == sorted(tuple(t[m].tolist()) for t, m in zip(whole.inputs.tokens, whole.inputs.mask))


def test_a_batch_carries_where_the_loss_reads_it_to_any_device():
    instances = make_instances(corpus(), max_seq_len=40, seed=0)
    b = batches(instances).get(0, 1)
    at, index = b.reads
    width = b.inputs.tokens.shape[1]
    # each predicted position is found through (at, index): row r's slot holds its column
    rows = b.mlm_index // width
    assert at.reshape(-1)[index].tolist() == (b.mlm_index - rows * width).tolist()
    assert (at[:, 0] == 0).all()  # [CLS] first in every row
    moved = b.to("cpu")
    assert moved.reads[0].equal(at) and moved.reads[1].equal(index)
