"""The three model families, their configs, and the paper presets."""

from fullrank.models.decoder_lm import DecoderLM, DecoderLMConfig
from fullrank.models.encoder import Encoder, EncoderConfig
from fullrank.models.encoder_decoder import EncoderDecoder, EncoderDecoderConfig

__all__ = ["DecoderLM", "DecoderLMConfig", "Encoder", "EncoderConfig", "EncoderDecoder",
           "EncoderDecoderConfig", "build_model"]


def build_model(config: DecoderLMConfig | EncoderConfig | EncoderDecoderConfig):  # noqa: ANN201
    """The model family that ``config`` describes."""
    if isinstance(config, EncoderDecoderConfig):
        return EncoderDecoder(config)
    if isinstance(config, DecoderLMConfig):
        return DecoderLM(config)
    if isinstance(config, EncoderConfig):
        return Encoder(config)
    raise TypeError(f"not a model config: {type(config).__name__}")
