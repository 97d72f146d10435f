"""Tokenizers: a thin wrapper over Hugging Face ``tokenizers`` with four fixed recipes.

=============  ===========================================================  =========================
kind           pipeline (all Hugging Face components)                       used for
=============  ===========================================================  =========================
``char``       WordLevel over single characters (``Split`` on ``[\\s\\S]``),  tiny-shakespeare; exact
               ``Fuse`` decoder; every character is a token, newlines too   round trip
``bpe``        BPE; ``Metaspace`` then ``Punctuation`` pre-tokenizers,      [V17]/[B20] subwords;
               ``Metaspace`` decoder (sentencepiece style: no piece joins    shared src/tgt vocabulary
               letters and punctuation); optionally ``Lowercase``
``word``       WordLevel on whitespace-split words                          PTB, WikiText-2 perplexity
``wordpiece``  BERT: ``BertNormalizer``, ``BertPreTokenizer``, WordPiece     BERT pre-training
               with ``##`` continuations
=============  ===========================================================  =========================

Special tokens and ids, fixed at training time:
``char``/``bpe``/``word``: ``<pad>``=0, ``<unk>``=1, ``<s>``=2, ``</s>``=3 (PTB's and WikiText's own
``<unk>`` is the unknown id); ``wordpiece``: ``[PAD]``=0, ``[UNK]``=1, ``[CLS]``=2, ``[SEP]``=3,
``[MASK]``=4 with BOS = CLS and EOS = SEP. A tokenizer imported with a Hugging Face model
(:mod:`fullrank.data.hf_tokenizer`) keeps its own ids, and its own special tokens where they are
not these (:data:`IMPORTED_SPECIALS`: GPT-2's, Marian's).

The saved file is a plain Hugging Face ``tokenizer.json`` (loadable by ``tokenizers`` and
``transformers``); the kind is read back from its structure (model type and pre-tokenizer), so
nothing outside the Hugging Face format is stored. ``fingerprint()`` hashes the canonical JSON
and keys the token caches of :mod:`fullrank.data.corpus`.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Literal, get_args

from tokenizers import Regex, __version__, decoders, models, normalizers, pre_tokenizers, trainers
from tokenizers import Tokenizer as HFTokenizer

from fullrank.data.text import decode_utf8, read_bytes, read_text, split_lines
from fullrank.errors import ConfigError, DataError, closest

TokenizerKind = Literal["char", "bpe", "word", "wordpiece"]
KINDS: tuple[str, ...] = get_args(TokenizerKind)

# (pad, unk, bos, eos[, mask]) in id order
SPECIALS: dict[str, tuple[str, ...]] = {
    "char": ("<pad>", "<unk>", "<s>", "</s>"),
    "bpe": ("<pad>", "<unk>", "<s>", "</s>"),
    "word": ("<pad>", "<unk>", "<s>", "</s>"),
    "wordpiece": ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"),
}
# The special tokens, in the same role order (pad, unk, bos, eos), of tokenizers that come with
# models trained elsewhere (imported from Hugging Face), tried in turn when a tokenizer lacks its
# kind's own: GPT-2's one token plays every role; Marian has no <s> and starts its decoder with
# <pad> (its decoder_start_token_id).
IMPORTED_SPECIALS: tuple[tuple[str, ...], ...] = (
    ("<|endoftext|>",) * 4,
    ("<pad>", "<unk>", "<pad>", "</s>"),
)
_CHAR_PATTERN = r"[\s\S]"  # any single character, newlines included
_UNLIMITED = 2**31 - 1  # "no limit" for WordLevel's vocab_size
_TRAIN_CHUNK = 1 << 16  # characters per piece fed to the char counter
TRAINER = f"tokenizers {__version__}"  # what trains a vocabulary: part of a kept one's key


def _hf_pipeline(kind: str, *, lowercase: bool) -> HFTokenizer:
    """An untrained Hugging Face tokenizer with the normalizer/pre-tokenizer/decoder of ``kind``."""
    unk = SPECIALS[kind][1]
    if kind == "bpe":
        tok = HFTokenizer(models.BPE(unk_token=unk))
        if lowercase:
            tok.normalizer = normalizers.Lowercase()
        # Punctuation marks are pieces of their own, as SentencePiece keeps them (it never
        # merges across Unicode scripts) and as Moses-tokenized MT data has them: without this
        # split BPE spends vocabulary on "▁hat." beside "▁hat" (1,537 of a 10k Multi30k
        # vocabulary). Lossless: the Metaspace decoder joins pieces without "▁" to the previous.
        tok.pre_tokenizer = pre_tokenizers.Sequence(
            [
                pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always", split=True),
                pre_tokenizers.Punctuation(behavior="isolated"),
            ]
        )
        tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always", split=True)
    elif kind == "wordpiece":
        tok = HFTokenizer(models.WordPiece(unk_token=unk))
        tok.normalizer = normalizers.BertNormalizer(lowercase=lowercase)
        tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        tok.decoder = decoders.WordPiece(prefix="##")
    else:
        raise AssertionError(kind)
    return tok


def _word_level(kind: str, vocab: dict[str, int]) -> HFTokenizer:
    tok = HFTokenizer(models.WordLevel(vocab, unk_token=SPECIALS[kind][1]))
    if kind == "char":
        tok.pre_tokenizer = pre_tokenizers.Split(Regex(_CHAR_PATTERN), behavior="isolated")
        tok.decoder = decoders.Fuse()
    else:  # word: no decoder, so Hugging Face joins words with single spaces
        tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return tok


def _kind_of(hf: HFTokenizer, where: str) -> str:
    """Read the kind back from a tokenizer's structure (see the module docstring)."""
    spec = json.loads(hf.to_str())
    model = (spec.get("model") or {}).get("type")
    pre = (spec.get("pre_tokenizer") or {}).get("type")
    if model == "BPE":
        return "bpe"
    if model == "WordPiece":
        return "wordpiece"
    if model == "WordLevel":
        return "char" if pre == "Split" else "word"
    raise DataError(
        f"{where}: a {model} tokenizer is not supported; fullrank trains and loads "
        f"{', '.join(KINDS)} tokenizers (train one with Tokenizer.train)"
    )


