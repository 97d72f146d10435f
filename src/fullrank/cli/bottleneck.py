"""``fullrank bottleneck``: [B20]'s low-rank bottleneck, measured.

- plain: the rank experiment — best reachable error against ``d_head`` (table, CSV, PNG);
- ``--multihead``: standard-rule heads against fixed-size heads as ``n_heads`` grows;
- ``--theorem 1``: Theorem 1's construction on random inputs and its ``d < n`` counterexample;
- ``--theorem 2``: Theorem 2's witness against the best standard layer.

All of it uses the paper's column convention (``X`` is ``d×n``, attention column-stochastic).
"""

from __future__ import annotations

import argparse
import csv
import time
from pathlib import Path
from typing import TYPE_CHECKING

from fullrank.cli.arguments import output_path, seed
from fullrank.errors import ConfigError
from fullrank.paths import atomic_path, check_output_dir

if TYPE_CHECKING:
    from rich.console import Console


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--theorem",
        type=int,
        choices=(1, 2),
        default=None,
        help="check Theorem 1 (construction, counterexample) or Theorem 2 (witness)",
    )
    p.add_argument(
        "--multihead",
        action="store_true",
        help="standard-rule heads (d_model/h) against fixed heads (d_head = n) as h grows",
    )
    p.add_argument(
        "--n",
        type=int,
        default=None,
        help="sequence length n (rank experiment 32; --multihead and --theorem 2: 4)",
    )
    p.add_argument(
        "--d-model", type=int, default=None, help="model width d (rank experiment 64; --multihead 16)"
    )
    p.add_argument("--seeds", type=int, default=5, help="random (X, P) pairs (rank experiment)")
    p.add_argument(
        "--d-heads",
        type=str,
        default=None,
        help="comma-separated head sizes (default: 1..2n, dense around n)",
    )
    p.add_argument(
        "--heads", type=str, default="1,2,4,8,16", help="comma-separated numbers of heads (--multihead)"
    )
    p.add_argument(
        "--configs",
        type=str,
        default="8:4:4,6:3:3",
        help="Theorem 2 layers as d:d_p:h, comma-separated (h > d/d_p)",
    )
    p.add_argument("--restarts", type=int, default=3, help="random starts per fit")
    p.add_argument(
        "--max-iter",
        type=int,
        default=None,
        help="optimiser iterations (rank: L-BFGS 400; multihead: L-BFGS 1000; "
        "theorem 2: Levenberg-Marquardt 60)",
    )
    p.add_argument("--train-samples", type=int, default=64, help="inputs X fitted (--theorem 2)")
    p.add_argument("--seed", type=seed, default=0)
    p.add_argument(
        "--out",
        type=lambda text: Path(output_path(text)),
        default=Path("runs/bottleneck"),
        help="directory for the CSV and PNG (default runs/bottleneck): a new one, or "
        "with --overwrite one that holds only results of this command",
    )
    p.add_argument(
        "--overwrite", action="store_true", help="replace the results in an existing --out directory"
    )


# what the rank experiment and --multihead write into --out
OUTPUTS = ("rank_experiment.csv", "rank_experiment.png", "multihead.csv")


def check_out(args: argparse.Namespace) -> None:
    """Refuse an ``--out`` that would replace files this command did not write
    (:func:`fullrank.paths.check_output_dir`)."""
    check_output_dir(
        args.out,
        option="--out",
        overwrite=args.overwrite,
        replaceable=lambda p: {q.name for q in p.iterdir()} <= set(OUTPUTS),
        kind="a directory of bottleneck results",
    )


