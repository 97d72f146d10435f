"""Tiny, odd-sized Hugging Face models with their tokenizers, built offline and written with
``save_pretrained``: BERT and the pre-LN RoBERTa-PreLayerNorm (each head), GPT-2 and Marian, as a
user's model directory holds them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

transformers = pytest.importorskip("transformers")

from tokenizers import (  # noqa: E402  # after importorskip
    ByteLevelBPETokenizer,
    decoders,
    models,
    pre_tokenizers,
    trainers,
)
from tokenizers import Tokenizer as HFTokenizer  # noqa: E402  # after importorskip

REPO = Path(__file__).resolve().parents[2]
TEXT = (REPO / "data" / "tinyshakespeare" / "valid.txt").read_text(encoding="utf-8").splitlines()[:400]
# what every tokenizer is checked on: case, accents, CJK, punctuation, digits, a special token
SAMPLES = [
    "First Citizen: Before we proceed any further, hear me speak.",
    "Héllo wörld — naïve café, 你好!  Two  spaces\tand a tab; 3.14 & 42%.",
    "ROMEO: a [MASK] <|endoftext|> </s> end",
    "",
]
BERT_CLASSES = (
    "BertForPreTraining",
    "BertForMaskedLM",
    "BertModel",
    "BertForSequenceClassification",
    "BertForQuestionAnswering",
)
PRE_LN_CLASSES = (
    "RobertaPreLayerNormForMaskedLM",
    "RobertaPreLayerNormModel",
    "RobertaPreLayerNormForSequenceClassification",
    "RobertaPreLayerNormForQuestionAnswering",
)


def perturb(model) -> None:
    """Non-trivial norms and biases (an initialised model has ones and zeros)."""
    gen = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "LayerNorm" in name or "layer_norm" in name or ".ln_" in name or name.endswith("bias"):
                p.copy_(torch.rand(p.shape, generator=gen) - 0.5)


def wordpiece_vocab(size: int = 97) -> dict[str, int]:
    tok = HFTokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.train_from_iterator(
        [t.lower() for t in TEXT],
        trainers.WordPieceTrainer(
            vocab_size=size,
            special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"],
            show_progress=False,
        ),
    )
    return tok.get_vocab()


def bert_dir(root: Path, cls: str = "BertForPreTraining", *, legacy_vocab: bool = False, **config) -> Path:
    """A BERT (or, for a ``RobertaPreLayerNorm…`` class, a pre-LN BERT) model directory with a
    WordPiece tokenizer: ``tokenizer.json`` (or, ``legacy_vocab``, only ``vocab.txt``)."""
    out = root / f"{cls}{'-vocab' if legacy_vocab else ''}"
    vocab = wordpiece_vocab()
    sizes = dict(
        vocab_size=len(vocab),
        hidden_size=24,
        num_hidden_layers=3,
        num_attention_heads=4,
        intermediate_size=37,
        max_position_embeddings=43,
        attn_implementation="eager",
    )
    if cls.startswith("RobertaPreLayerNorm"):  # positions start after the padding id
        pad = vocab["[PAD]"]
        sizes.update(max_position_embeddings=43 + pad + 1, pad_token_id=pad)
        sizes.update(bos_token_id=vocab["[CLS]"], eos_token_id=vocab["[SEP]"])
        hf_cfg = transformers.RobertaPreLayerNormConfig(**{**sizes, **config})
    else:
        hf_cfg = transformers.BertConfig(**{**sizes, **config})
    if cls.endswith("ForSequenceClassification"):
        hf_cfg.id2label, hf_cfg.label2id = {0: "yes", 1: "no", 2: "maybe"}, {"yes": 0, "no": 1, "maybe": 2}
    torch.manual_seed(0)
    model = getattr(transformers, cls)(hf_cfg).eval()
    perturb(model)
    model.save_pretrained(out)
    if legacy_vocab:
        by_id = sorted(vocab, key=lambda piece: vocab[piece])
        (out / "vocab.txt").write_text("\n".join(by_id) + "\n", encoding="utf-8")
        (out / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": True}))
    else:
        transformers.BertTokenizer(vocab=vocab, do_lower_case=True).save_pretrained(out)
    return out


def roberta_bpe_dir(root: Path, cls: str = "RobertaPreLayerNormForMaskedLM") -> Path:
    """A pre-LN RoBERTa with RoBERTa's own tokenizer: byte-level BPE with ``<s>``, ``<pad>``,
    ``</s>``, ``<unk>``, ``<mask>`` (ids 0–4) and RoBERTa's pair framing."""
    from tokenizers import processors

    out = root / f"{cls}-bpe"
    bpe = ByteLevelBPETokenizer()
    specials = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
    bpe.train_from_iterator(TEXT, vocab_size=301, special_tokens=specials, show_progress=False)
    bpe._tokenizer.post_processor = processors.RobertaProcessing(("</s>", 2), ("<s>", 0))
    hf_cfg = transformers.RobertaPreLayerNormConfig(
        vocab_size=bpe.get_vocab_size(),
        hidden_size=24,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=37,
        max_position_embeddings=43,
        type_vocab_size=1,
        pad_token_id=1,
    )
    torch.manual_seed(0)
    model = getattr(transformers, cls)(hf_cfg).eval()
    perturb(model)
    model.save_pretrained(out)
    names = ("bos", "pad", "eos", "unk", "mask")
    roles = {f"{n}_token": t for n, t in zip(names, specials)} | {"cls_token": "<s>", "sep_token": "</s>"}
    transformers.PreTrainedTokenizerFast(tokenizer_object=bpe._tokenizer, **roles).save_pretrained(out)
    return out