def _train_wordpiece(
    lines: Callable[[], Iterator[str]], vocab_size: int, *, min_frequency: int, lowercase: bool
) -> HFTokenizer:
    """A WordPiece tokenizer trained on ``lines()`` that is the same in every process.

    Hugging Face's WordPiece trainer is its BPE trainer with ``##`` continuations. It gives each
    continuation symbol (``##a``) its id when it first meets it while walking the words in
    hash-map order, which changes from process to process (huggingface/tokenizers#1794), and
    breaks ties between equally frequent merges by those ids: two runs on one corpus choose
    different pieces and number them differently. Here a first pass (no merges: only the word
    count) finds the continuation symbols; the second pass gives them fixed ids, in code-point
    order after the special tokens, so that every tie is broken the same way. They are then
    ordinary entries of the vocabulary again (not added tokens)."""
    specials = list(SPECIALS["wordpiece"])

    def trainer(size: int, fixed: list[str]) -> trainers.WordPieceTrainer:
        return trainers.WordPieceTrainer(
            vocab_size=size,
            min_frequency=min_frequency,
            special_tokens=fixed,
            continuing_subword_prefix="##",
            show_progress=False,
        )

    counted = _hf_pipeline("wordpiece", lowercase=lowercase)
    counted.train_from_iterator(lines(), trainer(1, specials))
    continuations = sorted(
        t for t in counted.get_vocab(with_added_tokens=False) if t.startswith("##") and len(t) == 3
    )
    hf = _hf_pipeline("wordpiece", lowercase=lowercase)
    hf.train_from_iterator(lines(), trainer(vocab_size, specials + continuations))
    out = _hf_pipeline("wordpiece", lowercase=lowercase)
    out.model = models.WordPiece(
        hf.get_vocab(with_added_tokens=False), unk_token=specials[1], continuing_subword_prefix="##"
    )
    return out


def _without_specials(text: str, specials: Sequence[str]) -> str:
    # Hugging Face trainers see raw text, so PTB's literal "<unk>" would be counted as a word and
    # given a second id; the specials already have theirs.
    for s in specials:
        text = text.replace(s, " ")
    return text


def _specials_of(hf: HFTokenizer, kind: str) -> tuple[str, ...]:
    """The kind's special tokens, or else the first set of :data:`IMPORTED_SPECIALS` that
    ``hf`` holds entirely (not for ``wordpiece``, whose roles include ``[MASK]``)."""
    candidates = (SPECIALS[kind],) + (IMPORTED_SPECIALS if kind != "wordpiece" else ())
    for specials in candidates:
        if all(hf.token_to_id(t) is not None for t in specials):
            return specials
    return SPECIALS[kind]


