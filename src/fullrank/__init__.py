"""fullrank: Transformers whose attention head size is a first-class setting.

The library implements *Attention Is All You Need* (Vaswani et al., 2017, cited as [V17]) and
*Low-Rank Bottleneck in Multi-head Attention Models* (Bhojanapalli et al., 2020, cited as [B20]).
The head size ``d_head`` is an argument of its own, free of ``d_model // n_heads``.
"""

from fullrank.errors import CheckpointError, ConfigError, DataError, FullrankError
from fullrank.layers.attention import MultiHeadAttention, attend
from fullrank.models.decoder_lm import DecoderLM, DecoderLMConfig
from fullrank.models.encoder import Encoder, EncoderConfig
from fullrank.models.encoder_decoder import EncoderDecoder, EncoderDecoderConfig

__version__ = "0.1.0"

__all__ = [
    "CheckpointError",
    "ConfigError",
    "DataError",
    "DecoderLM",
    "DecoderLMConfig",
    "Encoder",
    "EncoderConfig",
    "EncoderDecoder",
    "EncoderDecoderConfig",
    "FullrankError",
    "MultiHeadAttention",
    "attend",
]