def gpt2_dir(root: Path, *, legacy_vocab: bool = False, **config) -> Path:
    """A GPT-2 model directory: ``tokenizer.json`` (or only ``vocab.json`` + ``merges.txt``)."""
    out = root / f"gpt2{'-vocab' if legacy_vocab else ''}"
    out.mkdir(parents=True)
    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(TEXT, vocab_size=301, special_tokens=["<|endoftext|>"], show_progress=False)
    bpe.save_model(str(out))
    eos = bpe.token_to_id("<|endoftext|>")
    hf_cfg = transformers.GPT2Config(
        **{
            **dict(
                vocab_size=bpe.get_vocab_size(),
                n_positions=43,
                n_embd=24,
                n_layer=2,
                n_head=4,
                n_inner=37,
                bos_token_id=eos,
                eos_token_id=eos,
                attn_implementation="eager",
            ),
            **config,
        }
    )
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(hf_cfg).eval()
    perturb(model)
    model.save_pretrained(out)
    if not legacy_vocab:
        tok = transformers.AutoTokenizer.from_pretrained(out)
        for name in ("vocab.json", "merges.txt"):
            (out / name).unlink()
        tok.save_pretrained(out)
    return out


def marian_tokenizer() -> HFTokenizer:
    """A Marian-style vocabulary: ``</s>`` = 0, ``<unk>`` = 1, …, ``<pad>`` last."""
    tok = HFTokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    tok.train_from_iterator(
        TEXT, trainers.BpeTrainer(vocab_size=89, special_tokens=["</s>", "<unk>"], show_progress=False)
    )
    tok.add_special_tokens(["</s>", "<unk>", "<pad>"])
    return tok


def marian_dir(root: Path, *, with_tokenizer: bool = True, **config) -> Path:
    """A Marian model directory; its tokenizer is a ``tokenizer.json`` (``with_tokenizer``)
    or, as Marian ships it, sentencepiece files (stand-ins: fullrank does not read them)."""
    out = root / "marian"
    tok = marian_tokenizer()
    pad = tok.token_to_id("<pad>")
    hf_cfg = transformers.MarianConfig(
        **{
            **dict(
                vocab_size=tok.get_vocab_size(),
                d_model=24,
                encoder_layers=2,
                decoder_layers=3,
                encoder_attention_heads=4,
                decoder_attention_heads=4,
                encoder_ffn_dim=37,
                decoder_ffn_dim=37,
                max_position_embeddings=43,
                activation_function="swish",
                scale_embedding=True,
                pad_token_id=pad,
                decoder_start_token_id=pad,
                eos_token_id=0,
                forced_eos_token_id=0,
                attn_implementation="eager",
            ),
            **config,
        }
    )
    torch.manual_seed(0)
    model = transformers.MarianMTModel(hf_cfg).eval()
    perturb(model)
    with torch.no_grad():
        model.final_logits_bias.uniform_(-1, 1)  # as Marian's own models: a trained output bias
    model.save_pretrained(out)
    if with_tokenizer:
        tok.save(str(out / "tokenizer.json"))
    else:
        for name in ("source.spm", "target.spm"):
            (out / name).write_bytes(b"\x0a\x05stand-in")
        (out / "vocab.json").write_text(json.dumps(tok.get_vocab()))
    return out