class Tokenizer:
    """A trained tokenizer of one :data:`TokenizerKind` (wraps ``tokenizers.Tokenizer``)."""

    def __init__(self, hf: HFTokenizer, kind: TokenizerKind, *, where: str = "tokenizer") -> None:
        self.hf = hf
        self.kind: TokenizerKind = kind
        ids = []
        for token in _specials_of(hf, kind):
            i = hf.token_to_id(token)
            if i is None:
                raise DataError(
                    f"{where}: the {kind} tokenizer has no {token!r} token; "
                    "use a tokenizer made by Tokenizer.train"
                )
            ids.append(i)
        self._special_ids = tuple(ids)
        self._skip = frozenset((ids[0], ids[2], ids[3]))  # pad, bos, eos

    # --- building ---------------------------------------------------------------------------

    @classmethod
    def train(
        cls,
        kind: TokenizerKind,
        files: Sequence[str | Path],
        vocab_size: int | None = None,
        *,
        min_frequency: int = 1,
        lowercase: bool | None = None,
    ) -> Tokenizer:
        """Train a ``kind`` tokenizer on ``files`` (UTF-8 text).

        ``vocab_size`` counts every token, specials included. ``None`` means "every character" for
        ``char`` and "every word type" for ``word``; ``bpe`` and ``wordpiece`` need a number.
        ``lowercase`` folds case before tokenizing (and so the decoded text is lowercase): ``None``
        is the kind's default — on for ``wordpiece`` (BERT uncased), off for ``bpe``; ``char`` and
        ``word`` keep the text as it is and reject ``True``. Training is deterministic for every
        kind: the same files and settings give the same ids and a byte-identical
        ``tokenizer.json``, in any process (:func:`_train_wordpiece` says how for WordPiece).
        """
        if kind not in KINDS:
            raise ConfigError(
                f"unknown tokenizer kind {kind!r}{closest(str(kind), KINDS)}; "
                f"choose one of {', '.join(KINDS)}"
            )
        if isinstance(files, (str, Path)):
            files = [files]
        if not files:
            raise ConfigError(f"no training files given for the {kind} tokenizer")
        specials = SPECIALS[kind]
        if vocab_size is not None and vocab_size <= len(specials):
            raise ConfigError(
                f"vocab_size = {vocab_size} leaves no room besides the {len(specials)} "
                f"special tokens of a {kind} tokenizer; use a larger vocab_size"
            )
        if min_frequency < 1:
            raise ConfigError(f"min_frequency = {min_frequency} must be at least 1")
        if lowercase and kind in ("char", "word"):
            raise ConfigError(
                f"lowercase is not available for a {kind} tokenizer (its vocabulary "
                "is the text's own symbols); lowercase the corpus, or drop lowercase"
            )
        if lowercase is None:
            lowercase = kind == "wordpiece"

        if kind == "char":
            counts: Counter[str] = Counter()
            for f in files:
                text = read_text(f)
                for i in range(0, len(text), _TRAIN_CHUNK):
                    counts.update(text[i : i + _TRAIN_CHUNK])
            chars = [c for c, n in counts.items() if n >= min_frequency]
            if vocab_size is not None and len(chars) > vocab_size - len(specials):
                # keep the most frequent; ties by code point, so the choice is deterministic
                chars = sorted(chars, key=lambda c: (-counts[c], c))[: vocab_size - len(specials)]
            vocab = {s: i for i, s in enumerate(specials)}
            vocab.update((c, len(specials) + i) for i, c in enumerate(sorted(chars)))
            hf = _word_level("char", vocab)
        else:
            if kind in ("bpe", "wordpiece") and vocab_size is None:
                raise ConfigError(
                    f"a {kind} tokenizer needs a vocab_size (e.g. 8000 for Multi30k, "
                    "37000 for [V17]'s WMT En-De)"
                )
            size = vocab_size or _UNLIMITED  # unbounded: word-level only (checked above)

            def lines() -> Iterator[str]:
                for f in files:
                    yield from split_lines(_without_specials(read_text(f), specials))

            if kind == "wordpiece":
                hf = _train_wordpiece(lines, size, min_frequency=min_frequency, lowercase=lowercase)
            elif kind == "word":
                hf = _word_level("word", {})
                hf.train_from_iterator(
                    lines(),
                    trainers.WordLevelTrainer(
                        vocab_size=size,
                        min_frequency=min_frequency,
                        special_tokens=list(specials),
                        show_progress=False,
                    ),
                )
            else:
                hf = _hf_pipeline("bpe", lowercase=lowercase)
                hf.train_from_iterator(
                    lines(),
                    trainers.BpeTrainer(
                        vocab_size=size,
                        min_frequency=min_frequency,
                        special_tokens=list(specials),
                        show_progress=False,
                    ),
                )
        # specials are matched before pre-tokenization, so "<unk>" in a PTB line is one token
        hf.add_special_tokens(list(specials))
        return cls(hf, kind)

    @classmethod
    def from_str(cls, json_str: str, *, where: str = "tokenizer") -> Tokenizer:
        """Rebuild a tokenizer from the JSON of :meth:`to_str` (e.g. stored in a checkpoint)."""
        try:
            hf = HFTokenizer.from_str(json_str)
        except Exception as e:
            reason = str(e).splitlines()[0] if str(e) else type(e).__name__
            raise DataError(
                f"{where}: not a valid tokenizer.json ({reason}); "
                "use the tokenizer.json saved with the checkpoint"
            ) from None
        return cls(hf, _kind_of(hf, where), where=where)  # type: ignore[arg-type]  # one of KINDS, checked there

    @classmethod
    def load(cls, path: str | Path) -> Tokenizer:
        """Load a ``tokenizer.json`` (or the ``tokenizer.json`` inside directory ``path``)."""
        p = Path(path)
        if p.is_dir():
            p = p / "tokenizer.json"
        return cls.from_str(decode_utf8(read_bytes(p), p), where=str(p))

    def to_str(self) -> str:
        """Canonical (compact) Hugging Face JSON; what :meth:`fingerprint` hashes."""
        return self.hf.to_str()

    def save(self, path: str | Path) -> None:
        """Write ``tokenizer.json`` atomically (temporary file, then rename)."""
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        tmp = p.with_name(f".{p.name}.{os.getpid()}.tmp")
        tmp.write_text(self.hf.to_str(pretty=True), encoding="utf-8")
        os.replace(tmp, p)

    def fingerprint(self) -> str:
        """sha256 of :meth:`to_str`: equal for equal tokenizers, stable across save/load."""
        return hashlib.sha256(self.to_str().encode("utf-8")).hexdigest()

    # --- use --------------------------------------------------------------------------------

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text``, no special tokens added."""
        return self.hf.encode(text, add_special_tokens=False).ids

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """:meth:`encode` of many texts, in parallel (Hugging Face's Rust threads)."""
        fast = getattr(self.hf, "encode_batch_fast", self.hf.encode_batch)  # no offsets: faster
        return [e.ids for e in fast(list(texts), add_special_tokens=False)]

    def decode(self, ids: Sequence[int]) -> str:
        """Text of ``ids``, skipping pad, BOS and EOS (``<unk>``/``[MASK]`` stay visible).

        ``char``: ``decode(encode(t)) == t`` exactly. ``bpe``: exact for text without leading
        whitespace whose characters were seen in training.
        """
        return self.hf.decode([int(i) for i in ids if int(i) not in self._skip], skip_special_tokens=False)

    def id_to_token(self, i: int) -> str | None:
        return self.hf.id_to_token(int(i))

    def token_to_id(self, token: str) -> int | None:
        return self.hf.token_to_id(token)

    @property
    def vocab_size(self) -> int:
        return self.hf.get_vocab_size(with_added_tokens=True)

    @property
    def pad_id(self) -> int:
        return self._special_ids[0]

    @property
    def unk_id(self) -> int:
        return self._special_ids[1]

    @property
    def bos_id(self) -> int:
        """``<s>``; ``[CLS]`` for wordpiece."""
        return self._special_ids[2]

    @property
    def eos_id(self) -> int:
        """``</s>``; ``[SEP]`` for wordpiece."""
        return self._special_ids[3]

    @property
    def cls_id(self) -> int | None:
        return self._special_ids[2] if self.kind == "wordpiece" else None

    @property
    def sep_id(self) -> int | None:
        return self._special_ids[3] if self.kind == "wordpiece" else None

    @property
    def mask_id(self) -> int | None:
        return self._special_ids[4] if self.kind == "wordpiece" else None

    def __repr__(self) -> str:
        return f"Tokenizer(kind={self.kind!r}, vocab_size={self.vocab_size})"


def ensure_vocab_matches(tokenizer: Tokenizer, vocab_size: int, where: str) -> None:
    """``DataError`` unless ``tokenizer`` has exactly the ``vocab_size`` tokens the model expects."""
    if tokenizer.vocab_size != vocab_size:
        raise DataError(
            f"tokenizer has {tokenizer.vocab_size} tokens but the model ({where}) expects "
            f"{vocab_size}; use the tokenizer saved with the checkpoint"
        )
