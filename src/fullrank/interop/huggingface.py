"""``fullrank import`` and ``fullrank export``: a local Hugging Face model directory ↔ a fullrank
checkpoint.

**Import** reads ``config.json``, the weights — ``model.safetensors``, or the shards that
``model.safetensors.index.json`` names — with ``safetensors`` alone (a directory holding only a
pickle, ``pytorch_model.bin``, is refused: fullrank never unpickles a file), and the tokenizer
(:mod:`fullrank.data.hf_tokenizer`). Every tensor is accounted for
(:mod:`fullrank.models.convert_hf`): mapped onto the fullrank model, or dropped with the
reason (tied copies, buffers); the model has no tensor that the checkpoint does not give. The
checkpoint is written by the atomic checkpoint writer, with its tokenizer and the
task its heads serve, so ``heads``, ``widen``, ``train.init_from``, ``classify``, ``answer``,
``generate`` and ``translate`` take it as they take a checkpoint of their own. Nothing is
downloaded.

**Export** writes ``config.json``, ``model.safetensors``, ``tokenizer.json`` and
``tokenizer_config.json``, which ``transformers``' ``from_pretrained`` loads with no custom
code, into a new directory, atomically. A model Hugging Face cannot hold — heads that are not
``d_model / n_heads`` wide (a widened model), or any other setting of :func:`hf_config`'s
list — is refused with one line naming the setting.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file
from torch import Tensor

from fullrank.data.hf_tokenizer import hf_tokenizer_files, read_hf_tokenizer
from fullrank.data.tokenizers import Tokenizer
from fullrank.errors import CheckpointError, ConfigError
from fullrank.models import (
    DecoderLMConfig,
    EncoderConfig,
    EncoderDecoderConfig,
    ModelConfig,
    build_model,
    family_of,
)
from fullrank.models.convert_hf import (
    ARCHITECTURES,
    MODEL_TYPES,
    PREFIXES,
    Conversion,
    Family,
    check_marian_positions,
    encoder_config_from_hf,
    gpt2_config_from_hf,
    hf_architecture,
    hf_config,
    hf_form,
    layout_of,
    load_converted,
    marian_config_from_hf,
    position_offset,
    state_from_hf,
    state_to_hf,
    strip_prefix,
    tied_names,
)
from fullrank.paths import check_output_dir
from fullrank.training.checkpoints import (
    checkpoint_files,
    install_directory,
    is_checkpoint_dir,
    load_checkpoint,
    model_shapes,
    read_safetensors,
    temporary_directory,
    write_checkpoint,
)
from fullrank.training.integrity import read_json

CONFIG, WEIGHTS, WEIGHTS_INDEX = "config.json", "model.safetensors", "model.safetensors.index.json"
PICKLES = ("pytorch_model.bin", "pytorch_model.bin.index.json")
# the class a pickle-only directory is converted with when config.json names none
_PICKLE_CLASS = {"roberta_prelayernorm": "RobertaPreLayerNormForMaskedLM"}
# the head class each family's config.json defaults to when it names no architecture
DEFAULT_ARCHITECTURE = {"gpt2": "GPT2LMHeadModel", "marian": "MarianMTModel"}
_RESAVE = "re-save the model with transformers' save_pretrained"
# the files a model's and its tokenizer's save_pretrained write: `export --overwrite` replaces a
# Hugging Face model directory holding these alone
HF_FILES = re.compile(
    r"(generation_)?config\.json|model(-\d+-of-\d+)?\.safetensors|model\.safetensors\.index\.json"
    r"|tokenizer(_config)?\.json|special_tokens_map\.json|added_tokens\.json|vocab\.(txt|json)"
    r"|merges\.txt|(source|target)\.spm|chat_template\.jinja"
)


# ---------------------------------------------------------------------------------- import
@dataclass
class Imported:
    """What :func:`import_hf` read and wrote."""

    path: Path
    architecture: str
    config: ModelConfig
    task: str | None
    conversion: Conversion
    tokenizer: str
    converted_from: str | None  # the stored dtype, when it was not float32
    note: str | None = None  # why an encoder has no task

    def lines(self) -> list[str]:
        """The report: what was read, then every tensor mapped and dropped (one line each),
        then where it went."""
        c, conv = self.config, self.conversion
        dh = c.head_sizes[0]
        dtype = f"; stored as {self.converted_from}, now float32" if self.converted_from else ""
        dropped = _grouped(conv.dropped)
        source = sum(len(theirs) for _, theirs in conv.mapped)
        layers = (
            f"{c.n_layers} + {c.decoder_layers} layers"
            if isinstance(c, EncoderDecoderConfig)
            else f"{c.n_layers} layers"
        )
        return [
            f"{self.architecture}: {layers}, d_model {c.d_model}, {c.n_heads} "
            f"heads of d_head {dh}, vocabulary {c.vocab_size} (tokenizer from "
            f"{self.tokenizer}){dtype}",
            f"mapped {source} tensors onto {len(conv.mapped)} of fullrank's {family_of(c)} model",
            f"dropped ({len(conv.dropped)}): {dropped}",
            f"checkpoint: {self.path} (task {self.task or 'none'})",
            *([self.note] if self.note else []),
        ]


def _grouped(items: list[tuple[str, str]]) -> str:
    """``a, b (why); c (other why)``: names that share a reason, then the reason."""
    reasons: dict[str, list[str]] = {}
    for name, why in items:
        reasons.setdefault(why, []).append(name)
    return "; ".join(f"{', '.join(names)} ({why})" for why, names in reasons.items()) or "none"


def _config_json(source: Path) -> dict[str, Any]:
    if not source.is_dir():
        what = "is a file" if source.exists() else "no such directory"
        raise ConfigError(
            f"{source}: {what}; name the directory that save_pretrained wrote "
            f"(config.json, model.safetensors, tokenizer files)"
        )
    path = source / CONFIG
    if not path.is_file():
        raise CheckpointError(
            f"{source}: not a Hugging Face model directory (no {CONFIG}); name "
            f"the directory that save_pretrained wrote"
        )
    hf = read_json(path, _RESAVE)
    if not isinstance(hf, dict):
        raise CheckpointError(f"{path}: holds a JSON {type(hf).__name__}, not a model config; {_RESAVE}")
    return hf


def architecture_of(hf: dict[str, Any], where: Path) -> tuple[str | None, Family]:
    """The architecture ``config.json`` names and its family; a BERT config that names none is
    read by its tensors (``None``)."""
    named = hf.get("architectures") or []
    supported = ", ".join(ARCHITECTURES)
    if named:
        if named[0] not in ARCHITECTURES:
            raise CheckpointError(
                f"{where}: architecture {named[0]} is not supported; fullrank imports {supported}"
            )
        return named[0], ARCHITECTURES[named[0]]
    family = MODEL_TYPES.get(hf.get("model_type", ""))
    if family is None:
        raise CheckpointError(
            f"{where}: model_type {hf.get('model_type')!r} is not supported; fullrank imports {supported}"
        )
    return DEFAULT_ARCHITECTURE.get(family), family


def read_weights(source: Path, architecture: str) -> tuple[dict[str, Tensor], Path]:
    """Every tensor of the directory's safetensors weights (one file or an index of shards) and
    the file named in messages; a pickle-only directory is refused."""
    fix = f"{_RESAVE} (or download it again)"
    single, index = source / WEIGHTS, source / WEIGHTS_INDEX
    if single.is_file():
        return read_safetensors(single, fix=fix)[0], single
    if index.is_file():
        listing = read_json(index, _RESAVE)
        weight_map = listing.get("weight_map") if isinstance(listing, dict) else None
        if not isinstance(weight_map, dict):
            raise CheckpointError(f"{index}: has no 'weight_map'; {_RESAVE}")
        tensors: dict[str, Tensor] = {}
        for shard in sorted(set(map(str, weight_map.values()))):
            path = source / shard
            if Path(shard).name != shard:
                raise CheckpointError(f"{index}: names the shard {shard!r} outside the directory; {_RESAVE}")
            tensors.update(read_safetensors(path, fix=fix)[0])
        missing = [n for n in weight_map if n not in tensors]
        if missing:
            raise CheckpointError(f"{index}: names '{missing[0]}', which no shard holds; {fix}")
        return tensors, index
    pickles = [p for p in PICKLES if (source / p).is_file()]
    if pickles:
        raise CheckpointError(
            f"{source}: holds only {pickles[0]}, a pickle, which fullrank never loads; convert "
            f'it to safetensors first, where you trust the file: python -c "import transformers; '
            f"transformers.{architecture}.from_pretrained('{source}').save_pretrained('{source}')\""
        )
    raise CheckpointError(f"{source}: no {WEIGHTS} (nor {WEIGHTS_INDEX}); {_RESAVE}")


def _check_special_ids(hf: dict[str, Any], tok: Tokenizer, family: Family, where: Path) -> None:
    """The ids a Marian model starts and ends its outputs with must be the tokenizer's; a
    RoBERTa's padding id, after which its positions start, too."""
    if family == "roberta_prelayernorm" and hf.get("pad_token_id", 1) != tok.pad_id:
        raise CheckpointError(
            f"{where}: pad_token_id={hf.get('pad_token_id', 1)} but the tokenizer's padding "
            f"token is id {tok.pad_id}; give the tokenizer saved with this model"
        )
    if family != "marian":
        return
    for key, ours, role in (
        ("decoder_start_token_id", tok.bos_id, "the decoder's first token"),
        ("eos_token_id", tok.eos_id, "</s>"),
        ("pad_token_id", tok.pad_id, "<pad>"),
    ):
        if hf.get(key) is not None and hf[key] != ours:
            raise CheckpointError(
                f"{where}: {key}={hf[key]} but the tokenizer's {role} is id "
                f"{ours}; give the tokenizer saved with this model"
            )


