"""Every text reader, fed random bytes and random nesting: each input is read, or refused with
one :class:`~fullrank.errors.FullrankError` line — never another exception (a
``RecursionError``, a ``UnicodeDecodeError``, a ``KeyError`` from a file of the wrong shape).

The inputs are drawn from a seeded generator (the same inputs on every run; the seed and the
input's start are in a failure's message): bytes at random, text with the characters the
formats give meaning to, brackets and JSON/YAML/TOML containers nested up to 100,000 deep,
well-formed documents of random shape, and each of these cut at a random point.
"""

from __future__ import annotations

import io
import json
import random
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from fullrank.errors import FullrankError

if TYPE_CHECKING:
    from fullrank.data.documents import CorpusFormat

SEED = 20240611
CASES_PER_READER = 60
# the characters that the formats give meaning to, and some that encodings trip over
ALPHABET = "()[]{}<>:,;='\"#-*&!|>%@`\\/ \t\n\r\u00e9\u2028\ufeff\x00aZ09.-+eE"


def nested(rng: random.Random, depth: int) -> str:
    """Brackets of one or several kinds opened ``depth`` deep, closed or not, with words."""
    opens = rng.choice(["(", "[", "{", "(S ", "[[", "- ", "{a: "])
    closes = {"(": ")", "[": "]", "{": "}", "(S ": ")", "[[": "]]", "- ": "", "{a: ": "}"}[opens]
    inner = rng.choice(["", "x", "(NN a)", "1", '"s"', "null"])
    shut = rng.choice([depth, depth - 1, depth + 1, 0])
    return opens * depth + inner + closes * max(shut, 0)


def json_value(rng: random.Random, depth: int) -> object:
    """A random JSON value: containers to ``depth``, keys a reader may look for."""
    if depth <= 0 or rng.random() < 0.25:
        return rng.choice([None, True, 0, -1, 2.5, "", "x", "step", [], {}, "\u00e9"])
    keys = [
        "data",
        "paragraphs",
        "qas",
        "context",
        "question",
        "answers",
        "text",
        "answer_start",
        "id",
        "step",
        "split",
        "loss",
        "label",
        "text_a",
        "format",
        "model",
        "task",
        "labels",
        "files",
        "name",
        "base",
        "axes",
        "arms",
        "seeds",
        "train",
    ]
    if rng.random() < 0.5:
        return [json_value(rng, depth - 1) for _ in range(rng.randrange(3))]
    return {rng.choice(keys): json_value(rng, depth - 1) for _ in range(rng.randrange(4))}


def inputs(rng: random.Random) -> Iterator[bytes]:
    """Inputs of every kind, in turn; each is also cut at a random point now and then."""
    makers: list[Callable[[], bytes]] = [
        lambda: rng.randbytes(rng.randrange(0, 400)),
        lambda: "".join(rng.choice(ALPHABET) for _ in range(rng.randrange(1, 300))).encode(
            "utf-8", "surrogatepass"
        ),
        lambda: nested(rng, rng.choice([1, 50, 2_000, 20_000, 100_000])).encode(),
        lambda: json.dumps(json_value(rng, rng.randrange(1, 8))).encode(),
        lambda: "\n".join(json.dumps(json_value(rng, 3)) for _ in range(3)).encode(),
        lambda: "".join(
            rng.choice(
                ['<doc id="1" title="T">\n', "</doc>\n", "Text. More.\n", "\n", "<doc>", "</doc", "= T =\n"]
            )
            for _ in range(rng.randrange(12))
        ).encode(),
        lambda: b"\xef\xbb\xbf" + nested(rng, 5).encode() + rng.choice([b"\xe9", b"\xff\xfe", b"\n\xc3("]),
    ]
    while True:
        data = rng.choice(makers)()
        if data and rng.random() < 0.2:
            data = data[: rng.randrange(len(data))]
        yield data


def write(tmp: Path, name: str, data: bytes) -> Path:
    path = tmp / name
    path.write_bytes(data)
    return path


def _trees(tmp: Path, data: bytes) -> None:
    from fullrank.data.treebank import read_tree_file

    read_tree_file(write(tmp, "t.mrg", data))


def _tree_lines(tmp: Path, data: bytes) -> None:
    """What ``parse-eval`` does with each line: read it, clean it, score it against itself."""
    from fullrank.data.text import read_lines
    from fullrank.data.treebank import clean, read_tree_line
    from fullrank.evaluation.parse_eval import score_trees

    for i, line in enumerate(read_lines(write(tmp, "t.txt", data), allow_blank=True), 1):
        tree = read_tree_line(line, source="t.txt", line_number=i)
        if tree is not None and clean(tree) is not None:
            score_trees([tree], [tree])


def _lines(tmp: Path, data: bytes) -> None:
    from fullrank.data.text import read_lines

    read_lines(write(tmp, "l.txt", data))


