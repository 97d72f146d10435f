"""``fullrank sweep SWEEP.yaml [KEY=VALUE …] [--dry-run] [--jobs N] [--executor …] [--out DIR]
[--report]``: train every point of a sweep file (resuming, skipping finished points; a point that
starts from another's checkpoint after it), score the ensembles it asks for, and tabulate and
plot it in each task's own figures."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from fullrank.cli.arguments import output_path

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

    from fullrank.sweeps.plan import Plan

EXECUTORS = ("local", "slurm", "submitit-local")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("sweep", help="sweep file, e.g. configs/sweeps/b20_fig3a_ptb.yaml")
    p.add_argument(
        "overrides",
        nargs="*",
        metavar="KEY=VALUE",
        help="overrides of every point, e.g. train.device=cuda. Precedence, lowest "
        "first: the base experiment, the sweep's 'set', the arm's settings, the "
        "point's axes, the sweep's 'steps', these overrides. The keys a sweep "
        "sets point by point (its axes, train.seed, match.solve_for, and "
        "train.init_from where an arm starts from another) cannot be overridden",
    )
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="validate every point's full config, print the points (parameters, "
        "FLOPs per token, matching), make the checks the run makes before it writes "
        "(--out, points trained there with other settings, --executor, GPUs) and stop. "
        "It writes nothing but the vocabularies it trains to count parameters, kept in "
        "data.cache_dir, where the runs then find them",
    )
    p.add_argument(
        "--commands",
        action="store_true",
        help="print each unfinished point's `fullrank train` command and stop (for torchrun or any "
        "launcher); the sweep's record and the vocabularies the commands load are written to --out first",
    )
    p.add_argument(
        "--report",
        action="store_true",
        help="re-aggregate the finished points (summary.md/.csv, plots; the ensembles "
        "whose seeds have finished) without training",
    )
    p.add_argument(
        "--jobs",
        type=int,
        default=1,
        help="points trained side by side on this machine, the cores divided (default 1)",
    )
    p.add_argument(
        "--executor",
        choices=EXECUTORS,
        default="local",
        help="local processes (default), one SLURM job per point through submitit, or "
        "submitit's local executor",
    )
    p.add_argument(
        "--submitit",
        nargs="*",
        default=[],
        metavar="KEY=VALUE",
        help="submitit parameters, e.g. slurm_partition=gpu timeout_min=240 cpus_per_task=8 gpus_per_node=1",
    )
    p.add_argument(
        "--gpus-per-point",
        type=int,
        default=1,
        help="with --executor slurm: GPUs per point, trained under torchrun",
    )
    p.add_argument(
        "--arms", nargs="*", default=None, help="only these arms (a prefix such as A takes every A_ arm)"
    )
    p.add_argument(
        "--out",
        type=output_path,
        default=None,
        help="output folder (default: the sweep's 'out', else runs/sweeps/NAME)",
    )
    p.add_argument("--quiet", action="store_true", help="no progress lines")


def run(args: argparse.Namespace) -> int:
    import shlex
    import sys

    from rich.console import Console
    from rich.table import Table

    from fullrank.errors import ConfigError, closest
    from fullrank.recipes.config import command_line_overrides, parse_assignment
    from fullrank.sweeps.plan import claim_output, finished, load_sweep, plan, read_manifest, train_command
    from fullrank.sweeps.run import run_ensembles, run_local, run_submitit

    console = Console(highlight=False)
    if not console.is_terminal:  # a log file: wide tables rather than wrapped cells
        console = Console(highlight=False, width=240)
    sweep = load_sweep(args.sweep)
    sweep = sweep.with_overrides(dict(command_line_overrides(args.overrides)))
    if args.jobs < 1:
        raise ConfigError(f"--jobs must be a positive integer, got {args.jobs}")
    out = Path(args.out) if args.out else sweep.default_out()
    the_plan = plan(sweep, out)
    if args.arms:
        chosen = []
        for w in args.arms:
            if "=" in w:  # --arms takes every word after it
                raise ConfigError(
                    f"--arms takes arm names, and '{w}' is an override; put KEY=VALUE overrides before --arms"
                )
            found = [a for a in sweep.arms if a == w or a.startswith(f"{w}_")]
            if not found:
                raise ConfigError(
                    f"no arm '{w}' in {sweep.path}{closest(w, sweep.arms)}; arms are: "
                    + ", ".join(sweep.arms)
                )
            chosen += [a for a in found if a not in chosen]
        for arm in list(chosen):  # and the arms whose checkpoints they start from
            while (arm := sweep.arms[arm].init_from or "") and arm not in chosen:
                chosen.append(arm)
        the_plan.points = [p for p in the_plan.points if p.arm in chosen]

    if args.dry_run:
        print_plan(the_plan, out, console, Table)
        if the_plan.unmatched:
            p = the_plan.unmatched[0]
            print(f"fullrank sweep: error: point {p.group} is {p.match}", file=sys.stderr)
            return 2
        check_start(the_plan, out, args.executor)  # what the run checks before it writes
        return 0
    if args.commands:  # the points' folder must hold what the commands read (the tokenizer)
        if the_plan.unmatched:
            p = the_plan.unmatched[0]
            raise ConfigError(f"{sweep.path}: point {p.group} is {p.match}")
        claim_output(the_plan, out)
        for p in the_plan.points:
            if not finished(out, p):
                console.print(shlex.join(train_command(p, out)), markup=False, soft_wrap=True)
        return 0
    if args.report:
        if read_manifest(out) is None:
            raise ConfigError(
                f"{out}: no sweep output here (no sweep.json); run the sweep first, or give --out"
            )
        run_ensembles(the_plan, out, console)
        return report(the_plan, out, console, Table)

    if the_plan.unmatched:
        p = the_plan.unmatched[0]
        raise ConfigError(
            f"{sweep.path}: point {p.group} is {p.match}; nothing was run (`--dry-run` lists every point)"
        )
    check_start(the_plan, out, args.executor)  # before anything is written
    claim_output(the_plan, out)
    if args.executor == "local":
        outcome = run_local(the_plan, out, jobs=args.jobs, console=console, progress=not args.quiet)
    else:
        params = dict(
            parse_assignment(item, "--submitit", "key=value (e.g. slurm_partition=gpu)")
            for item in args.submitit
        )
        outcome = run_submitit(
            the_plan,
            out,
            cluster="slurm" if args.executor == "slurm" else "local",
            parameters=params,
            gpus_per_point=args.gpus_per_point,
            console=console,
        )
    run_ensembles(the_plan, out, console)
    report(the_plan, out, console, Table)
    console.print(
        f"{len(outcome.done)} trained now, {len(outcome.skipped)} finished before, "
        f"{len(outcome.failed)} failed"
        + (f" ({', '.join(outcome.failed)}; logs in {out}/POINT/train.log)" if outcome.failed else "")
    )
    return 1 if outcome.failed else 0


def check_start(the_plan: Plan, out: Path, executor: str) -> None:
    """What a run of the sweep checks before it writes anything, and its dry run checks too: the
    executor can run here, a point asking for a GPU has one where it trains, and ``out`` may
    become the sweep's folder (:func:`~fullrank.sweeps.plan.check_output`: not a folder of other
    files or another sweep's, no point trained there with other settings). Writes nothing."""
    from fullrank.sweeps.plan import check_output
    from fullrank.sweeps.run import check_devices, check_executor

    check_executor(executor)
    if executor != "slurm":  # the points train on this machine
        check_devices(the_plan)
    check_output(the_plan, out)