def int_list(text: str, what: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise ConfigError(f"{what} must be comma-separated integers, got {text!r}") from None
    if not values or any(v <= 0 for v in values):
        raise ConfigError(f"{what} must be positive integers, got {text!r}")
    return values


def default_d_heads(n: int) -> list[int]:
    """``1, 2, 4, 8, n/2, 3n/4, n−2, n−1, n, 5n/4, 3n/2, 2n`` (deduplicated, positive)."""
    return sorted(
        {
            v
            for v in (1, 2, 4, 8, n // 2, 3 * n // 4, n - 2, n - 1, n, n + n // 4, 3 * n // 2, 2 * n)
            if 1 <= v <= 2 * n
        }
    )


def sci(x: float) -> str:
    return "—" if x != x else f"{x:.2e}"


# ------------------------------------------------------------------------------- rank experiment
def run_rank(args: argparse.Namespace, console: Console) -> int:
    from rich.table import Table

    from fullrank.analysis.plots import plot_rank_experiment
    from fullrank.analysis.rank_fit import ZERO_TOL, rank_experiment, summarise, write_csv

    n = args.n or 32
    d_model = args.d_model or 64
    d_heads = int_list(args.d_heads, "--d-heads") if args.d_heads else default_d_heads(n)
    start = time.perf_counter()
    rows = rank_experiment(
        n=n,
        d_model=d_model,
        seeds=args.seeds,
        d_heads=d_heads,
        restarts=args.restarts,
        max_iter=args.max_iter or 400,
        seed=args.seed,
    )
    elapsed = time.perf_counter() - start
    csv_path = write_csv(rows, args.out / "rank_experiment.csv")
    png_path = args.out / "rank_experiment.png"
    plot_rank_experiment(rows, png_path)

    table = Table(
        title=f"One head fitted to random P: n = {n}, d_model = {d_model}, "
        f"{args.seeds} seeds (paper's columns, P column-stochastic)",
        caption="err = max|P̂ − P|, KL = mean column KL(P‖P̂); means over seeds; "
        "best = min(optimiser, construction)",
        header_style="bold",
    )
    for col in ("d_head", "best err", "worst seed", "best KL", "optimiser", "constr.", "verdict"):
        table.add_column(col, justify="right")
    summary = summarise(rows)
    for s in summary:
        verdict = "[green]exact[/green]" if s.reaches_zero else "[yellow]bounded[/yellow]"
        style = "bold" if s.d_head in (n - 1, n) else None
        table.add_row(
            str(s.d_head),
            sci(s.best_max_abs_mean),
            sci(s.best_max_abs_worst),
            sci(s.best_kl_mean),
            sci(s.opt_max_abs_mean),
            sci(s.construction_max_abs_mean),
            verdict,
            style=style,
        )
    console.print(table)
    exact = [s.d_head for s in summary if s.reaches_zero]
    bounded = [s for s in summary if not s.reaches_zero]
    if exact:
        console.print(f"numerical zero (≤ {ZERO_TOL:g}) from d_head = {min(exact)}; ", end="")
    if bounded:
        floor = min(s.best_max_abs_mean for s in bounded)
        console.print(
            f"below it the error stays ≥ {floor:.2e} (largest such d_head = {max(s.d_head for s in bounded)})"
        )
    else:
        console.print("")
    console.print(
        f"Theory: with X of full column rank, a generic P is reachable iff "
        f"d_head ≥ n − 1 = {n - 1} (softmax ignores a constant per column, one free "
        f"rank); Theorem 1's construction covers d_head ≥ n = {n}."
    )
    console.print(f"wrote {csv_path} and {png_path} in {elapsed:.1f} s of fitting")
    return 0


# ------------------------------------------------------------------------------- multi-head
def run_multihead(args: argparse.Namespace, console: Console) -> int:
    from rich.table import Table

    from fullrank.analysis.multihead import FIT_TOL, multihead_experiment
    from fullrank.analysis.plots import plot_multihead

    n = args.n or 4
    d_model = args.d_model or 16
    heads = tuple(int_list(args.heads, "--heads"))
    start = time.perf_counter()
    rows = multihead_experiment(
        d_model=d_model,
        n=n,
        heads=heads,
        restarts=args.restarts,
        max_iter=args.max_iter or 1000,
        seed=args.seed,
    )
    elapsed = time.perf_counter() - start
    table = Table(
        title=f"Fitting a random fixed-head target (h heads of size n = {n}) at "
        f"d_model = {d_model}: relative residual ‖f(X) − Y‖/‖Y‖",
        header_style="bold",
    )
    for col in (
        "h",
        "standard d_head",
        "train",
        "held-out",
        "standard",
        "fixed d_head",
        "train",
        "held-out",
        "fixed",
        "inputs",
    ):
        table.add_column(col, justify="right")

    def verdict(fits: bool | None) -> str:
        if fits is None:
            return "—"
        return "[green]fits[/green]" if fits else "[red]cannot fit[/red]"

    lines = []
    for r in rows:
        std = r.standard
        table.add_row(
            str(r.n_heads),
            "h ∤ d_model" if std is None else str(std.d_head),
            "—" if std is None else sci(std.train_residual),
            "—" if std is None else sci(std.test_residual),
            verdict(r.standard_fits),
            str(r.fixed.d_head),
            sci(r.fixed.train_residual),
            sci(r.fixed.test_residual),
            verdict(r.fixed_fits),
            str(r.n_train),
        )
        lines.append(
            dict(
                n_heads=r.n_heads,
                d_model=d_model,
                n=n,
                n_train=r.n_train,
                standard_d_head=None if std is None else std.d_head,
                standard_train=None if std is None else std.train_residual,
                standard_test=None if std is None else std.test_residual,
                standard_fits=r.standard_fits,
                fixed_d_head=r.fixed.d_head,
                fixed_train=r.fixed.train_residual,
                fixed_test=r.fixed.test_residual,
                fixed_fits=r.fixed_fits,
            )
        )
    console.print(table)
    console.print(
        f"'fits' = training residual ≤ {FIT_TOL:g}. The standard rule contains the "
        f"target only while d_model/h ≥ n, i.e. h ≤ {d_model // n}."
    )
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "multihead.csv"
    with atomic_path(path) as tmp, tmp.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(lines[0]))
        writer.writeheader()
        writer.writerows(lines)
    png_path = args.out / "multihead.png"
    plot_multihead(rows, png_path)
    console.print(f"wrote {path} and {png_path} in {elapsed:.1f} s of fitting")
    return 0


# ------------------------------------------------------------------------------- theorems
def run_theorem1(args: argparse.Namespace, console: Console) -> int:
    import torch
    from rich.table import Table

    from fullrank.analysis.rank_fit import random_instance
    from fullrank.analysis.theorem1 import counterexample, head_attention, theorem1_construction

    gen = torch.Generator().manual_seed(args.seed)
    table = Table(
        title="Theorem 1: the construction W_q, W_k = Ŵ X⁺ reaches P (float64)", header_style="bold"
    )
    for col in ("d", "n", "max |softmax((W_k X)ᵀ(W_q X)/√d) − P|"):
        table.add_column(col, justify="right")
    for d, n in ((4, 4), (16, 8), (64, 32), (128, 128)):
        x, p = random_instance(n, d, gen)
        w_q, w_k = theorem1_construction(x, p)
        table.add_row(str(d), str(n), sci((head_attention(x, w_q, w_k) - p).abs().max().item()))
    console.print(table)
    ce = counterexample()
    console.print(
        f"Counterexample d=1 < n=2, X=[1, 0], P=[[0.5, 0.75], [0.5, 0.25]]: over "
        f"{ce.n_tried} values of w = W_k·W_q the second column deviates from "
        f"[0.5, 0.5] by at most {ce.second_column_deviation:g}; the closest P̂ is "
        f"{ce.min_error:g} away in max-abs — unreachable."
    )
    return 0


def parse_configs(text: str) -> tuple[tuple[int, int, int], ...]:
    configs = []
    for item in text.split(","):
        parts = item.strip().split(":")
        if len(parts) != 3 or not all(x.strip().isdigit() for x in parts):
            raise ConfigError(f"--configs items are d:d_p:h (e.g. 8:4:4), got {item!r}")
        d, d_p, h = (int(x) for x in parts)
        configs.append((d, d_p, h))
    return tuple(configs)


def run_theorem2(args: argparse.Namespace, console: Console) -> int:
    from rich.table import Table

    from fullrank.analysis.theorem2 import FITS_TOL, theorem2_experiment

    n = args.n or 4
    start = time.perf_counter()
    rows = theorem2_experiment(
        parse_configs(args.configs),
        n=n,
        n_train=args.train_samples,
        restarts=args.restarts,
        max_iter=args.max_iter or 60,
        seed=args.seed,
    )
    elapsed = time.perf_counter() - start
    table = Table(
        title=f"Theorem 2: fitting the witness g_V (FixedMultiHead, n = {n}); relative "
        f"residual of the attention output",
        header_style="bold",
    )
    for col in (
        "d",
        "d_p",
        "h",
        "rank U",
        "rank V_o",
        "standard",
        "train",
        "held-out",
        "fixed",
        "train",
        "held-out",
        "result",
    ):
        table.add_column(col, justify="right")
    for r in rows:
        ok = r.conditions_hold and r.standard_cannot_fit and r.fixed_fits
        table.add_row(
            str(r.d),
            str(r.d_p),
            str(r.n_heads),
            str(r.rank_u),
            str(r.rank_v_o),
            f"{r.n_heads} × {r.standard.d_head}",
            sci(r.standard.train_residual),
            sci(r.standard.test_residual),
            f"{r.n_heads} × {r.fixed.d_head}",
            sci(r.fixed.train_residual),
            sci(r.fixed.test_residual),
            "[green]shown[/green]" if ok else "[red]not shown[/red]",
        )
    console.print(table)
    console.print(
        f"Compared: the attention output W_o·MultiHead(X) vs V_o·FixedMultiHead(X) "
        f"(LN(X + ·) is the same map on both). Fits: Levenberg–Marquardt, "
        f"{args.restarts} random starts, {args.train_samples} training inputs. "
        f"'shown' = conditions hold (rank U = d_p, rank V_o = d), the standard layer's "
        f"training residual > {1e3 * FITS_TOL:g} and the fixed layer's ≤ {FITS_TOL:g}. "
        f"{elapsed:.1f} s."
    )
    return 0


def run(args: argparse.Namespace) -> int:
    from fullrank.output import console as make_console

    console = make_console()
    for name in ("n", "d_model", "seeds", "restarts", "max_iter", "train_samples"):
        value = getattr(args, name)
        if value is not None and value <= 0:
            raise ConfigError(f"--{name.replace('_', '-')} must be positive, got {value}")
    if args.theorem == 1:
        return run_theorem1(args, console)
    if args.theorem == 2:
        return run_theorem2(args, console)
    check_out(args)
    if args.multihead:
        return run_multihead(args, console)
    return run_rank(args, console)
