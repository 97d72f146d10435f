"""``fullrank advise``: head settings under a parameter budget, standard rule vs fixed heads."""

from __future__ import annotations

import argparse

from fullrank.cli.arguments import positive_int
from fullrank.cli.bottleneck import int_list
from fullrank.cli.info import human
from fullrank.errors import ConfigError

# fullrank.analysis.advise's FAMILIES and DEFAULT_HEADS, written out so that --help needs no
# PyTorch (a test keeps them equal)
FAMILIES = ("encoder", "decoder_lm", "encoder_decoder")
DEFAULT_HEADS = (1, 2, 4, 6, 8, 12, 16, 24, 32)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--d-model", type=int, required=True, help="model width d_model")
    p.add_argument("--seq-len", type=int, required=True, help="sequence length n")
    p.add_argument("--layers", type=int, required=True, help="number of layers n_layers")
    p.add_argument("--param-budget", type=str, required=True, help="total parameters, e.g. 110M, 1.2B, 350K")
    p.add_argument(
        "--family",
        choices=FAMILIES,
        default="encoder",
        help="model family whose parameters are counted (default encoder, BERT-style)",
    )
    p.add_argument(
        "--vocab-size",
        type=positive_int,
        default=None,
        help="vocabulary (default: 30522 encoder, 32000 decoder_lm, 37000 encoder_decoder)",
    )
    p.add_argument(
        "--heads",
        type=str,
        default=",".join(map(str, DEFAULT_HEADS)),
        help="comma-separated n_heads to consider",
    )


def run(args: argparse.Namespace) -> int:
    from rich.table import Table

    from fullrank.analysis.advise import advise, parse_count
    from fullrank.output import console as make_console

    for name in ("d_model", "seq_len", "layers"):
        if getattr(args, name) <= 0:
            raise ConfigError(f"--{name.replace('_', '-')} must be positive, got {getattr(args, name)}")
    budget = parse_count(args.param_budget)
    candidates = advise(
        d_model=args.d_model,
        seq_len=args.seq_len,
        n_layers=args.layers,
        param_budget=budget,
        family=args.family,
        vocab_size=args.vocab_size,
        heads=int_list(args.heads, "--heads"),
    )
    console = make_console()
    if not candidates:
        raise ConfigError(
            f"no setting fits {args.param_budget} ({budget:,}) parameters at "
            f"d_model={args.d_model}, {args.layers} layers: raise the budget or "
            f"lower d_model/--layers"
        )
    table = Table(
        title=f"{args.family}: d_model {args.d_model}, {args.layers} layers, "
        f"seq_len {args.seq_len}, budget {human(budget)} parameters",
        header_style="bold",
    )
    for col, justify in (
        ("rule", "left"),
        ("n_heads", "right"),
        ("d_head", "right"),
        ("d_ff", "right"),
        ("params", "right"),
        ("FLOPs/token", "right"),
        ("d_head < n", "center"),
    ):
        table.add_column(col, justify=justify)  # type: ignore[arg-type]  # left or right
    for c in candidates:
        table.add_row(
            c.rule,
            str(c.n_heads),
            str(c.d_head),
            str(c.d_ff),
            human(c.params),
            human(c.flops_per_token),
            "[yellow]yes[/yellow]" if c.bottleneck else "no",
        )
    console.print(table)
    console.print(
        f"standard: d_head = d_model / n_heads; fixed: d_head = seq_len or the next "
        f"powers of two ([B20] §3). d_ff (a multiple of 64) takes what the budget "
        f"leaves; FLOPs are forward, per token, at seq_len; 'd_head < n' (n = "
        f"{args.seq_len}) marks [B20]'s low-rank bottleneck."
    )
    return 0