def _stdin(tmp: Path, data: bytes) -> None:
    from fullrank.data.text import read_stdin_lines

    stdin = sys.stdin
    sys.stdin = io.TextIOWrapper(io.BytesIO(data))
    try:
        read_stdin_lines()
    finally:
        sys.stdin = stdin


def _experiment(suffix: str) -> Callable[[Path, bytes], None]:
    def read(tmp: Path, data: bytes) -> None:
        from fullrank.recipes.config import load_experiment

        load_experiment(write(tmp, f"exp{suffix}", data))

    return read


def _sweep(tmp: Path, data: bytes) -> None:
    from fullrank.sweeps.plan import load_sweep

    load_sweep(write(tmp, "sweep.yaml", data))


def _checkpoint_meta(tmp: Path, data: bytes) -> None:
    """A checkpoint's ``meta.json`` (and its ``latest`` pointer) as every command reads them."""
    from fullrank.training.checkpoints import check_readable, latest_checkpoint

    ckpt = tmp / "run" / "step-00000001"
    ckpt.mkdir(parents=True, exist_ok=True)
    write(ckpt, "meta.json", data)
    write(ckpt.parent, "latest", data[:64])
    found = latest_checkpoint(ckpt.parent)
    check_readable(found or ckpt)


def _tokenizer(tmp: Path, data: bytes) -> None:
    from fullrank.data.tokenizers import Tokenizer

    Tokenizer.load(write(tmp, "tokenizer.json", data))


def _metrics(tmp: Path, data: bytes) -> None:
    from fullrank.training.metrics import read_metrics

    write(tmp, "metrics.jsonl", data)
    read_metrics(tmp)


def _examples(suffix: str) -> Callable[[Path, bytes], None]:
    def read(tmp: Path, data: bytes) -> None:
        from fullrank.data.finetuning import read_examples

        read_examples(write(tmp, f"examples{suffix}", data))

    return read


def _squad(tmp: Path, data: bytes) -> None:
    from fullrank.data.finetuning import read_squad

    read_squad(write(tmp, "squad.json", data))


def _parallel(tmp: Path, data: bytes) -> None:
    from fullrank.data.translation import read_parallel

    read_parallel(write(tmp, "a.en", data), write(tmp, "a.de", data[::-1]))


def _documents(corpus_format: CorpusFormat, suffix: str = ".txt") -> Callable[[Path, bytes], None]:
    """A pre-training corpus: ``data`` itself (random bytes where the file should be
    compressed), and ``data`` compressed, since a good archive may hold bad text."""

    def read(tmp: Path, data: bytes) -> None:
        import gzip
        import lzma

        from fullrank.data.documents import read_documents

        pack: dict[str, Callable[[bytes], bytes]] = {".gz": gzip.compress, ".xz": lzma.compress}
        for name, content in ((f"docs{suffix}", data), (f"packed{suffix}", pack.get(suffix, bytes)(data))):
            try:
                read_documents(write(tmp, name, content), corpus_format)
            except FullrankError as e:
                assert "\n" not in str(e) and str(e), (name, data[:80])

    return read


READERS: dict[str, Callable[[Path, bytes], None]] = {
    "treebank file": _trees,
    "tree per line (parse-eval)": _tree_lines,
    "text lines": _lines,
    "standard input": _stdin,
    "experiment YAML": _experiment(".yaml"),
    "experiment TOML": _experiment(".toml"),
    "sweep file": _sweep,
    "checkpoint meta.json and latest": _checkpoint_meta,
    "tokenizer.json": _tokenizer,
    "metrics.jsonl": _metrics,
    "examples JSONL": _examples(".jsonl"),
    "examples JSON": _examples(".json"),
    "examples TSV": _examples(".tsv"),
    "SQuAD JSON": _squad,
    "parallel text": _parallel,
    "documents (blocks)": _documents("blocks"),
    "documents (wikitext)": _documents("wikitext"),
    "documents (WikiExtractor, .xz)": _documents("wikiextractor", ".xz"),
    "documents (WikiExtractor, .gz)": _documents("wikiextractor", ".gz"),
}


@pytest.mark.parametrize("reader", sorted(READERS))
def test_a_reader_reads_or_refuses_in_one_line(reader, tmp_path):
    rng = random.Random(f"{SEED}-{reader}")
    source = inputs(rng)
    for i in range(CASES_PER_READER):
        data = next(source)
        try:
            READERS[reader](tmp_path, data)
        except FullrankError as e:
            assert "\n" not in str(e) and str(e), (reader, i, data[:80])
        except Exception as e:  # anything else is what the test exists to catch
            pytest.fail(
                f"{reader}: input {i} of seed {SEED} ({len(data)} bytes, starting "
                f"{data[:60]!r}) raised {type(e).__name__}: {str(e)[:200]}"
            )