def _task_and_meta(
    config: ModelConfig, hf: dict[str, Any], tok: Tokenizer
) -> tuple[str | None, dict[str, Any]]:
    """The task a model's heads serve, and what its commands read from the meta (a
    classifier's class names); none for an encoder whose tokenizer has no [CLS], [SEP] and
    [MASK], with which fullrank's BERT tasks frame their inputs."""
    if isinstance(config, DecoderLMConfig):
        return "lm", {}
    if isinstance(config, EncoderDecoderConfig):
        return "mt", {}
    if tok.mask_id is None:
        return None, {}
    if config.n_classes:
        id2label = hf.get("id2label") or {}
        labels = [str(id2label.get(str(i), id2label.get(i, f"LABEL_{i}"))) for i in range(config.n_classes)]
        return "classify", {"labels": labels}
    if config.span_head:
        return "squad", {}
    return ("bert" if config.pretraining_heads else None), {}


def import_hf(
    source: str | Path,
    output: str | Path,
    *,
    overwrite: bool = False,
    tokenizer_file: str | Path | None = None,
) -> Imported:
    """Read the Hugging Face model directory ``source`` and write it as the fullrank checkpoint
    ``output`` (module docstring); ``tokenizer_file``: a ``tokenizer.json`` to use instead of
    the directory's tokenizer files."""
    source = Path(source)
    hf = _config_json(source)
    check_output_dir(
        output,
        option="-o",
        overwrite=overwrite,
        inputs=[source, *([tokenizer_file] if tokenizer_file else [])],
        within=[source],
        replaceable=is_checkpoint_dir,
        own=checkpoint_files,
        kind="a fullrank checkpoint",
    )
    named, family = architecture_of(hf, source / CONFIG)
    raw, weights = read_weights(source, named or _PICKLE_CLASS.get(family, "BertForPreTraining"))
    names = set(strip_prefix(raw, PREFIXES[family]))
    try:
        if family in ("bert", "roberta_prelayernorm"):
            config: ModelConfig = encoder_config_from_hf(hf, names, family=family)
        elif family == "gpt2":
            config = gpt2_config_from_hf(hf)
        else:
            config = marian_config_from_hf(hf, raw)
    except KeyError as e:
        raise CheckpointError(
            f"{source / CONFIG}: has no {e.args[0]!r}, which a {family} config needs; {_RESAVE}"
        ) from None
    except (ConfigError, CheckpointError) as e:
        raise CheckpointError(f"{source / CONFIG}: {e}") from None
    if isinstance(config, EncoderDecoderConfig):
        check_marian_positions(strip_prefix(raw, PREFIXES[family]), config, str(weights))
    architecture = named or hf_architecture(config)  # a BERT's by its heads
    tok, tok_source = read_hf_tokenizer(
        source, tokenizer_file=Path(tokenizer_file) if tokenizer_file else None
    )
    # every name and shape against config.json first, on a model that takes no memory, so that a
    # config.json that is wrong is named as such and a vocab_size of 10¹² is not an allocation
    pad_id = position_offset(hf) - 1 if family == "roberta_prelayernorm" else 0
    layout = layout_of(config, architecture, pad_id=pad_id)
    state, conversion = state_from_hf(layout, raw, model_shapes(config), where=str(weights))
    if tok.vocab_size != config.vocab_size:
        raise CheckpointError(
            f"{source}: the tokenizer ({tok_source}) has {tok.vocab_size} "
            f"tokens but the model's vocabulary is {config.vocab_size}; give "
            f"the tokenizer saved with this model"
        )
    _check_special_ids(hf, tok, family, source / CONFIG)
    model = build_model(config)
    load_converted(model, state)
    dtypes = {str(t.dtype).removeprefix("torch.") for t in raw.values() if t.is_floating_point()}
    task, extra = _task_and_meta(config, hf, tok)
    meta = {
        "task": task,
        **extra,
        "imported_from": {"directory": str(source.resolve()), "architecture": architecture, "config": hf},
    }
    path = write_checkpoint(Path(output), model, config, tok, meta, replace=overwrite)
    converted = ", ".join(sorted(dtypes - {"float32"})) or None
    note = None
    if isinstance(config, EncoderConfig) and task is None and tok.mask_id is None:
        note = (
            f"no task: its {tok.kind} tokenizer has no [CLS], [SEP] and [MASK], with which "
            f"fullrank's BERT tasks frame their inputs; heads, widen and export take it"
        )
    return Imported(path, architecture, config, task, conversion, tok_source, converted, note)


