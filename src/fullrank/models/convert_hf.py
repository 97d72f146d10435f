"""Hugging Face ``transformers`` models ↔ fullrank models: configs and tensor names.

Only configs (the dict of a ``config.json``) and tensors are exchanged: nothing here imports
``transformers`` or reads a file. A caller reads the weights with ``safetensors`` (never by
unpickling) and passes them in; :mod:`fullrank.interop.huggingface` does that for
``fullrank import`` and ``fullrank export``.

Four Hugging Face families map onto the three fullrank families:

========================  ==================================================  ======================
family                    Hugging Face classes                                fullrank model
========================  ==================================================  ======================
``bert``                  ``BertForPreTraining``, ``BertForMaskedLM``,        :class:`Encoder`
                          ``BertModel``, ``BertForSequenceClassification``,   (post-LN)
                          ``BertForQuestionAnswering``
``roberta_prelayernorm``  ``RobertaPreLayerNormForMaskedLM``, ``…Model``,     :class:`Encoder`
                          ``…ForSequenceClassification``,                     (pre-LN)
                          ``…ForQuestionAnswering``
``gpt2``                  ``GPT2LMHeadModel``, ``GPT2Model``                  :class:`DecoderLM`
``marian``                ``MarianMTModel``                                   :class:`EncoderDecoder`
========================  ==================================================  ======================

Each model's tensors are described once, as a :class:`Layout`: a list of :class:`Pair` s (one
fullrank tensor and the Hugging Face tensors it is made of), the Hugging Face tensors that hold
nothing of their own (tied copies, buffers) and the fullrank tensors a checkpoint may lack. The
one table serves both directions (:func:`state_from_hf`, :func:`state_to_hf`) and the mapping
tables of ``docs/import-export.md``. Hugging Face names are written relative to the base model
(``encoder.layer.0…``, not ``bert.encoder.layer.0…``); :attr:`Layout.prefix` is the base
model's prefix in the head classes, and a checkpoint's names are read with or without it.

Hugging Face's attention needs ``d_head = d_model / n_heads``: a fullrank model with other head
sizes (widened, or fixed heads) has no Hugging Face form, and :func:`hf_config` says so.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
from torch import Tensor, nn

from fullrank.errors import CheckpointError
from fullrank.layers.embeddings import sinusoidal_table
from fullrank.models.decoder_lm import DecoderLMConfig
from fullrank.models.encoder import EncoderConfig
from fullrank.models.encoder_decoder import EncoderDecoder, EncoderDecoderConfig

Family = Literal["bert", "roberta_prelayernorm", "gpt2", "marian"]
AnyConfig = EncoderConfig | DecoderLMConfig | EncoderDecoderConfig

# every Hugging Face class fullrank reads, and its family
ARCHITECTURES: dict[str, Family] = {
    "BertForPreTraining": "bert",
    "BertForMaskedLM": "bert",
    "BertModel": "bert",
    "BertForSequenceClassification": "bert",
    "BertForQuestionAnswering": "bert",
    "RobertaPreLayerNormForMaskedLM": "roberta_prelayernorm",
    "RobertaPreLayerNormModel": "roberta_prelayernorm",
    "RobertaPreLayerNormForSequenceClassification": "roberta_prelayernorm",
    "RobertaPreLayerNormForQuestionAnswering": "roberta_prelayernorm",
    "GPT2LMHeadModel": "gpt2",
    "GPT2Model": "gpt2",
    "MarianMTModel": "marian",
}
# config.json's model_type of each family (an architecture is looked up by it when
# "architectures" is missing)
MODEL_TYPES: dict[str, Family] = {
    "bert": "bert",
    "roberta-prelayernorm": "roberta_prelayernorm",
    "gpt2": "gpt2",
    "marian": "marian",
}
# the base model's prefix in each family's head classes
PREFIXES: dict[Family, str] = {
    "bert": "bert.",
    "roberta_prelayernorm": "roberta_prelayernorm.",
    "gpt2": "transformer.",
    "marian": "model.",
}

# fullrank activation ↔ Hugging Face's name (ACT2FN); several names read as one
_ACTIVATION_NAMES = {"relu": "relu", "gelu": "gelu", "gelu_tanh": "gelu_new", "silu": "silu"}
_ACTIVATIONS_READ = {
    "relu": "relu",
    "gelu": "gelu",
    "gelu_new": "gelu_tanh",
    "gelu_pytorch_tanh": "gelu_tanh",
    "silu": "silu",
    "swish": "silu",
}


# --------------------------------------------------------------------------------- layouts
@dataclass(frozen=True)
class Pair:
    """One fullrank tensor and the Hugging Face tensors it is made of.

    Attributes:
        ours: the fullrank name.
        theirs: the Hugging Face names; several (query, key, value) are stacked along the first
            axis into fullrank's fused projection.
        transpose: Hugging Face keeps the matrix as ``(in, out)`` (GPT-2's ``Conv1D``).
        row: Hugging Face keeps the vector as a ``(1, N)`` row (Marian's ``final_logits_bias``).
        skip: Hugging Face's table has this many leading rows that the model never reads
            (RoBERTa's positions start after the padding id): dropped on import, zeros on export.
    """

    ours: str
    theirs: tuple[str, ...]
    transpose: bool = False
    row: bool = False
    skip: int = 0


@dataclass(frozen=True)
class Layout:
    """How one Hugging Face model's tensors map onto a fullrank model's.

    Attributes:
        architecture: the Hugging Face class.
        prefix: the base model's prefix in the head classes (``"bert."``).
        base_class: ``architecture`` is the base model (``BertModel``), whose checkpoints
            write its names without the prefix.
        pairs: every tensor of the fullrank model (tied copies once), with its source.
        derived: Hugging Face names (regular expressions) that hold no weights of their own →
            why: read and dropped on import, not written on export.
        copies: the derived names that are tied copies → the Hugging Face name of the tensor
            they must equal (an import whose copy differs computes another function).
        untie: what a user can do when a tied copy differs from its source.
        mirrors: Hugging Face names that hold no weights of their own but that transformers
            would report missing → the Hugging Face tensor export writes into them.
    """

    architecture: str
    prefix: str
    base_class: bool
    pairs: tuple[Pair, ...]
    derived: dict[str, str] = field(default_factory=dict)
    copies: dict[str, str] = field(default_factory=dict)
    untie: str = "fullrank holds this model only with the two tied"
    mirrors: dict[str, str] = field(default_factory=dict)

    def why_derived(self, name: str) -> str | None:
        for pattern, why in self.derived.items():
            if re.fullmatch(pattern, name):
                return why
        return None

    def copy_of(self, name: str) -> str | None:
        """The tensor that the tied copy ``name`` must equal (``None``: not a tied copy)."""
        for pattern, source in self.copies.items():
            if re.fullmatch(pattern, name):
                return source
        return None


def _linear(ours: str, theirs: str, *, transpose: bool = False) -> list[Pair]:
    """A weight and its bias."""
    return [
        Pair(f"{ours}.weight", (f"{theirs}.weight",), transpose=transpose),
        Pair(f"{ours}.bias", (f"{theirs}.bias",)),
    ]


def _qkv(ours: str, q: str, k: str, v: str) -> list[Pair]:
    """Separate query, key and value projections → fullrank's fused ``qkv_proj``."""
    return [Pair(f"{ours}.qkv_proj.{p}", (f"{q}.{p}", f"{k}.{p}", f"{v}.{p}")) for p in ("weight", "bias")]


def bert_layout(config: EncoderConfig, architecture: str = "BertForPreTraining") -> Layout:
    """BERT's tensors: the backbone and the heads of ``config``."""
    pairs = [
        Pair("embed.token.weight", ("embeddings.word_embeddings.weight",)),
        Pair("embed.positions.weight", ("embeddings.position_embeddings.weight",)),
        Pair("embed.segments.weight", ("embeddings.token_type_embeddings.weight",)),
        *_linear("embed.norm", "embeddings.LayerNorm"),
    ]
    for i in range(config.n_layers):
        src, dst = f"encoder.layer.{i}", f"layers.{i}"
        pairs += [
            *_qkv(f"{dst}.self_attn", *(f"{src}.attention.self.{n}" for n in ("query", "key", "value"))),
            *_linear(f"{dst}.self_attn.out_proj", f"{src}.attention.output.dense"),
            *_linear(f"{dst}.attn_norm", f"{src}.attention.output.LayerNorm"),
            *_linear(f"{dst}.ffn.fc1", f"{src}.intermediate.dense"),
            *_linear(f"{dst}.ffn.fc2", f"{src}.output.dense"),
            *_linear(f"{dst}.ffn_norm", f"{src}.output.LayerNorm"),
        ]
    if config.has_pooler:
        pairs += _linear("pooler", "pooler.dense")
    derived = {r"(.*\.)?position_ids": "a buffer of the positions 0, 1, …"}
    copies: dict[str, str] = {}
    mirrors: dict[str, str] = {}
    if config.pretraining_heads:
        pairs += [
            *_linear("mlm.transform", "cls.predictions.transform.dense"),
            *_linear("mlm.norm", "cls.predictions.transform.LayerNorm"),
        ]
        pairs += _mlm_decoder(config, "cls.predictions", derived, copies, mirrors)
    if config.has_nsp_head:
        pairs += _linear("nsp", "cls.seq_relationship")
    if config.n_classes:
        pairs += _linear("classifier", "classifier")
    if config.span_head:
        pairs += _linear("span", "qa_outputs")
    base = architecture == "BertModel"
    return Layout(architecture, "bert.", base, tuple(pairs), derived, copies, _UNTIE_MLM, mirrors)


def roberta_prelayernorm_layout(
    config: EncoderConfig, architecture: str = "RobertaPreLayerNormForMaskedLM", *, pad_id: int = 1
) -> Layout:
    """RoBERTa-PreLayerNorm's tensors (a pre-LN BERT: a LayerNorm before each sublayer and one
    after the last block). Its position table starts at row ``pad_id + 1``: the rows before it
    are never read."""
    pairs = [
        Pair("embed.token.weight", ("embeddings.word_embeddings.weight",)),
        Pair("embed.positions.weight", ("embeddings.position_embeddings.weight",), skip=pad_id + 1),
        Pair("embed.segments.weight", ("embeddings.token_type_embeddings.weight",)),
        *_linear("embed.norm", "embeddings.LayerNorm"),
    ]
    for i in range(config.n_layers):
        src, dst = f"encoder.layer.{i}", f"layers.{i}"
        pairs += [
            *_linear(f"{dst}.attn_norm", f"{src}.attention.LayerNorm"),
            *_qkv(f"{dst}.self_attn", *(f"{src}.attention.self.{n}" for n in ("query", "key", "value"))),
            *_linear(f"{dst}.self_attn.out_proj", f"{src}.attention.output.dense"),
            *_linear(f"{dst}.ffn_norm", f"{src}.intermediate.LayerNorm"),
            *_linear(f"{dst}.ffn.fc1", f"{src}.intermediate.dense"),
            *_linear(f"{dst}.ffn.fc2", f"{src}.output.dense"),
        ]
    pairs += _linear("final_norm", "LayerNorm")
    derived = {r"(.*\.)?(position_ids|token_type_ids)": "a buffer of the positions 0, 1, … or of zeros"}
    copies: dict[str, str] = {}
    mirrors: dict[str, str] = {}
    if config.n_classes:  # the classification head holds the pooler: dense and tanh on <s>
        pairs += [*_linear("pooler", "classifier.dense"), *_linear("classifier", "classifier.out_proj")]
    elif config.has_pooler:
        pairs += _linear("pooler", "pooler.dense")
    if config.pretraining_heads:
        pairs += [
            *_linear("mlm.transform", "lm_head.dense"),
            *_linear("mlm.norm", "lm_head.layer_norm"),
        ]
        pairs += _mlm_decoder(config, "lm_head", derived, copies, mirrors)
    if config.span_head:
        pairs += _linear("span", "qa_outputs")
    base = architecture == "RobertaPreLayerNormModel"
    return Layout(
        architecture, "roberta_prelayernorm.", base, tuple(pairs), derived, copies, _UNTIE_MLM, mirrors
    )


_UNTIE_MLM = (
    'set "tie_word_embeddings": false in config.json to import the MLM decoder as a tensor of its own'
)


def _mlm_decoder(
    config: EncoderConfig, head: str, derived: dict[str, str], copies: dict[str, str], mirrors: dict[str, str]
) -> list[Pair]:
    """The MLM decoder and output bias of an encoder layout (``derived``, ``copies`` and
    ``mirrors`` updated). Tied, the decoder's matrix is the token embedding and its bias the head's;
    untied, transformers adds the decoder's own bias and never reads the head's, which export
    writes equal to it."""
    name = re.escape(head)
    if not config.tie_embeddings:
        derived[rf"{name}\.bias"] = (
            f"not read once the decoder is untied: transformers adds {head}.decoder.bias"
        )
        mirrors[f"{head}.bias"] = f"{head}.decoder.bias"
        return [
            Pair("mlm.decoder.weight", (f"{head}.decoder.weight",)),
            Pair("mlm.bias", (f"{head}.decoder.bias",)),
        ]
    derived[rf"{name}\.decoder\.bias"] = f"the same tensor as {head}.bias"
    derived[rf"{name}\.decoder\.weight"] = "tied to embeddings.word_embeddings.weight"
    copies[rf"{name}\.decoder\.bias"] = f"{head}.bias"
    copies[rf"{name}\.decoder\.weight"] = "embeddings.word_embeddings.weight"
    return [Pair("mlm.bias", (f"{head}.bias",))]


def gpt2_layout(config: DecoderLMConfig, architecture: str = "GPT2LMHeadModel") -> Layout:
    """GPT-2's tensors: ``Conv1D`` matrices are stored ``(in, out)``, so they are transposed."""
    pairs = [Pair("embed.token.weight", ("wte.weight",)), Pair("embed.positions.weight", ("wpe.weight",))]
    for i in range(config.n_layers):
        src, dst = f"h.{i}", f"layers.{i}"
        pairs += [
            *_linear(f"{dst}.attn_norm", f"{src}.ln_1"),
            *_linear(f"{dst}.self_attn.qkv_proj", f"{src}.attn.c_attn", transpose=True),
            *_linear(f"{dst}.self_attn.out_proj", f"{src}.attn.c_proj", transpose=True),
            *_linear(f"{dst}.ffn_norm", f"{src}.ln_2"),
            *_linear(f"{dst}.ffn.fc1", f"{src}.mlp.c_fc", transpose=True),
            *_linear(f"{dst}.ffn.fc2", f"{src}.mlp.c_proj", transpose=True),
        ]
    pairs += _linear("final_norm", "ln_f")
    derived = {r"h\.\d+\.attn\.(masked_)?bias": "a buffer of the causal mask, which fullrank builds itself"}
    copies = {}
    if config.tie_embeddings:
        derived[r"lm_head\.weight"] = "tied to wte.weight"
        copies[r"lm_head\.weight"] = "wte.weight"
    else:
        pairs.append(Pair("lm_head.weight", ("lm_head.weight",)))
    untie = 'set "tie_word_embeddings": false in config.json to import lm_head.weight as a tensor of its own'
    return Layout(
        architecture, "transformer.", architecture == "GPT2Model", tuple(pairs), derived, copies, untie
    )


def marian_layout(config: EncoderDecoderConfig) -> Layout:
    """``MarianMTModel``'s tensors: one shared embedding, separate q/k/v projections."""
    pairs = [Pair("src_embed.token.weight", ("shared.weight",))]

    def attention(dst: str, src: str) -> list[Pair]:
        return [
            *_qkv(dst, f"{src}.q_proj", f"{src}.k_proj", f"{src}.v_proj"),
            *_linear(f"{dst}.out_proj", f"{src}.out_proj"),
        ]

    for i in range(config.n_layers):
        src, dst = f"encoder.layers.{i}", f"encoder.{i}"
        pairs += [
            *attention(f"{dst}.self_attn", f"{src}.self_attn"),
            *_linear(f"{dst}.attn_norm", f"{src}.self_attn_layer_norm"),
            *_linear(f"{dst}.ffn.fc1", f"{src}.fc1"),
            *_linear(f"{dst}.ffn.fc2", f"{src}.fc2"),
            *_linear(f"{dst}.ffn_norm", f"{src}.final_layer_norm"),
        ]
    for i in range(config.decoder_layers):
        src, dst = f"decoder.layers.{i}", f"decoder.{i}"
        pairs += [
            *attention(f"{dst}.self_attn", f"{src}.self_attn"),
            *_linear(f"{dst}.attn_norm", f"{src}.self_attn_layer_norm"),
            *attention(f"{dst}.cross_attn", f"{src}.encoder_attn"),
            *_linear(f"{dst}.cross_norm", f"{src}.encoder_attn_layer_norm"),
            *_linear(f"{dst}.ffn.fc1", f"{src}.fc1"),
            *_linear(f"{dst}.ffn.fc2", f"{src}.fc2"),
            *_linear(f"{dst}.ffn_norm", f"{src}.final_layer_norm"),
        ]
    derived = {
        r"(encoder|decoder)\.embed_tokens\.weight": "tied to shared.weight",
        r"(encoder|decoder)\.embed_positions\.weight": "Marian's fixed sinusoid, which "
        "fullrank computes (positions=sinusoidal_halves)",
    }
    derived[r"lm_head\.weight"] = "tied to shared.weight"
    copies = {
        r"(encoder|decoder)\.embed_tokens\.weight": "shared.weight",
        r"lm_head\.weight": "shared.weight",
    }
    if config.output_bias:
        pairs.append(Pair("output_bias", ("final_logits_bias",), row=True))
    else:
        derived[r"final_logits_bias"] = "all zeros: the model's projection has no bias"
    return Layout("MarianMTModel", "model.", False, tuple(pairs), derived, copies)


# ----------------------------------------------------------------------------- tensors
@dataclass
class Conversion:
    """What :func:`state_from_hf` did with every tensor: mapped (fullrank name ← Hugging Face
    names) or dropped (Hugging Face name, why)."""

    mapped: list[tuple[str, tuple[str, ...]]] = field(default_factory=list)
    dropped: list[tuple[str, str]] = field(default_factory=list)


def strip_prefix(tensors: Mapping[str, Tensor], prefix: str) -> dict[str, Tensor]:
    """Hugging Face names relative to the base model: ``prefix`` (``"bert."``) removed where a
    name has it (a head class's checkpoint) — a base class's checkpoint has none."""
    return {k.removeprefix(prefix): v for k, v in tensors.items()}


def state_from_hf(
    layout: Layout,
    tensors: Mapping[str, Tensor],
    expected: Mapping[str, tuple[int, ...]],
    *,
    where: str = "the weights",
) -> tuple[dict[str, Tensor], Conversion]:
    """The fullrank state dict made of a Hugging Face checkpoint's ``tensors`` (its names with
    or without the base model's prefix), checked against ``expected`` (the fullrank model's
    state dict: names and shapes); float32. The state holds every pair's tensor.

    A tensor missing, of another shape, or that the layout has no place for is one
    :class:`CheckpointError` naming it: the config and the weights do not match. So is a tied
    copy (an output projection tied to the token embedding) that differs from its source:
    dropping it would compute another function than the checkpoint's.
    """

    def stored(name: str) -> str | None:
        """The key under which the checkpoint holds ``name``."""
        for key in (name, layout.prefix + name):
            if key in tensors:
                return key
        return None

    state: dict[str, Tensor] = {}
    report = Conversion()
    used: set[str] = set()
    for pair in layout.pairs:
        keys = [stored(n) for n in pair.theirs]
        if not all(keys):
            missing = next(n for n, k in zip(pair.theirs, keys) if k is None)
            raise CheckpointError(
                f"{where}: no tensor '{_full(layout, missing)}', which a "
                f"{layout.architecture} with this config.json has; "
                f"config.json and the weights do not match"
            )
        parts = [tensors[k].t() if pair.transpose else tensors[k] for k in keys]  # type: ignore[index]  # names, not None
        if pair.row:
            parts = [p.reshape(-1) for p in parts]
        value = torch.cat(parts) if len(parts) > 1 else parts[0]
        want = expected[pair.ours]
        if pair.skip:
            want = (want[0] + pair.skip, *want[1:])
        if tuple(value.shape) != want:
            got = " + ".join(str(tuple(tensors[k].shape)) for k in keys)  # type: ignore[index]  # names
            raise CheckpointError(
                f"{where}: '{keys[0]}' is {got} but config.json describes "
                f"{want} (fullrank '{pair.ours}'); config.json and the "
                f"weights do not match"
            )
        if pair.skip:
            report.dropped.append(
                (
                    f"{keys[0]}[:{pair.skip}]",
                    "rows the model never reads: its positions start after pad_token_id",
                )
            )
            value = value[pair.skip :]
        state[pair.ours] = value.to(torch.float32).contiguous()
        used.update(k for k in keys if k is not None)
        report.mapped.append((pair.ours, pair.theirs))
    for key in sorted(set(tensors) - used):
        why = layout.why_derived(key.removeprefix(layout.prefix))
        if why is None:
            raise CheckpointError(
                f"{where}: holds '{key}', which a {layout.architecture} with "
                f"this config.json does not have; config.json and the "
                f"weights do not match"
            )
        source = layout.copy_of(key.removeprefix(layout.prefix))
        original = stored(source) if source is not None else None
        if original is not None and not torch.equal(tensors[key], tensors[original]):
            raise CheckpointError(
                f"{where}: '{key}' differs from '{original}', to which a "
                f"{layout.architecture} with this config.json ties it; {layout.untie}"
            )
        report.dropped.append((key, why))
    return state, report


def tied_names(model: nn.Module) -> dict[str, str]:
    """``alias → first name`` for the state-dict entries of ``model`` that are one tensor (tied
    weights: BERT's MLM decoder and token embedding, Marian's three embeddings)."""
    first: dict[tuple[int, tuple[int, ...]], str] = {}
    aliases = {}
    for name, t in model.state_dict().items():
        key = (t.data_ptr(), tuple(t.shape))
        if key in first:
            aliases[name] = first[key]
        else:
            first[key] = name
    return aliases


def load_from_hf(
    model: nn.Module, layout: Layout, tensors: Mapping[str, Tensor], *, where: str = "the weights"
) -> Conversion:
    """Load a Hugging Face checkpoint's ``tensors`` into ``model``
    (:func:`state_from_hf`): every tensor of the model is set."""
    shapes = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    state, report = state_from_hf(layout, tensors, shapes, where=where)
    load_converted(model, state)
    return report


def load_converted(model: nn.Module, state: dict[str, Tensor]) -> None:
    """Load a :func:`state_from_hf` state into ``model``, its tied copies included."""
    aliases = tied_names(model)
    state.update({alias: state[kept] for alias, kept in aliases.items() if kept in state})
    model.load_state_dict(state, strict=True)


def state_to_hf(layout: Layout, state: Mapping[str, Tensor]) -> dict[str, Tensor]:
    """The Hugging Face tensors (full names, with the prefix) of a fullrank ``state`` dict:
    every pair's tensor split, transposed or reshaped back. Inverse of :func:`state_from_hf`."""
    out: dict[str, Tensor] = {}
    for pair in layout.pairs:
        value = state[pair.ours].detach()
        parts = value.chunk(len(pair.theirs)) if len(pair.theirs) > 1 else [value]
        for name, part in zip(pair.theirs, parts):
            part = part.reshape(1, -1) if pair.row else part
            if pair.skip:  # rows never read: zeros, as the padding row starts
                part = torch.cat([part.new_zeros(pair.skip, *part.shape[1:]), part])
            out[_full(layout, name)] = (part.t() if pair.transpose else part).contiguous()
    for name, source in layout.mirrors.items():
        out[_full(layout, name)] = out[_full(layout, source)].clone()
    return out


def _full(layout: Layout, name: str) -> str:
    """A Hugging Face name as the checkpoint of ``layout.architecture`` writes it: the base
    model's names with its prefix, the heads' as they are."""
    top = name.startswith(("cls.", "classifier.", "qa_outputs.", "lm_head.", "final_logits_bias"))
    return name if top or layout.base_class else layout.prefix + name


def hf_names(layout: Layout) -> list[tuple[str, str]]:
    """``(fullrank name, Hugging Face names)`` of every pair, for the mapping tables of the
    docs: layer 0 only, its index written ``{i}``; a weight and its bias on one row
    (``….{weight,bias}``)."""
    rows: list[tuple[str, str]] = []
    for pair in layout.pairs:
        if re.search(r"\.[1-9]\d*\.", pair.ours):
            continue
        how = " (transposed)" if pair.transpose else " (a (1, V) row)" if pair.row else ""
        how = " (its rows from pad_token_id + 1 on)" if pair.skip else how
        theirs = " + ".join(_full(layout, n) for n in pair.theirs)
        row = (re.sub(r"\.0\.", ".{i}.", pair.ours), re.sub(r"\.0\.", ".{i}.", theirs) + how)
        if row[0].endswith(".bias") and rows and rows[-1][0] == row[0][:-4] + "weight":
            weight = rows[-1][1].removesuffix(" (transposed)")
            if weight.replace(".weight", ".bias") == row[1]:
                note = " (the weight transposed)" if rows[-1][1] != weight else ""
                rows[-1] = (row[0][:-4] + "{weight,bias}", weight.replace(".weight", ".{weight,bias}") + note)
                continue
        rows.append(row)
    return rows


# ------------------------------------------------------------------------------ configs
def _refuse(hf: Mapping[str, Any], key: str, default: Any, allowed: Collection[Any], why: str) -> None:
    """One line when ``config.json`` sets ``key`` to a value fullrank cannot represent."""
    value = hf.get(key, default)
    if value not in allowed:
        raise CheckpointError(f"{key}={value!r} is not supported ({why})")


def _activation(hf: Mapping[str, Any], key: str, default: str) -> str:
    name = hf.get(key, default)
    if name not in _ACTIVATIONS_READ:
        raise CheckpointError(
            f"{key}={name!r} is not supported; fullrank's "
            f"feed-forward layers use {', '.join(sorted(_ACTIVATIONS_READ))}"
        )
    return _ACTIVATIONS_READ[name]


# the tensors by which an encoder checkpoint's heads are known, in each family
_HEAD_TENSORS: dict[str, dict[str, str]] = {
    "bert": {
        "mlm": "cls.predictions.bias",
        "nsp": "cls.seq_relationship.weight",
        "classifier": "classifier.weight",
        "span": "qa_outputs.weight",
        "pooler": "pooler.dense.weight",
    },
    "roberta_prelayernorm": {
        "mlm": "lm_head.bias",
        "classifier": "classifier.out_proj.weight",
        "span": "qa_outputs.weight",
        "pooler": "pooler.dense.weight",
    },
}


def position_offset(hf: Mapping[str, Any]) -> int:
    """The first row of a RoBERTa's position table that it reads: ``pad_token_id + 1`` (its
    positions are counted from the padding id)."""
    pad = hf.get("pad_token_id", 1)
    if not isinstance(pad, int) or isinstance(pad, bool) or pad < 0:
        raise CheckpointError(f"pad_token_id={pad!r} is not a token id; RoBERTa counts its positions from it")
    return pad + 1


def encoder_config_from_hf(
    hf: Mapping[str, Any], names: Collection[str] = (), *, family: Family = "bert", **overrides: Any
) -> EncoderConfig:
    """An :class:`EncoderConfig` from a Hugging Face ``BertConfig`` (post-LN) or
    ``RobertaPreLayerNormConfig`` (pre-LN) dict; ``names`` (the checkpoint's tensors,
    prefix-free) give the heads: the masked-LM head (with the next-sentence head and the pooler
    when it has them: ``BertForPreTraining``, not ``BertForMaskedLM``), a classifier, a span
    head, or the pooler alone (the base model)."""
    pre_ln = family == "roberta_prelayernorm"
    _refuse(hf, "hidden_act", "gelu", ("gelu",), "fullrank's BERT uses the exact GELU")
    _refuse(
        hf,
        "position_embedding_type",
        "absolute",
        ("absolute",),
        "fullrank's BERT has absolute learned positions",
    )
    _refuse(hf, "is_decoder", False, (False,), "fullrank's BERT is an encoder")
    _refuse(hf, "add_cross_attention", False, (False,), "fullrank's BERT has no cross-attention")
    head = _HEAD_TENSORS[family]
    heads = {
        "pretraining_heads": head["mlm"] in names,
        "next_sentence": "nsp" in head and head["nsp"] in names,
        "n_classes": 0,
        "span_head": head["span"] in names,
    }
    if head["classifier"] in names:
        heads["n_classes"] = int(hf.get("num_labels", len(hf.get("id2label") or {}) or 2))
        if heads["n_classes"] < 2:
            raise CheckpointError(
                "num_labels=1 is regression, which fullrank's "
                "classifier does not do; it needs at least 2 classes"
            )
    heads["pooler"] = head["pooler"] in names and not (heads["next_sentence"] or heads["n_classes"])
    positions = hf["max_position_embeddings"]
    if pre_ln:  # RoBERTa's positions start after the padding id
        positions -= position_offset(hf)
        if positions < 1:
            raise CheckpointError(
                f"max_position_embeddings={hf['max_position_embeddings']} leaves no "
                f"positions after pad_token_id={hf.get('pad_token_id', 1)}"
            )
    kw: dict[str, Any] = dict(
        vocab_size=hf["vocab_size"],
        d_model=hf["hidden_size"],
        n_heads=hf["num_attention_heads"],
        d_ff=hf["intermediate_size"],
        n_layers=hf["num_hidden_layers"],
        dropout=hf.get("hidden_dropout_prob", 0.1),
        attn_dropout=hf.get("attention_probs_dropout_prob", 0.1),
        norm_eps=hf.get("layer_norm_eps", 1e-12),
        norm_first=pre_ln,
        max_len=positions,
        seq_len=min(128, positions),
        type_vocab_size=hf.get("type_vocab_size", 2),
        init_std=hf.get("initializer_range", 0.02),
        tie_embeddings=bool(hf.get("tie_word_embeddings", True)),
        **heads,
    )
    kw.update(overrides)
    return EncoderConfig(**kw)


def gpt2_config_from_hf(hf: Mapping[str, Any]) -> DecoderLMConfig:
    """A :class:`DecoderLMConfig` from a Hugging Face ``GPT2Config`` dict: pre-LN with a final
    LayerNorm, learned positions, unscaled embeddings, biases."""
    _refuse(hf, "scale_attn_weights", True, (True,), "fullrank scales attention by 1/√d_head")
    _refuse(
        hf,
        "scale_attn_by_inverse_layer_idx",
        False,
        (False,),
        "fullrank scales every layer's attention alike",
    )
    _refuse(hf, "add_cross_attention", False, (False,), "a language model has no cross-attention")
    d = hf["n_embd"]
    return DecoderLMConfig(
        vocab_size=hf["vocab_size"],
        d_model=d,
        n_heads=hf["n_head"],
        d_ff=hf.get("n_inner") or 4 * d,
        n_layers=hf["n_layer"],
        activation=_activation(hf, "activation_function", "gelu_new"),  # type: ignore[arg-type]  # checked
        dropout=hf.get("resid_pdrop", 0.1),
        attn_dropout=hf.get("attn_pdrop", 0.1),
        norm_first=True,
        norm_eps=hf.get("layer_norm_epsilon", 1e-5),
        bias=True,
        positions="learned",
        max_len=hf["n_positions"],
        seq_len=hf["n_positions"],
        scale_embeddings=False,
        tie_embeddings=hf.get("tie_word_embeddings", True),
    )


def marian_config_from_hf(
    hf: Mapping[str, Any], tensors: Mapping[str, Tensor] | None = None
) -> EncoderDecoderConfig:
    """An :class:`EncoderDecoderConfig` from a Hugging Face ``MarianConfig`` dict: post-LN,
    Marian's sinusoid, one shared vocabulary; an output bias when ``tensors`` (prefix-free)
    hold a ``final_logits_bias`` that is not all zeros."""
    for ours, enc, dec in (
        ("n_heads", "encoder_attention_heads", "decoder_attention_heads"),
        ("d_ff", "encoder_ffn_dim", "decoder_ffn_dim"),
    ):
        if hf[enc] != hf[dec]:
            raise CheckpointError(
                f"{enc}={hf[enc]} and {dec}={hf[dec]} differ; "
                f"fullrank's encoder-decoder has one {ours} for both"
            )
    _refuse(
        hf,
        "share_encoder_decoder_embeddings",
        True,
        (True,),
        "fullrank imports Marian models with one shared vocabulary",
    )
    _refuse(
        hf,
        "tie_word_embeddings",
        True,
        (True,),
        "fullrank imports Marian models with one "
        "embedding shared by the encoder, the decoder and the output projection",
    )
    if hf.get("decoder_vocab_size") not in (None, hf["vocab_size"]):
        raise CheckpointError(
            f"decoder_vocab_size={hf['decoder_vocab_size']} is "
            f"not vocab_size={hf['vocab_size']}; fullrank imports Marian "
            f"models with one shared vocabulary"
        )
    bias = (tensors or {}).get("final_logits_bias")
    max_len = hf.get("max_position_embeddings", 1024)
    return EncoderDecoderConfig(
        vocab_size=hf["vocab_size"],
        d_model=hf["d_model"],
        n_heads=hf["encoder_attention_heads"],
        d_ff=hf["encoder_ffn_dim"],
        n_layers=hf["encoder_layers"],
        n_decoder_layers=hf["decoder_layers"],
        activation=_activation(hf, "activation_function", "gelu"),  # type: ignore[arg-type]  # checked
        dropout=hf.get("dropout", 0.1),
        attn_dropout=hf.get("attention_dropout", 0.0),
        ffn_dropout=hf.get("activation_dropout", 0.0),
        norm_first=False,
        norm_eps=1e-5,
        bias=True,
        positions="sinusoidal_halves",
        max_len=max_len,
        seq_len=min(256, max_len),
        scale_embeddings=hf.get("scale_embedding", False),
        tie_embeddings=True,
        output_bias=bias is not None and bool(bias.any()),
    )


def check_marian_positions(tensors: Mapping[str, Tensor], config: EncoderDecoderConfig, where: str) -> None:
    """A stored position table (older Marian checkpoints keep one) must be Marian's sinusoid,
    which fullrank computes: anything else is one line."""
    want = sinusoidal_table(config.max_len, config.d_model, halves=True)
    for side in ("encoder", "decoder"):
        table = tensors.get(f"{side}.embed_positions.weight")
        if table is not None and (
            table.shape != want.shape or not torch.allclose(table.float(), want, atol=1e-5)
        ):
            raise CheckpointError(
                f"{where}: model.{side}.embed_positions.weight is not Marian's "
                f"sinusoid of {config.max_len} positions; fullrank computes "
                f"that table and cannot hold another"
            )


def hf_architecture(config: EncoderConfig | DecoderLMConfig | EncoderDecoderConfig) -> str:
    """The Hugging Face class that holds a model of ``config`` with all its tensors."""
    if isinstance(config, DecoderLMConfig):
        return "GPT2LMHeadModel"
    if isinstance(config, EncoderDecoderConfig):
        return "MarianMTModel"
    if config.norm_first:  # a pre-LN BERT
        family = "RobertaPreLayerNorm"
        mlm = f"{family}ForMaskedLM"
        _require(not config.has_nsp_head, "next_sentence=True", "it has no next-sentence head", mlm)
    else:
        family = "Bert"
        mlm = "BertForPreTraining" if config.next_sentence else "BertForMaskedLM"
    heads = [
        name
        for name, on in (
            (mlm, config.pretraining_heads),
            (f"{family}ForSequenceClassification", config.n_classes > 0),
            (f"{family}ForQuestionAnswering", config.span_head),
        )
        if on
    ]
    if len(heads) > 1:
        raise CheckpointError(
            f"the encoder has several heads ({', '.join(heads)}); each Hugging Face class holds one"
        )
    if not heads and not config.has_pooler:
        raise CheckpointError(
            f"the encoder has no head and no pooler; Hugging Face's {family}Model "
            "has a pooler, which transformers would draw at random"
        )
    return heads[0] if heads else f"{family}Model"


def hf_form(config: AnyConfig, state: Mapping[str, Tensor]) -> tuple[AnyConfig, dict[str, Tensor]]:
    """An encoder's config and state in the form Hugging Face holds, computing the same
    function: a fixed sinusoid becomes learned positions holding its values, and the token
    embedding's ``√D`` scale moves into its weights (an MLM decoder tied to that embedding then
    keeps the unscaled matrix as a tensor of its own). Other models come back as they are."""
    if not isinstance(config, EncoderConfig):
        return config, dict(state)
    out, changes = dict(state), dict[str, Any]()  # the fields that change, of several types
    if config.positions != "learned":
        halves = config.positions == "sinusoidal_halves"
        out["embed.positions.weight"] = sinusoidal_table(config.max_len, config.d_model, halves=halves)
        changes["positions"] = "learned"
        if config.attn_init == "local":  # a start shaped by the sinusoid; the weights stay as they are
            changes["attn_init"] = "normal"
    if config.scale_embeddings:
        token = out["embed.token.weight"]
        if config.pretraining_heads and config.tie_embeddings:
            out.pop("mlm.embedding.weight", None)
            out["mlm.decoder.weight"] = token
            changes["tie_embeddings"] = False
        out["embed.token.weight"] = token * math.sqrt(config.d_model)
        changes["scale_embeddings"] = False
    return dataclasses.replace(config, **changes), out


def _require(ok: bool, setting: str, why: str, architecture: str) -> None:
    if not ok:
        raise CheckpointError(f"{setting}: {architecture} cannot hold it ({why})")


def hf_config(
    config: EncoderConfig | DecoderLMConfig | EncoderDecoderConfig,
    *,
    pad_id: int,
    bos_id: int,
    eos_id: int,
    labels: list[str] | None = None,
) -> dict[str, Any]:
    """The ``config.json`` of the Hugging Face model (:func:`hf_architecture`) that computes
    what a model of ``config`` computes; special ids from its tokenizer, class names of a
    classifier from ``labels``. A setting Hugging Face cannot hold is one
    :class:`CheckpointError` line naming it and why."""
    arch = hf_architecture(config)
    dh, dv = config.head_sizes
    std = config.d_model // config.n_heads
    _require(
        config.standard_rule and dh == dv,
        f"d_head={dh}, d_value={dv} with d_model={config.d_model} and n_heads={config.n_heads}",
        f"its heads are d_model / n_heads = {std} wide; widened or fixed-size heads have "
        f"no Hugging Face form",
        arch,
    )
    _require(config.bias, "bias=False", "its projections have biases", arch)
    _require(
        config.tie_embeddings or not isinstance(config, EncoderDecoderConfig),
        "tie_embeddings=False",
        "its output projection is the token embedding",
        arch,
    )
    act = _ACTIVATION_NAMES[config.activation]
    if isinstance(config, EncoderConfig):
        fold = "hf_form gives the same function with learned positions and unscaled embeddings"
        _require(config.positions == "learned", f"positions={config.positions}", fold, arch)
        _require(not config.scale_embeddings, "scale_embeddings=True", fold, arch)
        _require(
            config.activation == "gelu",
            f"activation={config.activation}",
            "fullrank's BERT heads use the exact GELU",
            arch,
        )
        pre_ln = config.norm_first
        out: dict[str, Any] = dict(
            model_type="roberta-prelayernorm" if pre_ln else "bert",
            vocab_size=config.vocab_size,
            hidden_size=config.d_model,
            num_hidden_layers=config.n_layers,
            num_attention_heads=config.n_heads,
            intermediate_size=config.d_ff,
            hidden_act="gelu",
            hidden_dropout_prob=config.dropout,
            attention_probs_dropout_prob=config.attn_dropout,
            # RoBERTa's positions start after the padding id
            max_position_embeddings=config.max_len + (pad_id + 1 if pre_ln else 0),
            type_vocab_size=config.type_vocab_size,
            initializer_range=config.init_std,
            layer_norm_eps=config.norm_eps,
            pad_token_id=pad_id,
            tie_word_embeddings=config.tie_embeddings,
        )
        if pre_ln:
            out.update(bos_token_id=bos_id, eos_token_id=eos_id)
        if config.n_classes:
            names = labels or [f"LABEL_{i}" for i in range(config.n_classes)]
            out["id2label"] = {str(i): n for i, n in enumerate(names)}
            out["label2id"] = {n: i for i, n in enumerate(names)}
    elif isinstance(config, DecoderLMConfig):
        _require(config.norm_first, "norm_first=False", "GPT-2's blocks are pre-LN", arch)
        _require(
            config.positions == "learned",
            f"positions={config.positions}",
            "GPT-2's positions are learned",
            arch,
        )
        _require(
            not config.scale_embeddings, "scale_embeddings=True", "GPT-2's embeddings are not scaled", arch
        )
        out = dict(
            model_type="gpt2",
            vocab_size=config.vocab_size,
            n_positions=config.max_len,
            n_embd=config.d_model,
            n_layer=config.n_layers,
            n_head=config.n_heads,
            n_inner=config.d_ff,
            activation_function=act,
            resid_pdrop=config.dropout,
            embd_pdrop=config.dropout,
            attn_pdrop=config.attn_dropout,
            layer_norm_epsilon=config.norm_eps,
            bos_token_id=bos_id,
            eos_token_id=eos_id,
            tie_word_embeddings=config.tie_embeddings,
        )
    else:
        _require(not config.norm_first, "norm_first=True", "Marian's blocks are post-LN", arch)
        _require(
            config.positions == "sinusoidal_halves",
            f"positions={config.positions}",
            "transformers computes Marian's own sinusoid on loading, sines then cosines "
            "(positions=sinusoidal_halves)",
            arch,
        )
        _require(
            config.shared_vocab,
            f"src_vocab_size={config.src_vocab_size}",
            "Marian models share one vocabulary here",
            arch,
        )
        _require(not config.decoder_cursor, "decoder_cursor=True", "Marian's decoder reads no cursor", arch)
        out = dict(
            model_type="marian",
            vocab_size=config.vocab_size,
            decoder_vocab_size=config.vocab_size,
            d_model=config.d_model,
            encoder_layers=config.n_layers,
            decoder_layers=config.decoder_layers,
            encoder_attention_heads=config.n_heads,
            decoder_attention_heads=config.n_heads,
            encoder_ffn_dim=config.d_ff,
            decoder_ffn_dim=config.d_ff,
            activation_function=act,
            dropout=config.dropout,
            attention_dropout=config.attn_dropout,
            activation_dropout=config.ffn_dropout,
            max_position_embeddings=config.max_len,
            scale_embedding=config.scale_embeddings,
            share_encoder_decoder_embeddings=True,
            is_encoder_decoder=True,
            pad_token_id=pad_id,
            eos_token_id=eos_id,
            forced_eos_token_id=eos_id,
            decoder_start_token_id=bos_id,
        )
    return {"architectures": [arch], **out}


def layout_of(
    config: EncoderConfig | DecoderLMConfig | EncoderDecoderConfig,
    architecture: str | None = None,
    *,
    pad_id: int = 1,
) -> Layout:
    """The :class:`Layout` of a model of ``config`` as ``architecture`` (default: the class
    :func:`hf_architecture` exports to); ``pad_id``: the padding id after which a pre-LN
    encoder's (RoBERTa's) positions start."""
    arch = architecture or hf_architecture(config)
    if isinstance(config, EncoderConfig):
        if config.norm_first:
            return roberta_prelayernorm_layout(config, arch, pad_id=pad_id)
        return bert_layout(config, arch)
    if isinstance(config, DecoderLMConfig):
        return gpt2_layout(config, arch)
    return marian_layout(config)


# ------------------------------------------------------- in-memory Marian (benchmarks)
def marian_config_kwargs(
    config: EncoderDecoderConfig, *, pad_id: int, bos_id: int, eos_id: int
) -> dict[str, Any]:
    """``MarianConfig`` arguments for a ``MarianMTModel`` that computes what ``config``'s
    model computes once :func:`marian_state_dict` is loaded into it (``load_state_dict``, which
    keeps the position tables given): [V17]'s interleaved sinusoid is accepted here, unlike in
    :func:`hf_config`, since the table travels with the weights."""
    if config.positions == "sinusoidal":
        config = dataclasses.replace(config, positions="sinusoidal_halves")
    cfg = hf_config(config, pad_id=pad_id, bos_id=bos_id, eos_id=eos_id)
    for key in ("architectures", "model_type", "is_encoder_decoder"):
        cfg.pop(key)
    return {
        **cfg,
        "dropout": 0.0,
        "attention_dropout": 0.0,
        "activation_dropout": 0.0,
        "forced_eos_token_id": None,
    }


def marian_state_dict(model: EncoderDecoder) -> dict[str, Tensor]:
    """The ``MarianMTModel`` state dict computing the same function as ``model``, tied copies
    and position tables included (for ``load_state_dict``): the table is the model's own, so
    [V17]'s interleaved sinusoid works too."""
    c = model.config
    state = model.state_dict()
    out = state_to_hf(marian_layout(c), state)
    emb = out["model.shared.weight"]
    table = sinusoidal_table(c.max_len, c.d_model, halves=c.positions == "sinusoidal_halves")
    out.update(
        {
            "model.encoder.embed_tokens.weight": emb,
            "model.decoder.embed_tokens.weight": emb,
            "model.encoder.embed_positions.weight": table,
            "model.decoder.embed_positions.weight": table,
        }
    )
    out.setdefault("lm_head.weight", emb)
    out.setdefault("final_logits_bias", torch.zeros(1, c.vocab_size))
    return out
