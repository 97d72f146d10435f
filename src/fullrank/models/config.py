"""The fields every Transformer family shares, their validation, and closed-form counts.

Each model family has one config dataclass (``EncoderDecoderConfig``, ``DecoderLMConfig``,
``EncoderConfig``) that extends :class:`TransformerConfig`. Configs are frozen pydantic dataclasses
(:func:`fullrank.validation.config_dataclass`): each field's type and range are declared on it and
checked whenever a config is made — from an experiment file, a checkpoint or Python — and derived
variants made with :func:`dataclasses.replace` are checked again. Every error is one line naming
the field and the fix.
"""

from __future__ import annotations

from fullrank.blocks import BlockSpec
from fullrank.errors import ConfigError
from fullrank.layers.attention import FUSED_MAX_HEAD, resolve_head_sizes
from fullrank.layers.embeddings import PositionKind
from fullrank.layers.feedforward import Activation
from fullrank.validation import Bool, PositiveFloat, PositiveInt, Probability, config_dataclass


def attention_params(d_model: int, n_heads: int, d_head: int, d_value: int, bias: bool) -> int:
    """Weights of one attention sublayer: ``D·H·(2Dh + Dv)`` in, ``H·Dv·D`` out, plus biases."""
    inner = n_heads * (2 * d_head + d_value)
    return d_model * inner + n_heads * d_value * d_model + ((inner + d_model) if bias else 0)


def ffn_params(d_model: int, d_ff: int, bias: bool) -> int:
    """Weights of one feed-forward sublayer ([V17] eq. 2)."""
    return 2 * d_model * d_ff + ((d_ff + d_model) if bias else 0)


def norm_params(d_model: int) -> int:
    """One LayerNorm: gain and bias."""
    return 2 * d_model


# the default training sequence length (a decoder-only model's max_len too, when not given)
SEQ_LEN = 256


