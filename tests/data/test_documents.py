"""Corpus files read streaming (WikiExtractor, .xz/.gz, folders, globs) and the token cache of
tokenized documents: what it holds, when it is reused and when it is rebuilt."""

from __future__ import annotations

import gzip
import lzma
import shutil
import threading

import numpy as np
import pytest
import tokenizers

from fullrank.data.bert_pretraining import PretrainingBatches, make_segments, masking_rule
from fullrank.data.document_cache import cached_documents, tokenize_documents
from fullrank.data.documents import corpus_files, iter_documents, read_documents
from fullrank.data.tokenizers import Tokenizer
from fullrank.errors import DataError

ARTICLES = """<doc id="12" url="http://en.wikipedia.org/wiki?curid=12" title="Anarchism">
Anarchism

Anarchism is a political philosophy. It holds the state to be harmful!
History.
Its roots are old? Some say so.
</doc>
<doc id="25" url="http://en.wikipedia.org/wiki?curid=25" title="Autism">
Autism

Autism is a disorder. It affects people.
</doc>
<doc id="39" url="http://en.wikipedia.org/wiki?curid=39" title="Albedo">
Albedo

</doc>
"""
DOCS = [
    [
        "Anarchism is a political philosophy.",
        "It holds the state to be harmful!",
        "History.",
        "Its roots are old?",
        "Some say so.",
    ],
    ["Autism is a disorder.", "It affects people."],
]


def write(path, text: str):
    data = text.encode("utf-8")
    if path.suffix == ".xz":
        path.write_bytes(lzma.compress(data))
    elif path.suffix == ".gz":
        path.write_bytes(gzip.compress(data))
    else:
        path.write_bytes(data)
    return path


@pytest.mark.parametrize("name", ["wiki.txt", "wiki.txt.xz", "wiki.txt.gz"])
def test_wikiextractor_articles_are_documents_in_plain_and_compressed_files(tmp_path, name):
    path = write(tmp_path / name, ARTICLES)
    # the title line is dropped, an empty article too; headings are sentences of their own
    assert read_documents(path, "wikiextractor") == DOCS


def test_a_folder_and_a_glob_read_their_files_in_name_order(tmp_path):
    folder = tmp_path / "corpus"
    folder.mkdir()
    second, first = ARTICLES.split('<doc id="25"')
    write(folder / "b.txt.xz", '<doc id="25"' + first)
    write(folder / "a.txt", second)
    (folder / ".hidden").write_text("not a corpus file")
    assert [f.name for f in corpus_files(folder)] == ["a.txt", "b.txt.xz"]
    assert read_documents(folder, "wikiextractor") == DOCS
    assert read_documents(str(folder / "*.txt*"), "wikiextractor") == DOCS


BAD = {
    "unclosed": (
        '<doc id="1" url="u" title="T">\nT\n\nA b. C d.\n',
        r"wiki.txt: the <doc> opened at line 1 is not closed before the end of the file",
    ),
    "nested": (
        '<doc id="1" url="u" title="T">\nT\nA b.\n<doc id="2" url="u" title="U">\n',
        r"wiki.txt:4: <doc> inside the <doc> opened at line 1",
    ),
    "stray close": ("</doc>\n", r"wiki.txt:1: </doc> without an open <doc>"),
    "plain text": ("Just some text.\n", r"wiki.txt:1: text outside <doc"),
}


@pytest.mark.parametrize("case", BAD)
def test_malformed_wikiextractor_files_are_one_line_errors(tmp_path, case):
    text, error = BAD[case]
    path = write(tmp_path / "wiki.txt", text)
    with pytest.raises(DataError, match=error) as e:
        read_documents(path, "wikiextractor")
    assert "\n" not in str(e.value)


