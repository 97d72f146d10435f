"""Fine-tuning data: sentence (pair) classification and extractive question answering.

**Classification files** (one reader, the format taken from the path):

- ``.json`` — a list of objects, or an object of objects (``{"0": {…}, "1": {…}}``, as the MNLI
  sample in ``mnli/glue_pretrain``), in file order;
- ``.jsonl`` — one object per line (SNLI);
- ``.tsv`` — a header row naming the columns (GLUE);
- a directory holding ``s1.*``, ``s2.*`` and ``labels.*`` — line-aligned premise, hypothesis and
  label files (the MNLI "hard" subsets).

The text fields and the label field are named in the config (``text_fields``, ``label_field``)
or found among the usual names (``text_a``/``text_b``, ``sentence1``/``sentence2``,
``premise``/``hypothesis``, ``sentence``/``text``; ``label``, ``gold_label``). A label outside the
label set is a one-line error naming the file and line.

**Detokenization.** The MNLI hard subsets are tokenized (``do n't``, ``articles .``); the other
sets are raw text. :func:`detokenize` — the Moses detokenizer of ``sacremoses`` (English), then
PTB contractions joined back (``do n't`` → ``don't``) and PTB quotes made plain (`````` ``''`` →
``"``) — is applied to every set marked ``detokenize: true``, for every model alike.

**Pairs** are ``[CLS] A [SEP] B [SEP]`` (segments 0…0 1…1), a single text ``[CLS] A [SEP]``; a pair
longer than ``max_seq_len`` is cut one token at a time from the end of the longer text (BERT's
``_truncate_seq_pair``).

**SQuAD** (v1.1 JSON): questions with their paragraph, split *by article* when train and test
come from one file (:func:`split_articles`). :func:`make_windows` cuts each paragraph into windows
of ``[CLS] question [SEP] context-part [SEP]`` with BERT's ``doc_stride`` — the *step* between
window starts (Hugging Face's ``stride`` is the *overlap*: ``overlap = window − doc_stride``).
Answers map to tokens through the tokenizer's character offsets into the original paragraph; a
training answer whose ends fall inside a word piece cannot be recovered exactly and is left out
(counted), as BERT's ``read_squad_examples`` leaves out answers it cannot recover. A window
that does not hold the answer points at ``[CLS]`` (position 0), as in BERT's SQuAD v1.1 training.
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fullrank.data.batch import ClassificationBatch, SpanBatch, encoder_inputs
from fullrank.data.batching import check_position
from fullrank.data.lm import check_world
from fullrank.data.text import loads_json, read_lines, read_text
from fullrank.data.tokenizers import Tokenizer
from fullrank.errors import ConfigError, DataError

TEXT_FIELDS = (
    ("text_a", "text_b"),
    ("sentence1", "sentence2"),
    ("premise", "hypothesis"),
    ("question", "sentence"),
    ("sentence",),
    ("text",),
)
LABEL_FIELDS = ("label", "gold_label")


# -------------------------------------------------------------------------- detokenization
_MOSES: Any = None
_CONTRACTION = re.compile(r"(\w) (n't|'s|'re|'ve|'ll|'d|'m)\b", re.IGNORECASE)


def detokenize(text: str) -> str:
    """Tokenized English back to plain text (see the module docstring for the rule)."""
    global _MOSES
    if _MOSES is None:
        from sacremoses import MosesDetokenizer

        _MOSES = MosesDetokenizer(lang="en")
    text = text.replace("``", '"').replace("''", '"')
    return _CONTRACTION.sub(r"\1\2", _MOSES.detokenize(text.split()))


# --------------------------------------------------------------------- classification files
@dataclass(frozen=True)
class Example:
    """One classification example: its text(s), its label (``None`` when unlabelled), and where
    it comes from (``file:line`` for errors)."""

    texts: tuple[str, ...]
    label: str | None
    where: str


def _records(path: Path) -> Iterator[tuple[dict[str, Any], str]]:
    """The objects of a JSON, JSONL or TSV file with their ``file:line`` (TSV/JSONL) or
    ``file:#index`` (JSON)."""
    if path.suffix == ".jsonl":
        for i, line in enumerate(read_lines(path), 1):
            if line.strip():
                try:
                    record = loads_json(line)
                except json.JSONDecodeError as e:
                    raise DataError(f"{path}:{i}: not valid JSON ({e.msg})") from None
                if not isinstance(record, dict):
                    raise DataError(
                        f"{path}:{i}: a JSON {type(record).__name__}, not an "
                        f"object; write one example object per line"
                    )
                yield record, f"{path}:{i}"
    elif path.suffix == ".json":
        try:
            data = loads_json(read_text(path))
        except json.JSONDecodeError as e:
            raise DataError(f"{path}:{e.lineno}: not valid JSON ({e.msg})") from None
        items = list(data.values()) if isinstance(data, dict) else data
        if not isinstance(items, list) or not all(isinstance(x, dict) for x in items):
            raise DataError(f"{path}: expected a list of objects or an object of objects")
        for i, item in enumerate(items):
            yield item, f"{path}:#{i}"
    elif path.suffix == ".tsv":
        reader = csv.DictReader(io.StringIO(read_text(path)), delimiter="\t", quoting=csv.QUOTE_NONE)
        try:
            rows = list(reader)
        except csv.Error as e:
            raise DataError(
                f"{path}:{reader.line_num}: not a row of TAB-separated fields ({e}); fix the line"
            ) from None
        for i, row in enumerate(rows, 2):
            yield row, f"{path}:{i}"
    else:
        raise DataError(
            f"{path}: unknown format; use .json, .jsonl, .tsv or a directory of s1/s2/labels files"
        )


