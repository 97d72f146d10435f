"""Hugging Face tokenizer files ↔ fullrank's :class:`~fullrank.data.tokenizers.Tokenizer`, with
the same ids.

Reading (``fullrank import``), from a model directory, the first of:

- ``tokenizer.json`` (a ``transformers`` fast tokenizer; BPE, WordPiece or WordLevel), used as
  it is;
- ``vocab.txt`` (BERT's older exports): WordPiece with BERT's normalizer, pre-tokenizer and
  decoder, its settings (``do_lower_case``, ``strip_accents``, ``tokenize_chinese_chars``) and
  special tokens read from ``tokenizer_config.json`` — what ``transformers`` builds from the
  same files;
- ``vocab.json`` + ``merges.txt`` (GPT-2's older exports): byte-level BPE, likewise.

Marian's ``source.spm``/``target.spm`` are sentencepiece models, which only the
``sentencepiece`` library reads; fullrank does not depend on it, so a Marian directory needs a
``tokenizer.json`` of the same vocabulary (given with ``--tokenizer``).

Writing (``fullrank export``): ``tokenizer.json`` and a ``tokenizer_config.json`` naming the
special tokens, for ``transformers``' ``PreTrainedTokenizerFast``, which loads ``tokenizer.json``
as it is (a class with its own constructor, such as ``BertTokenizer``, rebuilds the pipeline
from its settings and would not reproduce every fullrank tokenizer). A tokenizer without a
post-processor gets the one its model expects — BERT's ``[CLS] A [SEP] B [SEP]``, Marian's
``A </s>`` — which adds special tokens only where ``transformers`` asks for them: the ids of
the text are unchanged.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer as HFTokenizer
from tokenizers import decoders, models, normalizers, pre_tokenizers, processors

from fullrank.data.text import decode_utf8, read_bytes
from fullrank.data.tokenizers import Tokenizer
from fullrank.errors import DataError

TOKENIZER_JSON, TOKENIZER_CONFIG = "tokenizer.json", "tokenizer_config.json"
SPECIAL_TOKENS_MAP = "special_tokens_map.json"
_ROLES = ("unk_token", "pad_token", "bos_token", "eos_token", "cls_token", "sep_token", "mask_token")
_BERT_DEFAULTS = {
    "unk_token": "[UNK]",
    "sep_token": "[SEP]",
    "pad_token": "[PAD]",
    "cls_token": "[CLS]",
    "mask_token": "[MASK]",
}


def _json(path: Path) -> Any:
    try:
        return json.loads(decode_utf8(read_bytes(path), path))
    except json.JSONDecodeError as e:
        raise DataError(
            f"{path}: not valid JSON ({e.msg} at line {e.lineno}); re-save the "
            f"tokenizer with transformers' save_pretrained"
        ) from None


def _settings(directory: Path) -> dict[str, Any]:
    """``tokenizer_config.json`` with ``special_tokens_map.json`` on top; special tokens as
    strings (``transformers`` writes some as ``{"content": …}``)."""
    settings: dict[str, Any] = {}
    for name in (TOKENIZER_CONFIG, SPECIAL_TOKENS_MAP):
        if (directory / name).is_file():
            data = _json(directory / name)
            if isinstance(data, dict):
                settings.update(data)
    for role in _ROLES:
        if isinstance(settings.get(role), dict):
            settings[role] = settings[role].get("content")
    return settings


def _specials(hf: HFTokenizer, names: list[str]) -> None:
    """Mark the ``names`` the vocabulary holds as special (matched before normalization, as
    ``transformers`` does)."""
    hf.add_special_tokens([n for n in dict.fromkeys(names) if hf.token_to_id(n) is not None])


def wordpiece_from_vocab(vocab_file: Path, settings: dict[str, Any]) -> HFTokenizer:
    """BERT's tokenizer from ``vocab.txt`` (one token per line, its id the line number)."""
    lines = decode_utf8(read_bytes(vocab_file), vocab_file).split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    vocab: dict[str, int] = {}
    for i, token in enumerate(lines):
        vocab[token.rstrip("\r")] = i
    names = {role: settings.get(role) or default for role, default in _BERT_DEFAULTS.items()}
    hf = HFTokenizer(models.WordPiece(vocab, unk_token=names["unk_token"], max_input_chars_per_word=100))
    hf.normalizer = normalizers.BertNormalizer(
        clean_text=True,
        handle_chinese_chars=settings.get("tokenize_chinese_chars", True),
        strip_accents=settings.get("strip_accents"),
        lowercase=settings.get("do_lower_case", True),
    )
    hf.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    hf.decoder = decoders.WordPiece(prefix="##")
    _specials(hf, list(names.values()))
    return hf