def test_damaged_compressed_files_bad_bytes_and_empty_patterns_are_one_line_errors(tmp_path):
    data = lzma.compress(ARTICLES.encode() * 50)
    (tmp_path / "cut.txt.xz").write_bytes(data[: len(data) // 2])
    garbled = bytearray(data)
    garbled[len(data) // 2] ^= 0xFF
    (tmp_path / "garbled.txt.xz").write_bytes(bytes(garbled))
    (tmp_path / "latin1.txt").write_bytes(ARTICLES.replace("Autism", "Autism caf\xe9").encode("latin-1"))
    for name, error in [
        ("cut.txt.xz", r"cut.txt.xz: the compressed data is damaged after line \d+"),
        ("garbled.txt.xz", r"garbled.txt.xz: the compressed data is damaged"),
        ("latin1.txt", r"latin1.txt:8: not valid UTF-8 \(byte 0xe9"),
        ("nothing-*.xz", r"nothing-\*.xz: no file matches this pattern"),
        ("missing.txt", r"missing.txt: no such file or folder"),
    ]:
        with pytest.raises(DataError, match=error) as e:
            read_documents(tmp_path / name, "wikiextractor")
        assert "\n" not in str(e.value)


def wordpiece() -> Tokenizer:
    words = sorted({w.strip(".!?").lower() for d in DOCS for s in d for w in s.split()})
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ".", "!", "?", *words]
    hf = tokenizers.Tokenizer(
        tokenizers.models.WordPiece({t: i for i, t in enumerate(vocab)}, unk_token="[UNK]")
    )
    hf.normalizer = tokenizers.normalizers.BertNormalizer(lowercase=True)
    hf.pre_tokenizer = tokenizers.pre_tokenizers.BertPreTokenizer()
    return Tokenizer(hf, "wordpiece")


def test_the_cache_holds_what_tokenizing_in_memory_gives_and_is_reused(tmp_path, monkeypatch):
    path = write(tmp_path / "wiki.txt.xz", ARTICLES)
    tok = wordpiece()
    heard: list[str] = []
    built = cached_documents(path, "wikiextractor", tok, tmp_path / "cache", say=heard.append)
    expected = tokenize_documents(DOCS, tok)
    for name in ("ids", "sent_starts", "doc_starts"):
        assert np.array_equal(getattr(built, name), getattr(expected, name))
    assert isinstance(built.ids, np.memmap) and built.ids.dtype == np.uint16
    files = built.info["files"]
    assert "tokenized in" in heard[-1] and isinstance(files, list) and files[0]["sha256"]

    def no_encoding(*args, **kwargs):
        raise AssertionError("a cache hit must not tokenize again")

    monkeypatch.setattr(Tokenizer, "encode_batch", no_encoding)
    again = cached_documents(path, "wikiextractor", tok, tmp_path / "cache", say=heard.append)
    assert np.array_equal(again.ids, built.ids) and "cached in" in heard[-1]
    assert not list((tmp_path / "cache").glob("*.tmp"))  # no temporary folder left behind


def test_runs_started_together_tokenize_the_corpus_once(tmp_path, monkeypatch):
    path = write(tmp_path / "wiki.txt", ARTICLES)
    tok, cache = wordpiece(), tmp_path / "cache"
    first_tokenizing, second_waiting = threading.Event(), threading.Event()
    encoders: list[str] = []
    real = Tokenizer.encode_batch

    def encode_batch(self, *args, **kwargs):
        encoders.append(threading.current_thread().name)
        first_tokenizing.set()
        assert second_waiting.wait(10), "the second run never waited for the first"
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Tokenizer, "encode_batch", encode_batch)
    heard: dict[str, list[str]] = {"first": [], "second": []}
    got: dict[str, np.ndarray] = {}

    def run(name: str) -> None:
        def say(line: str) -> None:
            heard[name].append(line)
            if "waiting" in line:
                second_waiting.set()

        got[name] = np.array(cached_documents(path, "wikiextractor", tok, cache, say=say).ids)

    first = threading.Thread(target=run, args=("first",), name="first")
    first.start()
    assert first_tokenizing.wait(10)
    second = threading.Thread(target=run, args=("second",), name="second")
    second.start()
    first.join(20)
    second.join(20)
    assert set(encoders) == {"first"}  # the second run read the first's cache
    assert "tokenized in" in heard["first"][-1]
    assert "another run is tokenizing it; waiting" in heard["second"][0]
    assert "cached in" in heard["second"][-1]
    assert np.array_equal(got["first"], got["second"])


def test_a_changed_corpus_or_a_damaged_cache_is_tokenized_again(tmp_path):
    path = write(tmp_path / "wiki.txt", ARTICLES)
    tok = wordpiece()
    heard: list[str] = []
    cache = tmp_path / "cache"
    first = cached_documents(path, "wikiextractor", tok, cache)
    write(path, ARTICLES.replace("It affects people.", "It affects people. Some say so."))
    second = cached_documents(path, "wikiextractor", tok, cache, say=heard.append)
    assert "tokenized in" in heard[-1]  # a stale cache is never read
    assert len(second.ids) > len(first.ids) and second.n_sentences == first.n_sentences + 1
    expected = np.array(second.ids)  # a copy: the file under the memory map is damaged next
    folders = cache.glob("documents-*")
    (folder,) = [f for f in folders if f"{len(second.ids)}," in (f / "meta.json").read_text()]
    with open(folder / "ids.bin", "r+b") as f:
        f.truncate(4)
    third = cached_documents(path, "wikiextractor", tok, cache, say=heard.append)
    assert "does not add up" in heard[-2] and "tokenized in" in heard[-1]
    assert np.array_equal(third.ids, expected)


def test_single_segments_cover_each_document_in_order_and_fit(tmp_path):
    rng = np.random.default_rng(0)
    docs = [
        [
            " ".join(rng.choice(["a", "b", "c", "d"], int(rng.integers(1, 30)))) + "."
            for _ in range(int(rng.integers(2, 12)))
        ]
        for _ in range(20)
    ]
    hf = tokenizers.Tokenizer(
        tokenizers.models.WordPiece(
            {
                t: i
                for i, t in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "b", "c", "d", "."])
            },
            unk_token="[UNK]",
        )
    )
    hf.pre_tokenizer = tokenizers.pre_tokenizers.BertPreTokenizer()
    corpus = tokenize_documents(docs, Tokenizer(hf, "wordpiece"))
    segs = make_segments(corpus, max_seq_len=24, seed=3)
    assert (segs.lengths <= 24).all() and not segs.random_next.any()
    assert (segs.lengths == 24).sum() >= len(segs) - corpus.n_docs  # only a document's last is short
    # every token once, in order, and no segment crosses a document boundary
    assert np.array_equal(np.concatenate([s.a for s in segs]), corpus.ids)
    doc_end = corpus.sent_starts[corpus.doc_starts[1:]]
    for a0, a1, _, _ in segs.bounds:
        assert np.searchsorted(doc_end, a0, side="right") == np.searchsorted(doc_end, a1 - 1, side="right")
    assert np.array_equal(make_segments(corpus, max_seq_len=24, seed=3).bounds, segs.bounds)
    short = make_segments(corpus, max_seq_len=24, seed=3, short_seq_prob=0.5)
    assert len(short) > len(segs)
    rule = masking_rule(Tokenizer(hf, "wordpiece"))
    batch = PretrainingBatches(segs, rule, cls_id=2, sep_id=3, pad_id=0, batch_size=4).get(0, 0)
    assert batch.nsp_labels is None and not batch.inputs.segments.any()
    tokens = batch.inputs.tokens.reshape(-1)
    assert not np.isin(batch.mlm_labels.numpy(), [0, 2, 3]).any()  # never [CLS], [SEP], padding
    assert (tokens[batch.mlm_index] != 0).all()


def test_documents_stream_in_file_order(tmp_path):
    for i in range(3):
        write(tmp_path / f"part{i}.txt.gz", ARTICLES.replace("Anarchism is", f"Part {i} is"))
    firsts = [d[0] for d in iter_documents(tmp_path, "wikiextractor")]
    assert firsts[::2] == [f"Part {i} is a political philosophy." for i in range(3)]
    shutil.rmtree(tmp_path)