# ---------------------------------------------------------------------------------- export
@dataclass
class Exported:
    """What :func:`export_hf` wrote."""

    path: Path
    architecture: str
    n_tensors: int

    def lines(self) -> list[str]:
        return [
            f"{self.architecture}: {self.n_tensors} tensors in {WEIGHTS}, with {CONFIG}, "
            f"tokenizer.json and tokenizer_config.json",
            f"written to {self.path}; load it with transformers.{self.architecture}"
            f".from_pretrained and transformers.AutoTokenizer.from_pretrained",
        ]


def hf_model_files(path: Path) -> set[str]:
    """The entries of ``path`` that a Hugging Face model and tokenizer's ``save_pretrained``
    writes (:data:`HF_FILES`)."""
    return {p.name for p in path.iterdir() if p.is_file() and HF_FILES.fullmatch(p.name)}


def is_hf_model_dir(path: Path) -> bool:
    """Whether ``path`` holds a Hugging Face model (``config.json`` and safetensors weights)."""
    return (path / CONFIG).is_file() and ((path / WEIGHTS).is_file() or (path / WEIGHTS_INDEX).is_file())


def export_hf(checkpoint: str | Path, output: str | Path, *, overwrite: bool = False) -> Exported:
    """Write the fullrank checkpoint ``checkpoint`` as the Hugging Face model directory
    ``output`` (module docstring)."""
    ckpt = load_checkpoint(checkpoint)
    out = check_output_dir(
        output,
        option="-o",
        overwrite=overwrite,
        inputs=[checkpoint, ckpt.path],
        within=[ckpt.path],
        replaceable=is_hf_model_dir,
        own=hf_model_files,
        kind="a Hugging Face model directory",
    )
    tok = ckpt.tokenizer
    if tok is None:
        raise CheckpointError(
            f"{ckpt.path}: no tokenizer.json; a Hugging Face model directory needs the model's tokenizer"
        )
    config, state = hf_form(ckpt.config, ckpt.model.state_dict())
    try:
        hf = hf_config(
            config, pad_id=tok.pad_id, bos_id=tok.bos_id, eos_id=tok.eos_id, labels=ckpt.meta.get("labels")
        )
    except CheckpointError as e:
        raise CheckpointError(f"{ckpt.path}: {e}") from None
    family = MODEL_TYPES[hf["model_type"]]
    if family in ("bert", "roberta_prelayernorm") and tok.mask_id is None:
        raise CheckpointError(
            f"{ckpt.path}: the tokenizer is {tok.kind}, not wordpiece; BERT's "
            f"tokenizer has [CLS], [SEP] and [MASK]"
        )
    layout = layout_of(config, pad_id=tok.pad_id)
    model = build_model(config)
    model.load_state_dict(state)  # the form Hugging Face holds: the same names as its layout
    placed = {p.ours for p in layout.pairs} | set(tied_names(model))
    unplaced = [n for n in state if n not in placed]
    if unplaced:
        raise CheckpointError(f"{ckpt.path}: tensor '{unplaced[0]}' has no place in {hf['architectures'][0]}")
    tensors = state_to_hf(layout, state)
    if family == "marian" and "final_logits_bias" not in tensors:
        tensors["final_logits_bias"] = torch.zeros(1, config.vocab_size)  # what save_pretrained writes
    files = {
        CONFIG: json.dumps({**hf, "dtype": "float32"}, indent=2) + "\n",
        # a pre-LN BERT's tokenizer frames its inputs as BERT's does
        **hf_tokenizer_files(
            tok, "bert" if family == "roberta_prelayernorm" else family, max_len=config.max_len
        ),
    }
    tmp = temporary_directory(out.resolve())
    save_file(
        {k: v.to(torch.float32).contiguous() for k, v in tensors.items()},
        str(tmp / WEIGHTS),
        metadata={"format": "pt"},
    )
    for name, text in files.items():
        (tmp / name).write_text(text, encoding="utf-8")
    install_directory(tmp, out.resolve())
    return Exported(out, hf["architectures"][0], len(tensors))
