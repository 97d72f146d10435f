"""The three model families by the names stored in checkpoints: building a model from its config,
and configs to and from their JSON form."""

from __future__ import annotations

import dataclasses
from typing import Any

from torch import nn

from fullrank.errors import ConfigError, closest
from fullrank.models.decoder_lm import DecoderLM, DecoderLMConfig
from fullrank.models.encoder import Encoder, EncoderConfig
from fullrank.models.encoder_decoder import EncoderDecoder, EncoderDecoderConfig

ModelConfig = DecoderLMConfig | EncoderConfig | EncoderDecoderConfig

__all__ = [
    "FAMILIES",
    "DecoderLM",
    "DecoderLMConfig",
    "Encoder",
    "EncoderConfig",
    "EncoderDecoder",
    "EncoderDecoderConfig",
    "ModelConfig",
    "build_model",
    "config_from_dict",
    "config_to_dict",
]

# Each family by the name stored in checkpoints: (config class, model class). An explicit table.
FAMILIES: dict[str, tuple[type, type[nn.Module]]] = {
    "decoder_lm": (DecoderLMConfig, DecoderLM),
    "encoder_decoder": (EncoderDecoderConfig, EncoderDecoder),
    "encoder": (EncoderConfig, Encoder),
}


def family_of(config: ModelConfig) -> str:
    for name, (cfg_cls, _) in FAMILIES.items():
        if type(config) is cfg_cls:
            return name
    raise TypeError(f"not a model config: {type(config).__name__}")


def build_model(config: ModelConfig) -> nn.Module:
    """The model that ``config`` describes."""
    return FAMILIES[family_of(config)][1](config)


def config_to_dict(config: ModelConfig) -> dict[str, Any]:
    """``{"family": …, <fields>}``: the JSON form stored in checkpoints."""
    return {"family": family_of(config), **dataclasses.asdict(config)}


def config_from_dict(data: dict[str, Any]) -> ModelConfig:
    """Inverse of :func:`config_to_dict` (validates the fields again)."""
    fields = dict(data)
    family = fields.pop("family", None)
    if family not in FAMILIES:
        raise ConfigError(
            f"unknown model family {family!r}{closest(str(family), FAMILIES)}; "
            f"families are: {', '.join(FAMILIES)}"
        )
    return FAMILIES[family][0](**fields)