def _pick(
    record: dict[str, Any],
    given: Sequence[str] | None,
    options: Sequence[Sequence[str]],
    what: str,
    where: str,
) -> tuple[str, ...]:
    if given:
        missing = [f for f in given if f not in record]
        if missing:
            raise DataError(
                f"{where}: no field '{missing[0]}' (fields: {', '.join(map(str, record))}); check data.{what}"
            )
        return tuple(given)
    for names in options:
        if all(n in record for n in names):
            return tuple(names)
    raise DataError(
        f"{where}: none of the usual {what} ({', '.join('/'.join(o) for o in options)}) "
        f"among the fields {', '.join(map(str, record))}; set data.{what}"
    )


def read_examples(
    path: str | Path,
    *,
    text_fields: Sequence[str] | None = None,
    label_field: str | None = None,
    detokenized: bool = False,
) -> list[Example]:
    """The examples of a classification file or s1/s2/labels directory (module docstring)."""
    path = Path(path)
    fix = detokenize if detokenized else (lambda t: t)
    if path.is_dir():
        parts = {}
        for name in ("s1", "s2", "labels"):
            found = sorted(path.glob(f"{name}.*"))
            if not found:
                raise DataError(
                    f"{path}: no {name}.* file; a directory of examples holds "
                    f"s1.*, s2.* and labels.* (line-aligned)"
                )
            parts[name] = read_lines(found[0])
        if not len(parts["s1"]) == len(parts["s2"]) == len(parts["labels"]):
            raise DataError(
                f"{path}: s1, s2 and labels have {len(parts['s1'])}, "
                f"{len(parts['s2'])} and {len(parts['labels'])} lines; they must be "
                f"line-aligned"
            )
        label_file = sorted(path.glob("labels.*"))[0]
        return [
            Example((fix(a), fix(b)), lab.strip(), f"{label_file}:{i}")
            for i, (a, b, lab) in enumerate(zip(parts["s1"], parts["s2"], parts["labels"]), 1)
        ]
    out = []
    fields: tuple[str, ...] | None = None
    label: str | None = None
    for record, where in _records(path):
        if fields is None:
            fields = _pick(record, text_fields, TEXT_FIELDS, "text_fields", where)
            named = [f for f in ([label_field] if label_field else LABEL_FIELDS) if f in record]
            label = named[0] if named else None
            if label_field and label is None:
                raise DataError(
                    f"{where}: no field '{label_field}' (fields: "
                    f"{', '.join(map(str, record))}); check data.label_field"
                )
        texts = tuple(fix(str(record.get(f) or "")) for f in fields)
        out.append(Example(texts, None if label is None else str(record.get(label)), where))
    if not out:
        raise DataError(f"{path}: no examples in this file")
    return out


