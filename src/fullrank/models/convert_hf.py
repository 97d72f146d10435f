"""State-dict mappings from Hugging Face ``transformers`` checkpoints to fullrank models.

Only tensors are exchanged: no ``transformers`` import is needed here. A user loads the Hugging
Face weights with ``safetensors`` (never by unpickling) and passes the dict.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor

from fullrank.errors import CheckpointError
from fullrank.models.encoder import EncoderConfig


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


def bert_state_dict_from_hf(hf: Mapping[str, Tensor], n_layers: int) -> dict[str, Tensor]:
    """Map a ``BertForPreTraining`` (or ``BertModel``, prefix-free) state dict to :class:`Encoder`.

    Query, key and value weights are concatenated into the fused ``qkv_proj``.
    """
    prefix = "bert." if any(k.startswith("bert.") for k in hf) else ""

    def get(name: str) -> Tensor:
        key = prefix + name if not name.startswith("cls.") else name
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
    if "cls.seq_relationship.weight" in hf:
        for p in ("weight", "bias"):
            out[f"pooler.{p}"] = get(f"pooler.dense.{p}")
            out[f"mlm.transform.{p}"] = get(f"cls.predictions.transform.dense.{p}")
            out[f"mlm.norm.{p}"] = get(f"cls.predictions.transform.LayerNorm.{p}")
            out[f"nsp.{p}"] = get(f"cls.seq_relationship.{p}")
        out["mlm.bias"] = get("cls.predictions.bias")
        out["mlm.embedding.weight"] = out["embed.token.weight"]
    return out
