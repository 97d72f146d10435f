"""The three model families, their configs, and the paper presets.

The names below come from :mod:`fullrank.models.families` and are imported on first use (PEP
562): listing the presets (``fullrank info --list``) needs no PyTorch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fullrank.models.families import (
        FAMILIES,
        DecoderLM,
        DecoderLMConfig,
        Encoder,
        EncoderConfig,
        EncoderDecoder,
        EncoderDecoderConfig,
        ModelConfig,
        build_model,
        config_from_dict,
        config_to_dict,
        family_of,
    )

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
    "family_of",
]


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module 'fullrank.models' has no attribute {name!r}")
    value = getattr(importlib.import_module("fullrank.models.families"), name)
    globals()[name] = value  # found directly from now on
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
