"""State-dict mappings between Hugging Face ``transformers`` models and fullrank models.

Only tensors are exchanged: no ``transformers`` import is needed here. A user loads the Hugging
Face weights with ``safetensors`` (never by unpickling) and passes the dict. BERT maps into
:class:`Encoder`; an :class:`EncoderDecoder` maps out to Marian (``MarianMTModel``), used by the
parity test and the decoding benchmark.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor

from fullrank.errors import CheckpointError
from fullrank.layers.embeddings import sinusoidal_table
from fullrank.models.encoder import EncoderConfig
from fullrank.models.encoder_decoder import EncoderDecoder, EncoderDecoderConfig


def bert_config_from_hf(hf: Mapping[str, Any], **overrides: Any) -> EncoderConfig:
    """An :class:`EncoderConfig` from a Hugging Face ``BertConfig`` dict (``config.to_dict()``)."""
    if hf.get("hidden_act", "gelu") != "gelu":
        raise CheckpointError(f"hidden_act={hf['hidden_act']!r} is not supported; only 'gelu'")
    kw: dict[str, Any] = dict(
        vocab_size=hf["vocab_size"], d_model=hf["hidden_size"], n_heads=hf["num_attention_heads"],
        d_ff=hf["intermediate_size"], n_layers=hf["num_hidden_layers"],
        dropout=hf.get("hidden_dropout_prob", 0.1),
        attn_dropout=hf.get("attention_probs_dropout_prob", 0.1),
        norm_eps=hf.get("layer_norm_eps", 1e-12), max_len=hf["max_position_embeddings"],
        seq_len=min(128, hf["max_position_embeddings"]),
        type_vocab_size=hf.get("type_vocab_size", 2),
        init_std=hf.get("initializer_range", 0.02),
    )
    kw.update(overrides)
    return EncoderConfig(**kw)


def bert_heads_from_hf(hf: Mapping[str, Tensor]) -> dict[str, Any]:
    """The :class:`EncoderConfig` head fields that a Hugging Face BERT state dict holds:
    ``BertForPreTraining`` → the pre-training heads, ``BertForSequenceClassification`` →
    ``n_classes``, ``BertForQuestionAnswering`` → ``span_head`` (and no pooler)."""
    return {"pretraining_heads": "cls.seq_relationship.weight" in hf,
            "n_classes": int(hf["classifier.weight"].shape[0]) if "classifier.weight" in hf else 0,
            "span_head": "qa_outputs.weight" in hf}


def bert_state_dict_from_hf(hf: Mapping[str, Tensor], n_layers: int) -> dict[str, Tensor]:
    """Map a ``BertForPreTraining``, ``BertForSequenceClassification``,
    ``BertForQuestionAnswering`` (or ``BertModel``, prefix-free) state dict to :class:`Encoder`.

    Query, key and value weights are concatenated into the fused ``qkv_proj``; the heads map to
    ``pooler``/``mlm``/``nsp``, ``classifier`` and ``span`` (:func:`bert_heads_from_hf` gives the
    config fields that build them).
    """
    prefix = "bert." if any(k.startswith("bert.") for k in hf) else ""

    def get(name: str) -> Tensor:
        top = name.startswith(("cls.", "classifier.", "qa_outputs."))
        key = name if top else prefix + name
        if key not in hf:
            raise CheckpointError(f"Hugging Face BERT state dict has no '{key}'")
        return hf[key]

    out: dict[str, Tensor] = {
        "embed.token.weight": get("embeddings.word_embeddings.weight"),
        "embed.positions.weight": get("embeddings.position_embeddings.weight"),
        "embed.segments.weight": get("embeddings.token_type_embeddings.weight"),
        "embed.norm.weight": get("embeddings.LayerNorm.weight"),
        "embed.norm.bias": get("embeddings.LayerNorm.bias"),
    }
    for i in range(n_layers):
        src, dst = f"encoder.layer.{i}.", f"layers.{i}."
        att = src + "attention."
        for p in ("weight", "bias"):
            out[dst + f"self_attn.qkv_proj.{p}"] = torch.cat(
                [get(att + f"self.{n}.{p}") for n in ("query", "key", "value")])
            out[dst + f"self_attn.out_proj.{p}"] = get(att + f"output.dense.{p}")
            out[dst + f"attn_norm.{p}"] = get(att + f"output.LayerNorm.{p}")
            out[dst + f"ffn.fc1.{p}"] = get(src + f"intermediate.dense.{p}")
            out[dst + f"ffn.fc2.{p}"] = get(src + f"output.dense.{p}")
            out[dst + f"ffn_norm.{p}"] = get(src + f"output.LayerNorm.{p}")
    heads = bert_heads_from_hf(hf)
    if heads["pretraining_heads"] or heads["n_classes"]:
        for p in ("weight", "bias"):
            out[f"pooler.{p}"] = get(f"pooler.dense.{p}")
    for p in ("weight", "bias"):
        if heads["n_classes"]:
            out[f"classifier.{p}"] = get(f"classifier.{p}")
        if heads["span_head"]:
            out[f"span.{p}"] = get(f"qa_outputs.{p}")
    if heads["pretraining_heads"]:
        for p in ("weight", "bias"):
            out[f"mlm.transform.{p}"] = get(f"cls.predictions.transform.dense.{p}")
            out[f"mlm.norm.{p}"] = get(f"cls.predictions.transform.LayerNorm.{p}")
            out[f"nsp.{p}"] = get(f"cls.seq_relationship.{p}")
        out["mlm.bias"] = get("cls.predictions.bias")
        out["mlm.embedding.weight"] = out["embed.token.weight"]
    return out


def marian_config_kwargs(config: EncoderDecoderConfig, *, pad_id: int, bos_id: int,
                         eos_id: int) -> dict[str, Any]:
    """``MarianConfig`` arguments for the same architecture as ``config`` (a [V17] model:
    post-LN, ReLU, embeddings × √d_model, one shared embedding). Standard-rule heads only:
    Marian has no free head size."""
    dh, dv = config.head_sizes
    if not config.standard_rule or dh != dv:
        raise CheckpointError("Marian needs d_head = d_value = d_model / n_heads; this model's "
                              f"heads are d_head={dh}, d_value={dv} with d_model={config.d_model}")
    if not config.shared_vocab or not config.tie_embeddings or config.norm_first \
            or config.activation != "relu" or config.positions != "sinusoidal":
        raise CheckpointError("Marian conversion needs a shared, tied vocabulary, post-LN, ReLU "
                              "and sinusoidal positions")
    return dict(vocab_size=config.vocab_size, d_model=config.d_model,
                encoder_layers=config.n_layers, decoder_layers=config.decoder_layers,
                encoder_attention_heads=config.n_heads, decoder_attention_heads=config.n_heads,
                encoder_ffn_dim=config.d_ff, decoder_ffn_dim=config.d_ff,
                activation_function="relu", scale_embedding=True,
                max_position_embeddings=config.max_len, dropout=0.0, attention_dropout=0.0,
                activation_dropout=0.0, share_encoder_decoder_embeddings=True,
                tie_word_embeddings=True, pad_token_id=pad_id, decoder_start_token_id=bos_id,
                eos_token_id=eos_id, forced_eos_token_id=None)


def marian_state_dict(model: EncoderDecoder) -> dict[str, Tensor]:
    """The state dict of a ``MarianMTModel`` computing the same function as ``model``.

    Marian's sinusoidal table puts the sines in the first half of each vector and the cosines in
    the second; [V17]'s interleaves them, so the table is written out explicitly.
    """
    c = model.config
    sd = {k: v.detach() for k, v in model.state_dict().items()}
    emb = sd["tgt_embed.token.weight"]
    table = sinusoidal_table(c.max_len, c.d_model)
    out: dict[str, Tensor] = {
        "model.shared.weight": emb, "model.encoder.embed_tokens.weight": emb,
        "model.decoder.embed_tokens.weight": emb, "lm_head.weight": emb,
        "model.encoder.embed_positions.weight": table,
        "model.decoder.embed_positions.weight": table,
        "final_logits_bias": torch.zeros(1, c.vocab_size),
    }

    def attention(src: str, dst: str) -> None:
        w, b = sd[f"{src}.qkv_proj.weight"], sd[f"{src}.qkv_proj.bias"]
        for name, part_w, part_b in zip(("q", "k", "v"), w.chunk(3), b.chunk(3)):
            out[f"{dst}.{name}_proj.weight"], out[f"{dst}.{name}_proj.bias"] = part_w, part_b
        out[f"{dst}.out_proj.weight"] = sd[f"{src}.out_proj.weight"]
        out[f"{dst}.out_proj.bias"] = sd[f"{src}.out_proj.bias"]

    def common(src: str, dst: str, norms: dict[str, str]) -> None:
        for p in ("weight", "bias"):
            out[f"{dst}.fc1.{p}"] = sd[f"{src}.ffn.fc1.{p}"]
            out[f"{dst}.fc2.{p}"] = sd[f"{src}.ffn.fc2.{p}"]
            for ours, theirs in norms.items():
                out[f"{dst}.{theirs}.{p}"] = sd[f"{src}.{ours}.{p}"]

    for i in range(c.n_layers):
        src, dst = f"encoder.{i}", f"model.encoder.layers.{i}"
        attention(f"{src}.self_attn", f"{dst}.self_attn")
        common(src, dst, {"attn_norm": "self_attn_layer_norm", "ffn_norm": "final_layer_norm"})
    for i in range(c.decoder_layers):
        src, dst = f"decoder.{i}", f"model.decoder.layers.{i}"
        attention(f"{src}.self_attn", f"{dst}.self_attn")
        attention(f"{src}.cross_attn", f"{dst}.encoder_attn")
        common(src, dst, {"attn_norm": "self_attn_layer_norm", "cross_norm": "encoder_attn_layer_norm",
                          "ffn_norm": "final_layer_norm"})
    return out
