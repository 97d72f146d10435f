"""Tiny models and stand-in decoders shared by the inference tests."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

from fullrank.inference import length_penalty
from fullrank.models import DecoderLM, DecoderLMConfig, EncoderDecoder, EncoderDecoderConfig
from tests.helpers import ODD

PAD, BOS, EOS = 0, 1, 2


def translation_model(vocab_size: int = 13, **kw) -> EncoderDecoder:
    """A float64 encoder-decoder with odd sizes (float64 so that cached and uncached decoding
    cannot disagree on a near-tie)."""
    cfg = EncoderDecoderConfig(
        **{**dict(vocab_size=vocab_size, n_layers=2, n_decoder_layers=3, max_len=64, seq_len=16, **ODD), **kw}
    )
    return EncoderDecoder(cfg).double().eval()


def language_model(vocab_size: int = 13, **kw) -> DecoderLM:
    cfg = DecoderLMConfig(**{**dict(vocab_size=vocab_size, n_layers=2, seq_len=32, **ODD), **kw})
    return DecoderLM(cfg).double().eval()


def padded_sources(lengths: Sequence[int], vocab_size: int) -> tuple[Tensor, Tensor]:
    """Random sources ``(B, S)`` of the given lengths, right-padded with PAD, and their mask."""
    s = max(lengths)
    src = torch.randint(3, vocab_size, (len(lengths), s))
    keep = torch.arange(s)[None, :] < torch.tensor(lengths)[:, None]
    return src.masked_fill(~keep, PAD), keep


def brute_force(
    model: EncoderDecoder, src: Tensor, *, max_len: int, alpha: float
) -> list[tuple[float, float, list[int]]]:
    """Every output of one source ``(S,)`` up to ``max_len`` tokens, best score first, as
    ``(score, log_prob, tokens)``: ``y + [EOS]`` for each EOS-free ``y`` shorter than
    ``max_len`` (``|Y| = len(y) + 1``), and each EOS-free ``y`` of exactly ``max_len`` tokens
    (cut there, ``|Y| = max_len``). Log-probabilities come from full forward passes."""
    vocab = model.config.vocab_size
    words = [v for v in range(vocab) if v != EOS]
    out = []
    memory = model.encode(src[None])
    for n in range(max_len + 1):
        prefixes = [list(p) for p in itertools.product(words, repeat=n)]
        tgt = torch.tensor([[BOS] + p for p in prefixes])  # (M, n + 1)
        logp = F.log_softmax(
            model.logits(model.decode(tgt, memory.expand(len(prefixes), -1, -1))), dim=-1
        )  # (M, n + 1, V)
        for p, lp in zip(prefixes, logp):
            prefix_lp = sum(lp[i, tok].item() for i, tok in enumerate(p))
            if n < max_len:
                total = prefix_lp + lp[n, EOS].item()
                out.append((total / length_penalty(n + 1.0, alpha), total, p))
            else:
                out.append((prefix_lp / length_penalty(float(n), alpha), prefix_lp, p))
    return sorted(out, key=lambda h: -h[0])


class ScriptedDecoder:
    """A :class:`~fullrank.inference.Decoder` whose next-token probabilities are a Python
    function of each row's prefix (tokens after BOS). Records the number of rows of every step."""

    def __init__(self, probs: Callable[[tuple[int, ...]], Sequence[float]], batch_size: int) -> None:
        self.probs = probs
        self.prefixes: list[tuple[int, ...]] | None = None
        self.rows: list[int] = []
        self.batch_size = batch_size
        self.device = torch.device("cpu")

    def step(self, tokens: Tensor) -> Tensor:
        self.rows.append(tokens.shape[0])
        if self.prefixes is None:  # the first step feeds BOS (or a prompt, kept after its first token)
            self.prefixes = [tuple(t[1:]) for t in tokens.tolist()]
        else:
            self.prefixes = [p + tuple(t) for p, t in zip(self.prefixes, tokens.tolist())]
        logp = [[math.log(q) if q > 0 else -math.inf for q in self.probs(p)] for p in self.prefixes]
        return torch.tensor(logp, dtype=torch.float64)[:, None, :]  # (B, 1, V)

    def reorder(self, index: Tensor, *, sources: Tensor | None = None) -> None:
        assert self.prefixes is not None
        self.prefixes = [self.prefixes[i] for i in index.tolist()]
