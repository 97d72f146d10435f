"""Every model configuration the two papers name, as plain functions.

[V17]: :func:`aiayn_base`, :func:`aiayn_big` and every row of Table 3 (:data:`TABLE3`,
:func:`aiayn_table3`). [B20]: the LM1B language models (:func:`b20_lm_fixed`,
:func:`b20_lm_baseline`) and the BERT models of Tables 1, 2A, 2B and 3A (:func:`b20_bert`).

:data:`PRESETS` maps a name to a zero-argument function for the command line; :func:`preset`
looks a name up and suggests the closest one when it is unknown.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from fullrank.errors import ConfigError, closest

if TYPE_CHECKING:
    from fullrank.models.config import TransformerConfig
    from fullrank.models.decoder_lm import DecoderLMConfig
    from fullrank.models.encoder import EncoderConfig
    from fullrank.models.encoder_decoder import EncoderDecoderConfig

# The config classes live beside their models (PyTorch), so each builder imports its class when
# called: the names and tables here, and `fullrank info --list`, need no PyTorch.

# [V17] §5.1: a shared source-target BPE vocabulary of about 37,000 tokens (exact size not given).
AIAYN_VOCAB = 37_000
# [B20] §4: LM1B with a 32k sub-word vocabulary; BERT's WordPiece vocabulary has 30,522 entries.
LM1B_VOCAB = 32_000
BERT_VOCAB = 30_522


# ------------------------------------------------------------------------------------ [V17]
def aiayn_base(**overrides: Any) -> EncoderDecoderConfig:
    """[V17] base: N=6, d_model=512, d_ff=2048, h=8, d_k=d_v=64, P_drop=0.1 (Table 3, first row).

    ``seq_len`` (used only for FLOPs and the bottleneck check) is set to 64, a typical WMT
    sentence length in BPE tokens.
    """
    from fullrank.models.encoder_decoder import EncoderDecoderConfig

    cfg = EncoderDecoderConfig(
        vocab_size=AIAYN_VOCAB,
        d_model=512,
        n_heads=8,
        d_ff=2048,
        n_layers=6,
        dropout=0.1,
        max_len=1024,
        seq_len=64,
    )
    return replace(cfg, **overrides)


def aiayn_big(**overrides: Any) -> EncoderDecoderConfig:
    """[V17] big: d_model=1024, d_ff=4096, h=16, P_drop=0.3 (Table 3, last row)."""
    return aiayn_base(d_model=1024, d_ff=4096, n_heads=16, dropout=0.3, **overrides)


@dataclass(frozen=True)
class Table3Row:
    """One row of [V17] Table 3: the change from base, and what the paper reports.

    ``model`` holds overrides of :func:`aiayn_base`; ``train`` the training settings that change
    (``label_smoothing``, ``steps``). ``paper_params`` is ``None`` where the table leaves it blank.
    """

    name: str
    model: dict[str, Any]
    paper_ppl: float
    paper_bleu: float
    paper_params: float | None = None  # millions
    train: dict[str, Any] = field(default_factory=dict)

    def config(self) -> EncoderDecoderConfig:
        return aiayn_base(**self.model)


TABLE3: tuple[Table3Row, ...] = (
    Table3Row("base", {}, 4.92, 25.8, 65),
    # (A) number of heads at constant computation: d_k = d_v = d_model / h
    Table3Row("A_h1", {"n_heads": 1}, 5.29, 24.9),
    Table3Row("A_h4", {"n_heads": 4}, 5.00, 25.5),
    Table3Row("A_h16", {"n_heads": 16}, 4.91, 25.8),
    Table3Row("A_h32", {"n_heads": 32}, 5.01, 25.4),
    # (B) smaller attention key size d_k; values stay at d_v = 64
    Table3Row("B_dk16", {"d_head": 16, "d_value": 64}, 5.16, 25.1, 58),
    Table3Row("B_dk32", {"d_head": 32, "d_value": 64}, 5.01, 25.4, 60),
    # (C) model size
    Table3Row("C_N2", {"n_layers": 2}, 6.11, 23.7, 36),
    Table3Row("C_N4", {"n_layers": 4}, 5.19, 25.3, 50),
    Table3Row("C_N8", {"n_layers": 8}, 4.88, 25.5, 80),
    Table3Row("C_d256", {"d_model": 256, "d_head": 32, "d_value": 32}, 5.75, 24.5, 28),
    Table3Row("C_d1024", {"d_model": 1024, "d_head": 128, "d_value": 128}, 4.66, 26.0, 168),
    Table3Row("C_dff1024", {"d_ff": 1024}, 5.12, 25.4, 53),
    Table3Row("C_dff4096", {"d_ff": 4096}, 4.75, 26.2, 90),
    # (D) regularisation
    Table3Row("D_pdrop0.0", {"dropout": 0.0}, 5.77, 24.6),
    Table3Row("D_pdrop0.2", {"dropout": 0.2}, 4.95, 25.5),
    Table3Row("D_ls0.0", {}, 4.67, 25.3, train={"label_smoothing": 0.0}),
    Table3Row("D_ls0.2", {}, 5.47, 25.7, train={"label_smoothing": 0.2}),
    # (E) learned positional embeddings instead of sinusoids
    Table3Row("E_learned", {"positions": "learned"}, 4.92, 25.7),
    Table3Row(
        "big",
        {"d_model": 1024, "d_ff": 4096, "n_heads": 16, "dropout": 0.3},
        4.33,
        26.4,
        213,
        train={"steps": 300_000},
    ),
)


def aiayn_table3(row: str) -> EncoderDecoderConfig:
    """The model of one [V17] Table 3 row by name (``"A_h4"``, ``"B_dk16"``, ``"E_learned"``…)."""
    rows = {r.name: r for r in TABLE3}
    if row not in rows:
        raise ConfigError(f"unknown Table 3 row '{row}'{closest(row, rows)}; rows are: " + ", ".join(rows))
    return rows[row].config()


# ------------------------------------------------------------------------------------ [B20]
def _b20_lm(**kw: Any) -> DecoderLMConfig:
    """[B20] §4 LM1B setting: 6 layers, d_ff=1024, sequence length 256, dropout 0.1."""
    base: dict[str, Any] = dict(
        vocab_size=LM1B_VOCAB, n_layers=6, d_ff=1024, seq_len=256, dropout=0.1, attn_dropout=0.1
    )
    from fullrank.models.decoder_lm import DecoderLMConfig

    return DecoderLMConfig(**{**base, **kw})


def b20_lm_fixed(n_heads: int, d_head: int = 32, d_model: int = 256, **kw: Any) -> DecoderLMConfig:
    """[B20] Figure 1/3 fixed-head LM: ``d_model=256``, ``d_head=32``, ``n_heads`` from 4 to 70."""
    return _b20_lm(d_model=d_model, n_heads=n_heads, d_head=d_head, **kw)


def b20_lm_baseline(d_model: int, n_heads: int, d_ff: int = 1024, **kw: Any) -> DecoderLMConfig:
    """[B20] standard-rule LM baseline: ``d_head = d_model / n_heads`` (Figure 1: d_model 256–512;
    Figure 3a: d_model 256 with a wider ``d_ff`` to match parameters)."""
    return _b20_lm(d_model=d_model, n_heads=n_heads, d_ff=d_ff, **kw)


def b20_bert(
    d_model: int,
    n_heads: int,
    d_head: int | None = None,
    *,
    n_layers: int = 24,
    d_ff: int | None = None,
    **kw: Any,
) -> EncoderConfig:
    """[B20] BERT pre-training model: 24 layers, 30,522 WordPiece tokens, 512 positions,
    pre-training at ``n = 128``. ``d_ff`` defaults to 4096 at d_model 512 and 1024, 3072 at 768
    (the counts that reproduce the paper's parameter figures)."""
    if d_ff is None:
        d_ff = 3072 if d_model == 768 else 4096
    from fullrank.models.encoder import EncoderConfig

    return EncoderConfig(
        vocab_size=BERT_VOCAB,
        d_model=d_model,
        n_heads=n_heads,
        d_head=d_head,
        d_ff=d_ff,
        n_layers=n_layers,
        **kw,
    )


def bert_base(**kw: Any) -> EncoderConfig:
    """BERT-base: 12 layers, d_model 768, 12 heads of 64, d_ff 3072 (110M parameters)."""
    return b20_bert(768, 12, n_layers=12, d_ff=3072, **kw)


def bert_large(**kw: Any) -> EncoderConfig:
    """BERT-large: 24 layers, d_model 1024, 16 heads of 64, d_ff 4096 (336M parameters)."""
    return b20_bert(1024, 16, **kw)


# [B20] Table 1 (BERT-large, standard rule), 2A (d=512, d_p=128, more heads),
# 2B (d=512, 8 heads, larger d_p), 3A (d=768, d_p=128), with the parameter counts the paper prints.
B20_TABLE1 = {8: 336, 16: 336, 32: 336}
B20_TABLE2A = {8: 168, 12: 193, 16: 218, 32: 319}
B20_TABLE2B = {32: 130, 64: 142, 128: 168, 256: 218}
B20_TABLE3A = {8: 214, 12: 252, 16: 290, 20: 327}

B20_LM_FIXED_HEADS = (4, 8, 12, 16, 20, 24, 32, 40, 48, 56, 64, 70)
B20_LM_BASELINES = ((256, 4), (256, 8), (256, 16), (256, 32), (384, 6), (384, 12), (512, 8), (512, 16))


# ------------------------------------------------------------------------------ name table
def _table() -> dict[str, Callable[[], TransformerConfig]]:
    t: dict[str, Callable[[], TransformerConfig]] = {
        "aiayn_base": aiayn_base,
        "aiayn_big": aiayn_big,
        "bert_base": bert_base,
        "bert_large": bert_large,
    }
    for row in TABLE3:
        if row.name not in ("base", "big"):
            t[f"aiayn_table3_{row.name}"] = row.config
    for h in B20_LM_FIXED_HEADS:
        t[f"b20_lm_fixed_h{h}"] = functools.partial(b20_lm_fixed, h)
    for d, h in B20_LM_BASELINES:
        t[f"b20_lm_baseline_d{d}_h{h}"] = functools.partial(b20_lm_baseline, d, h)
    for h in B20_TABLE1:
        t[f"b20_bert_table1_h{h}"] = functools.partial(b20_bert, 1024, h)
    for h in B20_TABLE2A:
        t[f"b20_bert_table2a_h{h}"] = functools.partial(b20_bert, 512, h, d_head=128)
    for dp in B20_TABLE2B:
        t[f"b20_bert_table2b_dp{dp}"] = functools.partial(b20_bert, 512, 8, d_head=dp)
    for h in B20_TABLE3A:
        t[f"b20_bert_table3a_h{h}"] = functools.partial(b20_bert, 768, h, d_head=128)
    return t


PRESETS: dict[str, Callable[[], TransformerConfig]] = _table()


def preset(name: str) -> TransformerConfig:
    """The config of preset ``name``; an unknown name raises with the closest match."""
    if name not in PRESETS:
        raise ConfigError(
            f"unknown preset '{name}'{closest(name, PRESETS)}; "
            f"`fullrank info --list` shows all {len(PRESETS)} presets"
        )
    return PRESETS[name]()