def si(n: float) -> str:
    """``19_600 → '19.6K'``, ``1.23e9 → '1.23G'``."""
    for unit, scale in (("G", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:.3g}{unit}"
    return f"{n:g}"


def print_plan(the_plan: Plan, out: Path, console: Console, Table: type[Table]) -> None:
    from fullrank.sweeps.plan import coordinate, finished, value_text

    keys = the_plan.sweep.coordinate_keys()
    derived = [c for c in ("d_head", "d_ff") if f"model.{c}" not in keys]
    after = any(p.after for p in the_plan.points)
    table = Table(title=f"sweep {the_plan.sweep.name}: {len(the_plan.points)} points → {out}")
    for c in [
        "point",
        "arm",
        "task",
        *(k.rsplit(".", 1)[-1] for k in keys),
        *derived,
        "seeds",
        "params",
        "non-emb",
        "FLOPs/token",
        "match",
        *(["after"] if after else []),
        "finished",
    ]:
        table.add_column(
            c, justify="left" if c in ("point", "arm", "task", "match", "after") else "right", overflow="fold"
        )
    for group, points in the_plan.groups().items():
        p = points[0]
        values = {"d_head": p.model.head_sizes[0], "d_ff": p.model.d_ff}
        table.add_row(
            group,
            p.arm,
            p.task,
            *(value_text(coordinate(p, k)) for k in keys),
            *(str(values[c]) for c in derived),
            str(len(points)),
            f"{p.params:,}",
            f"{p.non_embedding:,}",
            si(p.flops),
            p.match,
            *([p.after.rsplit("-s", 1)[0] if p.after else "—"] if after else []),
            f"{sum(finished(out, q) for q in points)}/{len(points)}",
        )
    console.print(table)


def report(the_plan: Plan, out: Path, console: Console, Table: type[Table]) -> int:
    from fullrank.sweeps.report import markdown, write_plots, write_summary

    md, csv_path, rows = write_summary(the_plan, out)
    plots = write_plots(the_plan, rows, out)
    console.print(markdown(the_plan, rows), markup=False, soft_wrap=True)
    console.print(
        f"summary: {md}, {csv_path}" + (f"\nplots: {', '.join(str(p) for p in plots)}" if plots else "")
    )
    return 0
