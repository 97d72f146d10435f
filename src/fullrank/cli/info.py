"""``fullrank info PRESET|CONFIG|CKPT``: parameters by component (``--parameters``: by tensor), head settings,
FLOPs per token, warnings."""

from __future__ import annotations

import argparse
import typing
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from fullrank.cli.arguments import positive_int
from fullrank.errors import ConfigError

if TYPE_CHECKING:
    from rich.console import Console

    from fullrank.models.config import TransformerConfig


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "name",
        nargs="?",
        help="a preset name (see --list), an experiment file (configs/…yaml), or a checkpoint or run folder",
    )
    p.add_argument(
        "--vocab-size",
        type=positive_int,
        default=None,
        help="vocabulary size for an experiment file whose tokenizer sets it",
    )
    p.add_argument("--list", action="store_true", help="list the preset names and exit")
    p.add_argument(
        "--parameters",
        action="store_true",
        help="also list every parameter tensor by name and shape (the names train.freeze matches)",
    )
    p.add_argument(
        "--seq-len",
        type=int,
        default=None,
        help="sequence length n for FLOPs and the d_head < n check (default: the config's)",
    )


def human(n: float) -> str:
    """``63082496 → '63.08M'``."""
    for unit, size in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(n) >= size:
            return f"{n / size:.2f}{unit}"
    return str(int(n))


def render(name: str, cfg: TransformerConfig, console: Console) -> None:
    from rich.table import Table

    dh, dv = cfg.head_sizes
    rule = "standard rule d_head = d_model / n_heads" if cfg.standard_rule else "fixed head size"
    console.print(f"[bold]{name}[/bold]  ({type(cfg).__name__})")
    console.print(
        f"  layers {cfg.n_layers}, d_model {cfg.d_model}, d_ff {cfg.d_ff}, "
        f"vocab {cfg.vocab_size}, seq_len {cfg.seq_len}, "
        f"{'pre' if cfg.norm_first else 'post'}-LN, {cfg.activation}, "
        f"{cfg.positions} positions"
    )
    console.print(
        f"  heads: n_heads {cfg.n_heads} × d_head {dh} (d_value {dv}) — {rule}; "
        f"attention width n_heads·d_head = {cfg.n_heads * dh}"
    )
    table = Table(show_header=True, header_style="bold")
    table.add_column("component")
    table.add_column("parameters", justify="right")
    table.add_column("share", justify="right")
    breakdown = cfg.param_breakdown()
    total = sum(breakdown.values())
    for comp, count in breakdown.items():
        table.add_row(comp, f"{count:,}", f"{100 * count / total:.1f}%")
    table.add_row("[bold]total[/bold]", f"[bold]{total:,}[/bold]", f"({human(total)})")
    console.print(table)
    flops = cfg.flops_per_token()
    console.print(
        f"  FLOPs per token at n={cfg.seq_len}: forward {human(flops['forward'])}, "
        f"training (3×) {human(flops['train'])}"
    )
    for warning in (cfg.bottleneck_warning(), cfg.kernel_warning()):
        if warning:
            console.print(f"  [yellow]warning:[/yellow] {warning}")


def render_parameters(cfg: TransformerConfig, console: Console) -> None:
    """Every parameter tensor of the model of ``cfg`` (built on the meta device: shapes alone),
    by name, with its shape and size; a tied tensor under each of its names."""
    import torch
    from rich.table import Table

    from fullrank.models import ModelConfig, build_model

    with torch.device("meta"):
        model = build_model(typing.cast(ModelConfig, cfg))  # every preset and experiment is a family's
    table = Table(show_header=True, header_style="bold")
    for column in ("parameter", "shape", "size"):
        table.add_column(column, justify="right" if column == "size" else "left")
    first: dict[int, str] = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        size = f"{p.numel():,}" if id(p) not in first else f"tied to {first[id(p)]}"
        table.add_row(name, " × ".join(map(str, p.shape)), size)
        first.setdefault(id(p), name)
    console.print(table)


def load(name: str, vocab_size: int | None) -> TransformerConfig:
    """A preset by name, the model of an experiment file, or a checkpoint's."""
    from fullrank.models.presets import preset
    from fullrank.recipes.config import load_experiment

    path = Path(name)
    if path.is_dir():  # a checkpoint, or a run (its latest)
        from fullrank.training.checkpoints import checkpoint_config

        return checkpoint_config(path)
    if path.suffix not in (".yaml", ".yml", ".toml"):
        return preset(name)
    exp = load_experiment(path)
    if exp.train.init_from:  # the checkpoint's model with the experiment's on top, as its run builds
        from fullrank.recipes.init import find_start
        from fullrank.recipes.run import recipe_of

        start = find_start(exp)
        assert start is not None  # train.init_from is set
        return recipe_of(exp.task).plan_model(exp, exp.run_dir, {}, start.config)[0]
    vocab = vocab_size or exp.model.get("vocab_size") or exp.data.vocab_size
    if vocab is None:
        raise ConfigError(
            f"{path}: its vocabulary size comes from the {exp.data.tokenizer} "
            f"tokenizer trained on the data; pass --vocab-size N"
        )
    return exp.model_config(int(vocab))


def run(args: argparse.Namespace) -> int:
    from fullrank.models.presets import PRESETS  # the names alone need no PyTorch
    from fullrank.output import console as make_console

    console = make_console()
    if args.list or args.name is None:
        for name in PRESETS:
            console.print(name)
        return 0
    cfg = load(args.name, args.vocab_size)
    if args.seq_len is not None:
        cfg = replace(cfg, seq_len=args.seq_len, max_len=max(cfg.max_len, args.seq_len))
    render(args.name, cfg, console)
    if args.parameters:
        render_parameters(cfg, console)
    return 0
