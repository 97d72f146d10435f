"""fullrank: Transformers whose attention head size is a first-class setting.

The library implements *Attention Is All You Need* (Vaswani et al., 2017, cited as [V17]) and
*Low-Rank Bottleneck in Multi-head Attention Models* (Bhojanapalli et al., 2020, cited as [B20]).
The head size ``d_head`` is an argument of its own, free of ``d_model // n_heads``.

The names below are imported on first use (PEP 562), so that ``import fullrank`` (and the
``fullrank`` command's help) does not wait for PyTorch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from fullrank.errors import CheckpointError, ConfigError, DataError, FullrankError

if TYPE_CHECKING:
    from fullrank.layers.attention import MultiHeadAttention as MultiHeadAttention
    from fullrank.layers.attention import attend as attend
    from fullrank.models.decoder_lm import DecoderLM as DecoderLM
    from fullrank.models.decoder_lm import DecoderLMConfig as DecoderLMConfig
    from fullrank.models.encoder import Encoder as Encoder
    from fullrank.models.encoder import EncoderConfig as EncoderConfig
    from fullrank.models.encoder_decoder import EncoderDecoder as EncoderDecoder
    from fullrank.models.encoder_decoder import EncoderDecoderConfig as EncoderDecoderConfig

__version__ = "0.1.0"

# name → the module that defines it
_LAZY = {
    "MultiHeadAttention": "fullrank.layers.attention",
    "attend": "fullrank.layers.attention",
    "DecoderLM": "fullrank.models.decoder_lm",
    "DecoderLMConfig": "fullrank.models.decoder_lm",
    "Encoder": "fullrank.models.encoder",
    "EncoderConfig": "fullrank.models.encoder",
    "EncoderDecoder": "fullrank.models.encoder_decoder",
    "EncoderDecoderConfig": "fullrank.models.encoder_decoder",
}

__all__ = ["CheckpointError", "ConfigError", "DataError", "FullrankError", *_LAZY]


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'fullrank' has no attribute {name!r}")
    value = getattr(importlib.import_module(_LAZY[name]), name)
    globals()[name] = value  # found directly from now on
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})
