"""``train.init_from``: start a run from another checkpoint's weights (fine-tuning, or training
on after ``fullrank widen``), with a fresh optimiser and schedule.

The new run's model is the checkpoint's model config with the fields the experiment's ``model``
section states on top, and the heads its task needs; its tokenizer is the checkpoint's. Weights
are copied by name: every tensor of the backbone must be there with the same shape (else the
one-line "another architecture" error); head tensors (``Encoder.head_modules``) the checkpoint
lacks are new, head tensors the model lacks are dropped, and both are listed. The checkpoint
is verified first, as every command that loads one verifies it (checksums, its task's metadata,
finite weights, the tokenizer against the model).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from fullrank.data.tokenizers import Tokenizer
from fullrank.errors import CheckpointError, FullrankError
from fullrank.models import EncoderConfig, ModelConfig, build_model, config_from_dict, family_of
from fullrank.recipes.config import TASK_MODELS, BaseExperiment, build_model_config
from fullrank.training.checkpoints import (
    TOKENIZER_FILE,
    check_bert_tokenizer,
    check_readable,
    read_meta,
    read_safetensors,
    resolve,
    verified_tokenizer,
    verified_weights,
    weight_aliases,
)


@dataclass
class Start:
    """Where an ``init_from`` run starts: the checkpoint, its model config and tokenizer."""

    path: Path
    config: ModelConfig
    tokenizer: Tokenizer
    step: int | None


@dataclass
class LoadReport:
    """Tensors loaded, added (new, initialised at random) and dropped from the checkpoint."""

    loaded: list[str] = field(default_factory=list)
    new: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)

    def lines(self, start: Start) -> list[str]:
        where = f"{start.path}" + (f" (step {start.step})" if start.step is not None else "")
        return [
            f"init_from {where}: {len(self.loaded)} tensors loaded",
            f"  new tensors ({len(self.new)}): {_names(self.new)}",
            f"  dropped tensors ({len(self.dropped)}): {_names(self.dropped)}",
        ]


def _names(names: list[str]) -> str:
    return ", ".join(names) if names else "none"


def find_start(exp: BaseExperiment) -> Start | None:
    """The ``train.init_from`` checkpoint of ``exp`` (``None`` without one); its family must be
    the one the task trains."""
    if not exp.train.init_from:
        return None
    try:  # what every command that loads a checkpoint checks: checksums, metadata, finite weights
        path = resolve(exp.train.init_from)
        check_readable(path)
    except FullrankError as e:
        raise CheckpointError(f"train.init_from: {e}") from None
    meta = read_meta(path)
    config = config_from_dict(meta["model"])
    want = TASK_MODELS[exp.task]
    if type(config) is not want:
        raise CheckpointError(
            f"train.init_from: {path} holds a {family_of(config)} model "
            f"({type(config).__name__}), but task '{exp.task}' trains a "
            f"{want.__name__}; start from a checkpoint of that family"
        )
    if not (path / TOKENIZER_FILE).is_file():
        raise CheckpointError(
            f"train.init_from: {path} has no {TOKENIZER_FILE}; the new run "
            f"needs the tokenizer the weights were trained with"
        )
    tok = Tokenizer.load(verified_tokenizer(path))
    if isinstance(config, EncoderConfig):
        check_bert_tokenizer(tok, exp.task, f"train.init_from: {path}")
    return Start(path, config, tok, meta.get("step"))


def start_config(exp: BaseExperiment, start: Start | None, vocab_size: int, **fields: Any) -> ModelConfig:
    """The run's model config: the checkpoint's (when there is one) with the ``model`` section
    and ``fields`` (e.g. ``n_classes``) on top."""
    return planned_config(exp, vocab_size, start.config if start else None, **fields)


def planned_config(
    exp: BaseExperiment, vocab_size: int, base: ModelConfig | None, **fields: Any
) -> ModelConfig:
    """The model config of a run of ``exp``: ``base`` (the model of the checkpoint it starts
    from; ``None``: none, and ``vocab_size`` from the tokenizer) with the ``model`` section and
    ``fields`` on top."""
    section = {**exp.model, **fields}
    if base is None:
        return build_model_config(exp.task, section, vocab_size)
    return build_model_config(exp.task, section, base.vocab_size, base=dataclasses.asdict(base))


def load_start_weights(model: nn.Module, start: Start) -> LoadReport:
    """Copy the checkpoint's tensors into ``model`` by name (module docstring)."""
    weights = verified_weights(start.path)
    tensors, metadata = read_safetensors(weights)
    aliases = weight_aliases(metadata, weights)
    full: dict[str, Tensor] = dict(tensors)
    full.update({a: tensors[k] for a, k in aliases.items() if k in tensors})
    heads = tuple(f"{h}." for h in getattr(model, "head_modules", ()))
    expected = model.state_dict()
    report = LoadReport()
    for name, want in expected.items():
        if name not in full:
            if not name.startswith(heads):
                raise CheckpointError(
                    f"train.init_from: {start.path} has no tensor '{name}'; it "
                    f"holds another architecture (check the model section "
                    f"against the checkpoint's config.yaml)"
                )
            report.new.append(name)
        elif tuple(full[name].shape) != tuple(want.shape):
            raise CheckpointError(
                f"train.init_from: tensor '{name}' is {tuple(full[name].shape)} "
                f"in {start.path} but {tuple(want.shape)} in this model; the "
                f"model section changes the architecture"
            )
        else:
            report.loaded.append(name)
    for name in full:
        if name not in expected and aliases.get(name) not in expected:  # a tied copy kept goes too
            if not name.startswith(heads):
                raise CheckpointError(
                    f"train.init_from: {start.path} holds '{name}', which this "
                    f"model lacks; the model section changes the architecture"
                )
            report.dropped.append(name)
    state = {k: full[k] for k in report.loaded}
    model.load_state_dict({**model.state_dict(), **state}, strict=True)
    return report


def init_weights(
    model: nn.Module, exp: BaseExperiment, start: Start | None, *, resuming: bool, say: Any = print
) -> LoadReport | None:
    """Load ``start``'s weights into ``model`` unless the run resumes (its own checkpoint then
    has them) or ``train.init_weights`` is off; print what was loaded, new and dropped."""
    if start is None or resuming:
        return None
    if not exp.train.init_weights:
        say(
            f"init_from {start.path}: architecture and tokenizer only, random weights "
            f"(train.init_weights=false)"
        )
        return None
    report = load_start_weights(model, start)
    for line in report.lines(start):
        say(line)
    return report


def build_initialised(
    model_cfg: ModelConfig,
    exp: BaseExperiment,
    start: Start | None,
    *,
    resuming: bool,
    rank: int,
    say: Any = print,
) -> nn.Module:
    """The model of ``model_cfg``, its weights drawn from ``train.seed`` and then taken from
    ``start`` (:func:`init_weights`); the random state is left at ``train.seed + rank``, so that
    dropout differs across data-parallel ranks."""
    torch.manual_seed(exp.train.seed)
    model = build_model(model_cfg)
    init_weights(model, exp, start, resuming=resuming, say=say)
    torch.manual_seed(exp.train.seed + rank)
    return model