def label_ids(examples: Sequence[Example], labels: Sequence[str]) -> np.ndarray:
    """The class id of every example; :class:`DataError` names the first label not in ``labels``."""
    index = {name: i for i, name in enumerate(labels)}
    out = np.empty(len(examples), dtype=np.int64)
    for i, ex in enumerate(examples):
        if ex.label not in index:
            raise DataError(
                f"{ex.where}: label {ex.label!r} is not one of {', '.join(labels)}; "
                f"fix the example or set data.labels"
            )
        out[i] = index[ex.label]
    return out


def truncate_pair(a: list[int], b: list[int] | None, max_tokens: int) -> None:
    """BERT's ``_truncate_seq_pair``: drop the last token of the longer text until they fit."""
    while len(a) + (len(b) if b is not None else 0) > max_tokens:
        (a if b is None or len(a) > len(b) else b).pop()


def encode_texts(
    texts: Sequence[Sequence[str]],
    tok: Tokenizer,
    max_seq_len: int,
    *,
    cut: list[tuple[int, int]] | None = None,
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """``[CLS] A [SEP] (B [SEP])`` token rows and their segment rows for every example; ``cut``
    collects ``(index, tokens)`` of each example longer than ``max_seq_len`` (then cut)."""
    n_texts = {len(t) for t in texts}
    if len(n_texts) > 1 or not n_texts <= {1, 2}:
        raise DataError(f"every example needs one text or a pair of texts, got {sorted(n_texts)}")
    firsts = tok.encode_batch([t[0] for t in texts])
    seconds = tok.encode_batch([t[1] for t in texts]) if n_texts == {2} else None
    rows, segments = [], []
    for i, a in enumerate(firsts):
        b = seconds[i] if seconds is not None else None
        special = 3 if b is not None else 2
        total = len(a) + (len(b) if b is not None else 0) + special
        if cut is not None and total > max_seq_len:
            cut.append((i, total))
        truncate_pair(a, b, max_seq_len - special)
        row = [tok.cls_id, *a, tok.sep_id] + ([*b, tok.sep_id] if b is not None else [])
        rows.append(np.asarray(row, dtype=np.int64))
        segments.append(np.asarray([0] * (len(a) + 2) + [1] * (len(row) - len(a) - 2), dtype=np.int64))
    return rows, segments


# -------------------------------------------------------------------------------- batches
class ExampleBatches:
    """Shuffled fixed-size batches over ``n`` examples, built by ``collate(indices)``;
    ``get(epoch, index)`` is a pure function of ``(seed, epoch, index)``. ``lengths (n,)``: each
    example's token count, by which evaluation orders the examples (:meth:`eval_order`) and, with
    ``group_by_length``, training groups them: each epoch's shuffled examples are cut into groups
    of ``GROUP`` batches' worth, each group is sorted by length and cut into batches, and the
    epoch's batches are shuffled (Hugging Face's ``group_by_length``), so that a batch pads
    little while its examples still come from anywhere in the set."""

    GROUP = 50

    def __init__(
        self,
        n: int,
        collate: Callable[[np.ndarray], Any],
        *,
        batch_size: int,
        seed: int = 0,
        name: str = "examples",
        lengths: np.ndarray | None = None,
        group_by_length: bool = False,
    ) -> None:
        if batch_size < 1:
            raise ConfigError(f"batch_size = {batch_size} must be at least 1")
        if lengths is not None and len(lengths) != n:
            raise ValueError(f"{len(lengths)} lengths for {n} examples")
        if group_by_length and lengths is None:
            raise ValueError("group_by_length needs the examples' lengths")
        self.n, self.collate, self.batch_size, self.seed, self.name = n, collate, batch_size, seed, name
        self.lengths, self.group_by_length = lengths, group_by_length
        self._order: tuple[int, np.ndarray] | None = None

    @classmethod
    def of_rows(
        cls, rows: Sequence[Sequence[int] | np.ndarray], collate: Callable[[np.ndarray], Any], **kwargs: Any
    ) -> ExampleBatches:
        """Batches over token ``rows`` (one per example), their lengths taken from the rows."""
        return cls(len(rows), collate, lengths=np.fromiter(map(len, rows), np.int64, len(rows)), **kwargs)

    def __len__(self) -> int:
        return self.n // self.batch_size

    def get(self, epoch: int, index: int, *, rank: int = 0, world: int = 1) -> Any:
        check_world(self.batch_size, rank, world)
        if len(self) == 0:
            raise DataError(
                f"{self.name}: {self.n} examples, fewer than batch_size = "
                f"{self.batch_size}; use more data or a smaller batch_size"
            )
        check_position(epoch, index, len(self))
        if self._order is None or self._order[0] != epoch:
            self._order = (epoch, self.epoch_order(epoch))
        rows = self._order[1][index * self.batch_size : (index + 1) * self.batch_size]
        return self.collate(rows[rank::world])

    def epoch_order(self, epoch: int) -> np.ndarray:
        """The examples of ``epoch``'s batches, batch after batch (``len(self) · batch_size`` of
        them at least)."""
        rng = np.random.default_rng([self.seed, epoch])
        order = rng.permutation(self.n)
        if not self.group_by_length:
            return order
        assert self.lengths is not None
        size = self.GROUP * self.batch_size
        groups = [
            g[np.argsort(-self.lengths[g], kind="stable")] for g in np.split(order, range(size, self.n, size))
        ]
        batches = np.concatenate(groups)[: len(self) * self.batch_size].reshape(len(self), self.batch_size)
        return batches[rng.permutation(len(self))].reshape(-1)

    def eval_order(self, batch_size: int | None = None, limit: int | None = None) -> np.ndarray:
        """The examples :meth:`eval_batches` visits, in its order: the first ``limit`` batches'
        worth in file order (every example when ``None``), longest first, so that a batch pads
        its rows to nearly their own length (without ``lengths``: file order)."""
        n = self.n if limit is None else min(self.n, limit * (batch_size or self.batch_size))
        if self.lengths is None:
            return np.arange(n)
        return np.argsort(-self.lengths[:n], kind="stable")

    def eval_batches(self, batch_size: int | None = None, limit: int | None = None) -> Iterator[Any]:
        """Every example once (or the first ``limit`` batches' worth), in :meth:`eval_order`;
        ``in_file_order`` puts per-example results back in file order."""
        batch_size = batch_size or self.batch_size
        order = self.eval_order(batch_size, limit)
        for start in range(0, len(order), batch_size):
            yield self.collate(order[start : start + batch_size])


def in_file_order(values: Any, order: np.ndarray) -> Any:
    """Per-example results ``values`` (a tensor, array or list, in the order ``order`` visited
    the examples, e.g. :meth:`ExampleBatches.eval_order`) in file order."""
    inverse = np.argsort(order, kind="stable")
    if isinstance(values, list):
        return [values[i] for i in inverse]
    return values[torch.from_numpy(inverse)] if isinstance(values, torch.Tensor) else values[inverse]


def classification_batches(
    rows: Sequence[np.ndarray],
    segments: Sequence[np.ndarray],
    labels: np.ndarray,
    *,
    pad_id: int,
    batch_size: int,
    seed: int = 0,
    name: str = "examples",
    group_by_length: bool = False,
) -> ExampleBatches:
    def collate(idx: np.ndarray) -> ClassificationBatch:
        return ClassificationBatch(
            encoder_inputs([rows[i] for i in idx], [segments[i] for i in idx], pad_id),
            torch.from_numpy(labels[idx]),
        )

    return ExampleBatches.of_rows(
        rows, collate, batch_size=batch_size, seed=seed, name=name, group_by_length=group_by_length
    )


# ---------------------------------------------------------------------------------- SQuAD
@dataclass
class SquadQuestion:
    """One question: its paragraph, its reference answers ``(text, start char)`` and its
    article's index in the file."""

    id: str
    question: str
    context: str
    answers: list[tuple[str, int]]
    article: int


def read_squad(path: str | Path) -> list[list[SquadQuestion]]:
    """The questions of a SQuAD v1.1 file, article by article. An answer whose text is not
    the context at its ``answer_start`` is a :class:`DataError`."""
    path = Path(path)
    try:
        data = loads_json(read_text(path))["data"]
    except (json.JSONDecodeError, KeyError, TypeError):
        raise DataError(f"{path}: not a SQuAD file (a JSON object with 'data': a list of articles)") from None
    if not isinstance(data, list):
        raise DataError(f"{path}: 'data' is a JSON {type(data).__name__}, not a list of articles")
    articles = []
    for a, article in enumerate(data):
        try:
            articles.append(_squad_article(article, a, path))
        except DataError:
            raise
        except (KeyError, TypeError, ValueError, ArithmeticError, AttributeError) as e:
            what = f"no '{e.args[0]}'" if isinstance(e, KeyError) else "a value of the wrong type"
            raise DataError(
                f"{path}: article {a + 1} has {what}; each article holds "
                f"paragraphs of a context and qas (id, question, answers of text "
                f"and answer_start), as SQuAD v1.1"
            ) from None
    return articles


def _squad_article(article: dict[str, Any], a: int, path: Path) -> list[SquadQuestion]:
    """The questions of article ``a``; a ``KeyError``/``TypeError`` for one of another shape."""
    questions = []
    for paragraph in article["paragraphs"]:
        context = paragraph["context"]
        for qa in paragraph["qas"]:
            answers = [(ans["text"], int(ans["answer_start"])) for ans in qa["answers"]]
            if (
                not isinstance(context, str)
                or not isinstance(qa["question"], str)
                or not all(isinstance(text, str) for text, _ in answers)
            ):
                raise TypeError("a context, question or answer that is not text")
            for text, start in answers:
                if context[start : start + len(text)] != text:
                    raise DataError(
                        f"{path}: question {qa['id']}: answer {text!r} is not the "
                        f"context at answer_start={start} (found "
                        f"{context[start : start + len(text)]!r}); fix the offset"
                    )
            questions.append(SquadQuestion(qa["id"], qa["question"], context, answers, a))
    return questions


def split_articles(
    articles: Sequence[Sequence[SquadQuestion]], every: int
) -> tuple[list[SquadQuestion], list[SquadQuestion]]:
    """``(train, test)``: article ``i`` (0-based, file order) is a test article when
    ``i % every == every - 1`` (every ``every``-th article), a training one otherwise."""
    if every < 2:
        raise ConfigError(f"data.test_every = {every}: every k-th article goes to the test part; use k >= 2")
    train = [q for i, art in enumerate(articles) if i % every != every - 1 for q in art]
    test = [q for i, art in enumerate(articles) if i % every == every - 1 for q in art]
    return train, test


@dataclass
class SquadWindows:
    """Windows of questions over their paragraphs (arrays indexed by window).

    ``rows``/``segments``: ``[CLS] question [SEP] context-part [SEP]``; ``offsets[w]`` ``(L, 2)``
    the character span of each token in its paragraph (``-1`` outside the context part);
    ``max_context[w]`` whether the window is the one with most context around that token (BERT's
    ``_check_is_max_context``); ``question[w]`` the question index; ``starts``/``ends`` the
    answer's token positions (training; 0 when outside the window).
    """

    rows: list[np.ndarray] = field(default_factory=list)
    segments: list[np.ndarray] = field(default_factory=list)
    offsets: list[np.ndarray] = field(default_factory=list)
    max_context: list[np.ndarray] = field(default_factory=list)
    question: list[int] = field(default_factory=list)
    starts: list[int] = field(default_factory=list)
    ends: list[int] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # training answers not on token boundaries

    def __len__(self) -> int:
        return len(self.rows)


def window_starts(n_tokens: int, room: int, doc_stride: int) -> list[int]:
    """BERT's window starts over ``n_tokens`` context tokens, ``room`` per window: ``0``, then
    steps of ``min(room, doc_stride)`` until a window reaches the end."""
    starts = [0]
    while starts[-1] + room < n_tokens:
        starts.append(starts[-1] + min(room, doc_stride))
    return starts


def make_windows(
    questions: Sequence[SquadQuestion], tok: Tokenizer, *, max_seq_len: int, doc_stride: int, training: bool
) -> SquadWindows:
    """Windows of every question (module docstring). ``training``: each window gets the token
    positions of the first answer; answers that do not fall on token boundaries are left out
    and their question ids listed in ``skipped``."""
    if doc_stride < 1:
        raise ConfigError(f"data.doc_stride = {doc_stride} must be at least 1")
    contexts: dict[str, tuple[list[int], np.ndarray]] = {}
    for q in questions:
        if q.context not in contexts:
            enc = tok.hf.encode(q.context, add_special_tokens=False)
            contexts[q.context] = (enc.ids, np.asarray(enc.offsets, dtype=np.int64).reshape(-1, 2))
    q_ids = tok.encode_batch([q.question for q in questions])
    out = SquadWindows()
    for qi, (q, qtok) in enumerate(zip(questions, q_ids)):
        ids, offs = contexts[q.context]
        room = max_seq_len - len(qtok) - 3
        if room < 1:
            raise DataError(
                f"{q.id}: the question has {len(qtok)} tokens, more than a "
                f"{max_seq_len}-token window can hold beside any context; shorten the "
                f"question (or train a model with a larger model.seq_len)"
            )
        answer_tokens = None
        if training:
            text, start = q.answers[0]
            first = np.flatnonzero(offs[:, 0] == start)
            last = np.flatnonzero(offs[:, 1] == start + len(text))
            last = last[last >= first[0]] if len(first) else last[:0]
            if len(last) == 0:
                out.skipped.append(q.id)
                continue
            answer_tokens = (int(first[0]), int(last[0]))
        starts = window_starts(len(ids), room, doc_stride)
        lengths = [min(room, len(ids) - s) for s in starts]
        # BERT's max-context score of token t in window w: min(left, right) + 0.01·length
        best = np.full(len(ids), -1.0)
        best_window = np.zeros(len(ids), dtype=np.int64)
        for w, (s, n) in enumerate(zip(starts, lengths)):
            t = np.arange(s, s + n)
            score = np.minimum(t - s, s + n - 1 - t) + 0.01 * n
            better = score > best[t]
            best[t[better]] = score[better]
            best_window[t[better]] = w
        head = [tok.cls_id, *qtok, tok.sep_id]
        for w, (s, n) in enumerate(zip(starts, lengths)):
            row = np.asarray(head + ids[s : s + n] + [tok.sep_id], dtype=np.int64)
            off = np.full((len(row), 2), -1, dtype=np.int64)
            off[len(head) : len(head) + n] = offs[s : s + n]
            maxc = np.zeros(len(row), dtype=bool)
            maxc[len(head) : len(head) + n] = best_window[s : s + n] == w
            out.rows.append(row)
            out.segments.append(np.asarray([0] * len(head) + [1] * (n + 1), dtype=np.int64))
            out.offsets.append(off)
            out.max_context.append(maxc)
            out.question.append(qi)
            a, b = answer_tokens if answer_tokens is not None else (-1, -1)
            inside = answer_tokens is not None and s <= a and b < s + n
            out.starts.append(a - s + len(head) if inside else 0)
            out.ends.append(b - s + len(head) if inside else 0)
    return out


def span_batches(
    windows: SquadWindows,
    *,
    pad_id: int,
    batch_size: int,
    seed: int = 0,
    name: str = "windows",
    group_by_length: bool = False,
) -> ExampleBatches:
    starts, ends = np.asarray(windows.starts, np.int64), np.asarray(windows.ends, np.int64)

    def collate(idx: np.ndarray) -> SpanBatch:
        return SpanBatch(
            encoder_inputs([windows.rows[i] for i in idx], [windows.segments[i] for i in idx], pad_id),
            torch.from_numpy(starts[idx]),
            torch.from_numpy(ends[idx]),
        )

    return ExampleBatches.of_rows(
        windows.rows, collate, batch_size=batch_size, seed=seed, name=name, group_by_length=group_by_length
    )
