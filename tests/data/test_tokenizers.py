"""Tokenizers: round trips per kind, special ids, save/load, fingerprints, errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import tokenizers

from fullrank.data.tokenizers import Tokenizer, TokenizerKind, ensure_vocab_matches
from fullrank.errors import ConfigError, DataError
from tests.e2e.lm_fixture import TEXT

SHAKESPEARE = (
    "First Citizen:\nBefore we proceed any further, hear me speak.\n\n"
    "All:\nSpeak, speak.\n\nFirst Citizen:\nYou are all resolved rather to die than to famish?\n"
    "\tIndented; with   three spaces — and “quotes”!\r\nEnd.\n"
)
SENTENCES = [
    "Zwei junge weiße Männer sind im Freien in der Nähe vieler Büsche.",
    "Two young, White males are outside near many bushes.",
    "Ein Mann in grün hält eine Gitarre, während der andere Mann sein Hemd ansieht.",
    "A man in green holds a guitar while the other man observes his shirt.",
    "Eine Gruppe von Männern lädt Baumwolle auf einen Lastwagen.",
    "A group of men are loading cotton onto a truck.",
    "Ein Mädchen mit Schürze und Äpfeln läuft über die Straße.",
    "A girl in an apron with apples runs across the street.",
]
PTB = (
    " aer banknote berlitz calloway centrust cluett fromstein gitano guterman\n"
    " pierre <unk> N years old will join the board as a nonexecutive director nov. N\n"
    " mr. <unk> is chairman of <unk> n.v. the dutch publishing group\n"
)


def write(tmp_path, name: str, text: str):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture
def corpora(tmp_path):
    return {
        "char": write(tmp_path, "shakespeare.txt", SHAKESPEARE),
        "bpe": write(tmp_path, "multi30k.txt", "\n".join(SENTENCES * 3) + "\n"),
        "word": write(tmp_path, "ptb.txt", PTB),
        "wordpiece": write(tmp_path, "wiki.txt", "\n".join(SENTENCES * 3) + "\n"),
    }


def token(tok: Tokenizer, i: int) -> str:
    t = tok.id_to_token(i)
    assert t is not None, i
    return t


def trained(kind: TokenizerKind, corpora) -> Tokenizer:
    return Tokenizer.train(kind, [corpora[kind]], vocab_size=300 if kind in ("bpe", "wordpiece") else None)


def test_char_round_trip_is_exact_with_newlines(corpora):
    tok = trained("char", corpora)
    assert tok.kind == "char"
    assert tok.vocab_size == 4 + len(set(SHAKESPEARE))  # every character, whitespace included
    ids = tok.encode(SHAKESPEARE)
    assert len(ids) == len(SHAKESPEARE)
    assert tok.decode(ids) == SHAKESPEARE
    assert tok.encode("\n") == [tok.token_to_id("\n")]
    assert tok.encode("Z") == [tok.unk_id]  # unseen character
    # characters are numbered in code-point order after the specials
    chars = [token(tok, i) for i in range(4, tok.vocab_size)]
    assert chars == sorted(chars)


def test_char_vocab_size_keeps_the_most_frequent(corpora):
    tok = Tokenizer.train("char", [corpora["char"]], vocab_size=10)
    assert tok.vocab_size == 10
    assert tok.token_to_id(" ") is not None and tok.token_to_id("e") is not None
    assert tok.token_to_id("—") is None


def test_bpe_round_trip_with_umlauts(corpora):
    tok = trained("bpe", corpora)
    assert tok.kind == "bpe" and tok.vocab_size <= 300
    for s in SENTENCES + ["Männer  laufen   über Äpfel.", "Straße"]:
        ids = tok.encode(s)
        assert tok.decode(ids) == s
        assert tok.unk_id not in ids
    assert len(tok.encode(SENTENCES[0])) < len(SENTENCES[0])  # merges were learned


def test_bpe_pieces_never_join_letters_and_punctuation(tmp_path):
    """Punctuation is isolated before BPE (as SentencePiece and Moses-tokenized data have it),
    so "Büsche." is "Büsche" + "." and the vocabulary holds no "▁hat."-style duplicates; the
    round trip stays exact around brackets, quotes, hyphens and apostrophes."""
    extra = ['Ein "T-Shirt" (blau), d\'Arc... 10:30 Uhr!', "(a)", "„Hallo“ – sagte er.", "x ."]
    corpus = write(tmp_path, "m.txt", "\n".join((SENTENCES + extra) * 3) + "\n")
    tok = Tokenizer.train("bpe", [corpus], vocab_size=300)
    for piece in set(tok.hf.get_vocab()) - {"<pad>", "<unk>", "<s>", "</s>"}:
        body = piece.lstrip("▁")
        assert not (any(c.isalnum() for c in body) and any(not c.isalnum() for c in body)), piece
    ids = tok.encode(SENTENCES[0])
    assert tok.id_to_token(ids[-1]) == "." and tok.decode(ids) == SENTENCES[0]
    for s in extra:
        assert tok.unk_id not in tok.encode(s) and tok.decode(tok.encode(s)) == s


def test_lowercased_bpe_folds_case_and_survives_save_load(corpora, tmp_path):
    tok = Tokenizer.train("bpe", [corpora["bpe"]], vocab_size=300, lowercase=True)
    assert not any(c.isupper() for piece in tok.hf.get_vocab() for c in piece)
    for s in SENTENCES + ["Männer  laufen   über Äpfel."]:
        assert tok.decode(tok.encode(s)) == s.lower()
        assert tok.encode(s) == tok.encode(s.lower())
    tok.save(tmp_path / "tokenizer.json")
    back = Tokenizer.load(tmp_path)
    assert back.kind == "bpe" and back.encode("Ein Mann") == tok.encode("ein mann")
    cased = trained("bpe", corpora)  # the default keeps case
    assert cased.decode(cased.encode("Ein Mann")) == "Ein Mann"


def test_word_level_maps_ptb_unk_to_the_unknown_id(corpora):
    tok = trained("word", corpora)
    assert tok.kind == "word"
    line = " mr. <unk> is chairman of <unk> n.v. the dutch publishing group "
    ids = tok.encode(line)
    assert ids.count(tok.unk_id) == 2 and len(ids) == 11
    assert tok.decode(ids) == line.strip()
    assert tok.encode("zebra") == [tok.unk_id]
    # "<unk>" is one token, not also a word of its own
    assert sorted(tok.hf.get_vocab().values()) == list(range(tok.vocab_size))
    types = set(PTB.split()) - {"<unk>"}
    assert tok.vocab_size == 4 + len(types)


def test_word_vocab_size_and_min_frequency(corpora):
    assert Tokenizer.train("word", [corpora["word"]], vocab_size=7).vocab_size == 7
    tok = Tokenizer.train("word", [corpora["word"]], min_frequency=2)
    assert set(tok.hf.get_vocab()) == {"<pad>", "<unk>", "<s>", "</s>", "N", "the"}


def test_wordpiece_is_bert_style(corpora):
    tok = trained("wordpiece", corpora)
    assert tok.kind == "wordpiece"
    assert [tok.pad_id, tok.unk_id, tok.cls_id, tok.sep_id, tok.mask_id] == [0, 1, 2, 3, 4]
    assert (tok.bos_id, tok.eos_id) == (tok.cls_id, tok.sep_id)
    ids = tok.encode("Männer laufen [MASK]")
    assert ids[-1] == tok.mask_id
    assert any(token(tok, i).startswith("##") for i in tok.encode("Gruppenmänner"))
    assert tok.decode(tok.encode("A man in green holds a guitar.")) == "a man in green holds a guitar."


@pytest.mark.parametrize("kind", ["char", "bpe", "word"])
def test_special_ids(kind, corpora):
    tok = trained(kind, corpora)
    assert [tok.pad_id, tok.unk_id, tok.bos_id, tok.eos_id] == [0, 1, 2, 3]
    assert [tok.id_to_token(i) for i in range(4)] == ["<pad>", "<unk>", "<s>", "</s>"]
    assert tok.cls_id is tok.sep_id is tok.mask_id is None
    text = "speak" if kind != "word" else "the board"
    ids = tok.encode(text)
    assert tok.decode([tok.bos_id, *ids, tok.eos_id, tok.pad_id, tok.pad_id]) == tok.decode(ids)
    assert tok.encode_batch([text, text]) == [ids, ids]


@pytest.mark.parametrize("kind", ["char", "bpe", "word", "wordpiece"])
def test_save_load_round_trip_and_fingerprint(kind, corpora, tmp_path):
    tok = trained(kind, corpora)
    path = tmp_path / "ckpt" / "tokenizer.json"
    tok.save(path)
    assert [p.name for p in path.parent.iterdir()] == ["tokenizer.json"]  # no temporary left
    for loaded in (Tokenizer.load(path), Tokenizer.load(path.parent), Tokenizer.from_str(tok.to_str())):
        assert loaded.kind == kind
        assert loaded.fingerprint() == tok.fingerprint()
        assert loaded.vocab_size == tok.vocab_size
        assert loaded.encode(SENTENCES[1]) == tok.encode(SENTENCES[1])
    # a plain Hugging Face file: the library itself reads it
    assert tokenizers.Tokenizer.from_file(str(path)).get_vocab_size() == tok.vocab_size
    # training is deterministic, so retraining hits the token cache again
    assert trained(kind, corpora).fingerprint() == tok.fingerprint()


TRAIN_BOTH = """
import sys
from fullrank.data.tokenizers import Tokenizer
for kind in ("bpe", "wordpiece"):
    Tokenizer.train(kind, [sys.argv[1]], vocab_size=1000).save(f"{sys.argv[2]}/{kind}.json")