def byte_level_bpe_from_files(vocab_file: Path, merges_file: Path, settings: dict[str, Any]) -> HFTokenizer:
    """GPT-2's tokenizer from ``vocab.json`` and ``merges.txt``."""
    for path in (vocab_file, merges_file):
        read_bytes(path)  # a missing or unreadable file: one line naming it
    try:
        vocab, merges = models.BPE.read_file(str(vocab_file), str(merges_file))
    except Exception as e:
        raise DataError(
            f"{vocab_file.parent}: vocab.json and merges.txt are not a BPE "
            f"vocabulary ({str(e).splitlines()[0]}); re-save the tokenizer with "
            f"transformers' save_pretrained"
        ) from None
    hf = HFTokenizer(
        models.BPE(vocab, merges, continuing_subword_prefix="", end_of_word_suffix="", fuse_unk=False)
    )
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=settings.get("add_prefix_space", False))
    hf.decoder = decoders.ByteLevel()
    hf.post_processor = processors.ByteLevel(trim_offsets=False)
    names = [settings[r] for r in _ROLES if isinstance(settings.get(r), str)]
    _specials(hf, names or ["<|endoftext|>"])
    return hf


def read_hf_tokenizer(directory: Path, *, tokenizer_file: Path | None = None) -> tuple[Tokenizer, str]:
    """The tokenizer of a Hugging Face model directory (module docstring), or of
    ``tokenizer_file`` (a ``tokenizer.json``) when given; also the file(s) it came from."""
    if tokenizer_file is not None:
        return _from_json(tokenizer_file), str(tokenizer_file)
    if (directory / TOKENIZER_JSON).is_file():
        return _from_json(directory / TOKENIZER_JSON), TOKENIZER_JSON
    settings = _settings(directory)
    if (directory / "vocab.txt").is_file():
        hf = wordpiece_from_vocab(directory / "vocab.txt", settings)
        return Tokenizer(hf, "wordpiece", where=str(directory / "vocab.txt")), "vocab.txt"
    if (directory / "vocab.json").is_file() and (directory / "merges.txt").is_file():
        hf = byte_level_bpe_from_files(directory / "vocab.json", directory / "merges.txt", settings)
        return Tokenizer(hf, "bpe", where=str(directory / "vocab.json")), "vocab.json + merges.txt"
    spm = sorted(p.name for p in directory.glob("*.spm"))
    if spm:
        raise DataError(
            f"{directory}: its tokenizer is sentencepiece models ({', '.join(spm)}), "
            f"which fullrank cannot read without the sentencepiece library; give a "
            f"tokenizer.json of the same vocabulary with --tokenizer FILE"
        )
    raise DataError(
        f"{directory}: no tokenizer files (tokenizer.json, vocab.txt, or vocab.json "
        f"with merges.txt); save the tokenizer beside the model, or give a "
        f"tokenizer.json with --tokenizer FILE"
    )


def _from_json(path: Path) -> Tokenizer:
    text = decode_utf8(read_bytes(path), path)
    try:
        spec = json.loads(text)
    except json.JSONDecodeError:
        spec = None  # Tokenizer.from_str says what is wrong
    model = (spec.get("model") or {}).get("type") if isinstance(spec, dict) else None
    if model == "Unigram":
        raise DataError(
            f"{path}: a Unigram (sentencepiece) tokenizer; fullrank reads BPE, "
            f"WordPiece and WordLevel tokenizers"
        )
    return Tokenizer.from_str(text, where=str(path))


def hf_tokenizer_files(tok: Tokenizer, family: str, *, max_len: int) -> dict[str, str]:
    """``tokenizer.json`` and ``tokenizer_config.json`` (file name → text) for
    ``PreTrainedTokenizerFast`` (module docstring); ``family`` is ``bert``, ``gpt2`` or
    ``marian``."""
    hf = HFTokenizer.from_str(tok.to_str())
    token = tok.id_to_token
    config: dict[str, Any] = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": max_len,
        "unk_token": token(tok.unk_id),
        "pad_token": token(tok.pad_id),
    }
    if family == "bert":
        assert tok.cls_id is not None and tok.sep_id is not None and tok.mask_id is not None
        cls, sep = token(tok.cls_id), token(tok.sep_id)
        config.update(
            cls_token=cls,
            sep_token=sep,
            mask_token=token(tok.mask_id),
            model_input_names=["input_ids", "token_type_ids", "attention_mask"],
        )
        if hf.post_processor is None:
            hf.post_processor = processors.TemplateProcessing(
                single=f"{cls}:0 $A:0 {sep}:0",
                pair=f"{cls}:0 $A:0 {sep}:0 $B:1 {sep}:1",
                special_tokens=[(cls, tok.cls_id), (sep, tok.sep_id)],
            )
    else:
        config.update(eos_token=token(tok.eos_id), model_input_names=["input_ids", "attention_mask"])
        if family == "gpt2":
            config["bos_token"] = token(tok.bos_id)
        elif hf.post_processor is None:  # Marian: no BOS; every sequence ends with EOS
            eos = token(tok.eos_id)
            hf.post_processor = processors.TemplateProcessing(
                single=f"$A:0 {eos}:0", pair=f"$A:0 $B:0 {eos}:0", special_tokens=[(eos, tok.eos_id)]
            )
    return {
        TOKENIZER_JSON: hf.to_str(pretty=True),
        TOKENIZER_CONFIG: json.dumps(config, indent=2, ensure_ascii=False) + "\n",
    }