@config_dataclass
class TransformerConfig:
    """Fields shared by all families. Names follow the papers: ``d_model``, ``n_heads``, ``d_head``…

    Attributes:
        vocab_size: vocabulary size ``V`` (the target/shared vocabulary for translation).
        d_model: model width ``D``.
        n_heads: heads per attention sublayer ``H``.
        d_head: query/key size per head ``Dh``; ``None`` = standard rule ``D // H`` ([V17]);
            an integer = fixed head size ``d_p`` ([B20] §3).
        d_value: value size per head ``Dv``; ``None`` = ``Dh`` ([V17] Table 3 row B changes
            ``d_k`` only, so set ``d_value`` to keep values at 64).
        d_ff: feed-forward inner width ``F``.
        n_layers: number of blocks (the encoder's, for translation).
        dropout: residual and embedding dropout ``P_drop`` ([V17] §5.4).
        attn_dropout: dropout on attention probabilities (0 in [V17], 0.1 in BERT).
        ffn_dropout: dropout after the feed-forward activation.
        activation: ``"relu"`` ([V17]), ``"gelu"`` (BERT), ``"gelu_tanh"`` (GPT-2's ``gelu_new``)
            or ``"silu"`` (Marian's ``swish``).
        norm_first: ``False`` = the paper's post-LN; ``True`` = pre-LN with a final LayerNorm.
        norm_eps: LayerNorm epsilon.
        bias: biases in attention and feed-forward projections.
        positions: ``"sinusoidal"`` ([V17] §3.5), ``"learned"`` (Table 3 row E, BERT) or
            ``"sinusoidal_halves"`` (the same table, sines then cosines: Marian).
        max_len: number of positions the model accepts (the size of its position table).
        seq_len: the sequence length ``n`` the model is trained at; FLOPs per token and the
            [B20] bottleneck check (``d_head < n``) use it.
        scale_embeddings: multiply token embeddings by ``√D`` ([V17] §3.4).
        tie_embeddings: share the output projection with the token embedding ([V17] §3.4).
        fused_attention: use ``scaled_dot_product_attention`` (else the explicit ``attend``).
    """

    vocab_size: PositiveInt
    d_model: PositiveInt = 512
    n_heads: PositiveInt = 8
    d_head: PositiveInt | None = None
    d_value: PositiveInt | None = None
    d_ff: PositiveInt = 2048
    n_layers: PositiveInt = 6
    dropout: Probability = 0.1
    attn_dropout: Probability = 0.0
    ffn_dropout: Probability = 0.0
    activation: Activation = "relu"
    norm_first: Bool = False
    norm_eps: PositiveFloat = 1e-5
    bias: Bool = True
    positions: PositionKind = "sinusoidal"
    max_len: PositiveInt = 1024
    seq_len: PositiveInt = SEQ_LEN
    scale_embeddings: Bool = True
    tie_embeddings: Bool = True
    fused_attention: Bool = True

    # ----------------------------------------------------------------------------- validation
    def __post_init__(self) -> None:
        """What relates several fields (each field's type and range are pydantic's)."""
        name = type(self).__name__
        if self.seq_len > self.max_len:
            raise ConfigError(
                f"{name}.seq_len={self.seq_len} exceeds max_len={self.max_len}; "
                f"raise max_len to at least {self.seq_len}"
            )
        try:
            resolve_head_sizes(self.d_model, self.n_heads, self.d_head, self.d_value)
        except ConfigError as e:
            raise ConfigError(f"{name}: {e}") from None

    # ------------------------------------------------------------------------------- derived
    @property
    def head_sizes(self) -> tuple[int, int]:
        """``(Dh, Dv)`` after applying the standard rule where ``d_head`` is ``None``."""
        return resolve_head_sizes(self.d_model, self.n_heads, self.d_head, self.d_value)

    @property
    def standard_rule(self) -> bool:
        """Whether heads follow ``d_head = d_model / n_heads`` (rather than a fixed size)."""
        return self.head_sizes == (self.d_model // self.n_heads,) * 2 and self.d_model % self.n_heads == 0

    def block_spec(self) -> BlockSpec:
        return BlockSpec(
            d_model=self.d_model,
            n_heads=self.n_heads,
            d_head=self.head_sizes[0],
            d_value=self.head_sizes[1],
            d_ff=self.d_ff,
            dropout=self.dropout,
            attn_dropout=self.attn_dropout,
            ffn_dropout=self.ffn_dropout,
            activation=self.activation,
            norm_first=self.norm_first,
            norm_eps=self.norm_eps,
            bias=self.bias,
            fused_attention=self.fused_attention,
        )

    def attention_params(self) -> int:
        dh, dv = self.head_sizes
        return attention_params(self.d_model, self.n_heads, dh, dv, self.bias)

    def ffn_params(self) -> int:
        return ffn_params(self.d_model, self.d_ff, self.bias)

    def position_params(self) -> int:
        return self.max_len * self.d_model if self.positions == "learned" else 0

    def attention_flops_per_token(self, n: int) -> int:
        """Forward FLOPs of ``q·kᵀ`` and ``probs·v`` for one query over ``n`` keys, one sublayer."""
        dh, dv = self.head_sizes
        return 2 * n * self.n_heads * (dh + dv)

    def param_breakdown(self) -> dict[str, int]:
        """Parameters by component: embeddings, attention, ffn, norms, heads."""
        raise NotImplementedError

    def num_params(self) -> int:
        """Closed-form parameter count, equal to ``sum(p.numel() for p in model.parameters())``."""
        return sum(self.param_breakdown().values())

    def flops_per_token(self) -> dict[str, int]:
        """Forward and training (3× forward) FLOPs per token at ``seq_len``."""
        raise NotImplementedError

    def kernel_warning(self) -> str | None:
        """Head sizes that leave PyTorch's fused (FlashAttention) kernels on CUDA."""
        dh, dv = self.head_sizes
        if max(dh, dv) > FUSED_MAX_HEAD:
            return (
                f"d_head={dh}, d_value={dv}: above {FUSED_MAX_HEAD}, no fused "
                f"scaled_dot_product_attention kernel (FlashAttention) accepts these heads on "
                f"CUDA; fullrank runs them through its query-chunked path there (memory linear "
                f"in n, slower than a fused kernel; docs/speed.md). CPUs are unaffected."
            )
        return None

    def bottleneck_warning(self) -> str | None:
        """The [B20] low-rank condition: a head of size ``d_head < n`` cannot express every
        ``n×n`` attention pattern (Theorem 1)."""
        dh = self.head_sizes[0]
        if dh < self.seq_len:
            return (
                f"d_head={dh} < seq_len={self.seq_len}: each head's logit matrix has rank "
                f"at most {dh}, below n={self.seq_len} — the low-rank bottleneck of [B20] "
                f"Theorem 1 (fixed heads with d_head >= n avoid it)"
            )
        return None