"""


def test_training_twice_in_two_processes_gives_byte_identical_files(tmp_path):
    """Hugging Face's trainers walk hash maps whose seed differs per process: the WordPiece
    trainer numbers its continuation symbols in that order and breaks ties between equally
    frequent merges by those numbers (huggingface/tokenizers#1794; on this text six processes
    gave six different vocabularies before fullrank fixed the order). Two processes must agree
    byte for byte."""
    corpus = tmp_path / "valid.txt"
    corpus.write_text(TEXT[:60000], encoding="utf-8")
    outs = []
    for i in range(2):
        out = tmp_path / f"run{i}"
        out.mkdir()
        subprocess.run(
            [sys.executable, "-c", TRAIN_BOTH, str(corpus), str(out)],
            check=True,
            env={**os.environ, "PYTHONHASHSEED": str(i)},
            timeout=300,
        )
        outs.append(out)
    for kind in ("bpe", "wordpiece"):
        first, second = ((o / f"{kind}.json").read_bytes() for o in outs)
        assert first == second, kind
        vocab = json.loads(first)["model"]["vocab"]
        assert len(vocab) == 1000 and sorted(vocab.values()) == list(range(1000))


def test_fingerprint_changes_with_the_training_data(corpora):
    a = Tokenizer.train("char", [corpora["char"]])
    b = Tokenizer.train("char", [corpora["word"]])
    assert a.fingerprint() != b.fingerprint()


def test_train_rejects_bad_settings(corpora):
    with pytest.raises(ConfigError, match="did you mean 'bpe'"):
        Tokenizer.train(
            "bpee",  # type: ignore[arg-type]  # a wrong kind, on purpose
            [corpora["bpe"]],
            vocab_size=100,
        )
    with pytest.raises(ConfigError, match="needs a vocab_size"):
        Tokenizer.train("bpe", [corpora["bpe"]])
    with pytest.raises(ConfigError, match="vocab_size = 4"):
        Tokenizer.train("word", [corpora["word"]], vocab_size=4)
    with pytest.raises(ConfigError, match="lowercase is not available for a word tokenizer"):
        Tokenizer.train("word", [corpora["word"]], lowercase=True)


def test_train_on_a_missing_file_names_it(tmp_path):
    missing = tmp_path / "missing.txt"
    with pytest.raises(DataError, match="missing.txt: no such file"):
        Tokenizer.train("char", [missing])


def test_load_errors_are_one_line(tmp_path):
    with pytest.raises(DataError, match="no such file"):
        Tokenizer.load(tmp_path / "tokenizer.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(DataError) as info:
        Tokenizer.load(bad)
    assert "not a valid tokenizer.json" in str(info.value) and "\n" not in str(info.value)
    unigram = tokenizers.Tokenizer(tokenizers.models.Unigram([("<unk>", 0.0), ("a", -1.0)], 0))
    with pytest.raises(DataError, match="Unigram tokenizer is not supported"):
        Tokenizer.from_str(unigram.to_str())
    foreign = tokenizers.Tokenizer(tokenizers.models.WordLevel({"[UNK]": 0, "a": 1}, unk_token="[UNK]"))
    with pytest.raises(DataError, match="has no '<pad>' token"):
        Tokenizer.from_str(foreign.to_str())


def test_vocab_mismatch_is_one_line(corpora):
    tok = trained("char", corpora)
    ensure_vocab_matches(tok, tok.vocab_size, "ckpt/model.safetensors")
    with pytest.raises(DataError) as info:
        ensure_vocab_matches(tok, tok.vocab_size + 5, "ckpt/model.safetensors")
    n = tok.vocab_size
    assert str(info.value) == (
        f"tokenizer has {n} tokens but the model (ckpt/model.safetensors) expects "
        f"{n + 5}; use the tokenizer saved with the checkpoint"
    )


def test_saved_json_is_canonical(corpora, tmp_path):
    tok = trained("bpe", corpora)
    tok.save(tmp_path / "tokenizer.json")
    spec = json.loads((tmp_path / "tokenizer.json").read_text())
    assert spec["model"]["type"] == "BPE" and spec["pre_tokenizer"]["type"] == "Sequence"
    assert [p["type"] for p in spec["pre_tokenizer"]["pretokenizers"]] == ["Metaspace", "Punctuation"]
