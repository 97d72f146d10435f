"""Running a sweep's points: side by side on this machine, or as cluster jobs through submitit.

Each point is a separate ``fullrank train`` process (``resume=auto``: a killed point continues
from its last checkpoint; a point with a ``results.json`` is not started again). A point that
starts from another point's checkpoint (``init_from``) starts once that one has finished, and is
skipped when it failed. Locally, :func:`run_local` keeps ``jobs`` processes going with the cores
divided between them (``train.threads``), one progress line per running point read from its
``metrics.jsonl``, its output in ``OUT/POINT/train.log``. :func:`run_submitit` hands each point
to submitit — one SLURM job per point (``cluster="slurm"``) or submitit's local executor — a
plain ``fullrank train`` in each, or ``torchrun`` for a point on several GPUs.
:func:`run_ensembles` then scores the ensembles the sweep asks for.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from fullrank.errors import ConfigError
from fullrank.fast.workers import num_threads
from fullrank.paths import write_text_atomic
from fullrank.recipes.run import recipe_of
from fullrank.sweeps.plan import Plan, Point, finished, own_threads, train_command
from fullrank.sweeps.report import ensemble_file, ensemble_sizes, figures, label
from fullrank.training.distributed import pick_device

POLL_S = 1.0


@dataclass
class Outcome:
    """What a run of the sweep did: points trained now, skipped (finished before), failed."""

    done: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)  # point → one-line reason


def python_command(
    point: Point, plan: Plan, out: Path, *, threads: int | None = None, gpus: int = 1
) -> list[str]:
    """The point's ``fullrank train`` through this Python (``torchrun`` for several GPUs)."""
    cmd = train_command(point, out, threads=threads)[1:]  # without "fullrank"
    if gpus > 1:
        return [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            f"--nproc_per_node={gpus}",
            "-m",
            "fullrank",
            *cmd,
        ]
    return [sys.executable, "-m", "fullrank", *cmd]


def available_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def last_line(path: Path) -> str:
    """The last non-empty line of a log, for a one-line failure report."""
    if not path.is_file():
        return "no output"
    lines = [x.strip() for x in path.read_text(encoding="utf-8", errors="replace").splitlines() if x.strip()]
    return lines[-1][:300] if lines else "no output"


def _progress_of(run_dir: Path) -> tuple[int, float | None]:
    """The last logged training step and loss of a run (0, None before the first log line)."""
    metrics = run_dir / "metrics.jsonl"
    if not metrics.is_file():
        return 0, None
    step, loss = 0, None
    for line in metrics.read_text(encoding="utf-8").splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue  # a line being written
        if rec.get("split") == "train":
            step, loss = int(rec.get("step", step)), rec.get("loss", loss)
    return step, loss


def _summary_line(point: Point, run_dir: Path) -> str:
    """The point's own figures (its task's first two) and minutes, for the ``done`` line."""
    results = json.loads((run_dir / "results.json").read_text(encoding="utf-8"))
    found = figures(point.task, results)
    parts = [f"{label(point.task, m)} {v:.2f}" for m, v in list(found.items())[:2]]
    return ", ".join(parts + [f"{results.get('seconds', 0) / 60:.1f} min"])


def _to_train(plan: Plan, out: Path) -> tuple[Outcome, list[Point]]:
    """The points to train, and an outcome that lists the finished ones as skipped."""
    outcome = Outcome()
    pending: list[Point] = []
    for p in plan.points:
        if finished(out, p):
            outcome.skipped.append(p.name)
        else:
            pending.append(p)
    return outcome, pending


def _ready(pending: list[Point], out: Path, outcome: Outcome, console: Console) -> list[Point]:
    """The pending points whose ``init_from`` point has finished (those whose one failed are
    moved to ``outcome.failed``)."""
    for p in [p for p in pending if p.after in outcome.failed]:
        pending.remove(p)
        outcome.failed[p.name] = f"starts from {p.after}, which failed"
        console.print(f"skipped {p.name}: it starts from {p.after}, which failed")
    names = {p.name for p in pending}
    return [
        p
        for p in pending
        if p.after is None or (p.after not in names and (out / p.after / "results.json").is_file())
    ]


def run_local(
    plan: Plan,
    out: Path,
    *,
    jobs: int = 1,
    cores: int | None = None,
    console: Console | None = None,
    progress: bool = True,
) -> Outcome:
    """Train every unfinished point, ``jobs`` at a time, each on ``cores // jobs`` threads.

    On a machine with several GPUs, job slot ``i`` sees GPU ``i mod count`` alone
    (``CUDA_VISIBLE_DEVICES``). Ctrl-C stops the running points (their checkpoints stay; the
    next run resumes them)."""
    console = console or Console(highlight=False)
    outcome, pending = _to_train(plan, out)
    if not pending:
        return outcome
    jobs = max(1, min(jobs, len(pending)))
    threads = max(1, (cores or available_cores()) // jobs)
    gpus = _gpu_count()
    running: dict[int, tuple[Point, subprocess.Popen, Any, int]] = {}  # slot → point, process
    free = list(range(jobs))
    bars = Progress(
        TextColumn("{task.description}"),
        BarColumn(bar_width=24),
        TextColumn("{task.completed}/{task.total} steps {task.fields[loss]}"),
        TimeElapsedColumn(),
        console=console,
        disable=not progress,
        transient=True,
    )
    tasks: dict[str, Any] = {}
    own = {own_threads(p) for p in pending}
    share = f"{threads} thread{'s' if threads > 1 else ''}"
    each = (
        share
        if own == {None}
        else f"train.threads={own.pop()}"
        if len(own) == 1
        else f"its own train.threads, or {share}"
    )
    console.print(
        f"{len(pending)} points to train ({len(outcome.skipped)} finished before), "
        f"{jobs} at a time, each on {each}"
    )
    try:
        with bars:
            while pending or running:
                ready = _ready(pending, out, outcome, console)
                if not ready and not running:  # left: points whose init_from never finished
                    for p in pending:
                        outcome.failed[p.name] = f"starts from {p.after}, which did not finish"
                    break
                while ready and free:
                    slot, point = free.pop(0), ready.pop(0)
                    pending.remove(point)
                    run_dir = out / point.name
                    run_dir.mkdir(parents=True, exist_ok=True)
                    log = open(run_dir / "train.log", "a", encoding="utf-8")
                    env = dict(os.environ)
                    if gpus > 1 and "CUDA_VISIBLE_DEVICES" not in os.environ:
                        env["CUDA_VISIBLE_DEVICES"] = str(slot % gpus)
                    proc = subprocess.Popen(
                        python_command(point, plan, out, threads=threads),
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        env=env,
                    )
                    running[slot] = (point, proc, log, 0)
                    assert point.experiment is not None
                    tasks[point.name] = bars.add_task(point.name, total=point.experiment.train.steps, loss="")
                time.sleep(POLL_S)
                for slot, (point, proc, log, _) in list(running.items()):
                    step, loss = _progress_of(out / point.name)
                    bars.update(
                        tasks[point.name],
                        completed=step,
                        loss=f"· loss {loss:.3f}" if loss is not None else "",
                    )
                    if proc.poll() is None:
                        continue
                    log.close()
                    bars.remove_task(tasks.pop(point.name))
                    del running[slot]
                    free.append(slot)
                    if proc.returncode == 0 and finished(out, point):
                        outcome.done.append(point.name)
                        console.print(f"done   {point.name}: {_summary_line(point, out / point.name)}")
                    else:
                        reason = f"exit {proc.returncode}: {last_line(out / point.name / 'train.log')}"
                        outcome.failed[point.name] = reason
                        console.print(f"failed {point.name} ({reason}); the others go on")
    finally:
        for _point, proc, log, _ in running.values():  # interrupted: stop what this call started
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            log.close()
    return outcome


def _gpu_count() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def check_executor(executor: str) -> None:
    """One :class:`ConfigError` line unless ``executor`` (``local``, ``slurm``,
    ``submitit-local``) can run here: submitit installed, and for ``slurm`` SLURM's ``sbatch``
    on the ``PATH``."""
    if executor == "local":
        return
    if importlib.util.find_spec("submitit") is None:
        raise ConfigError(
            f"--executor {executor} needs submitit (pip install submitit), which "
            f"is not installed; or use --executor local"
        )
    if executor == "slurm" and shutil.which("sbatch") is None:
        raise ConfigError(
            "--executor slurm: no SLURM here (sbatch is not on the PATH); run the "
            "sweep on a SLURM login node, or use --executor local"
        )


def check_devices(plan: Plan) -> None:
    """One :class:`ConfigError` line when a point asks for ``train.device=cuda`` and this
    machine, where the points are to train, has no GPU: before any point starts."""
    if any(p.experiment is not None and p.experiment.train.device == "cuda" for p in plan.points):
        pick_device("cuda", option="train.device")


def run_submitit(
    plan: Plan,
    out: Path,
    *,
    cluster: str,
    parameters: dict[str, Any],
    gpus_per_point: int = 1,
    console: Console | None = None,
    wait: bool = True,
) -> Outcome:
    """Submit every unfinished point as one job through submitit and wait for them (a point
    that starts from another's checkpoint is submitted once that one has finished).

    ``cluster``: ``"slurm"`` (one SLURM job per point) or ``"local"`` (submitit's local
    executor, for trying a sweep's submission on one machine). ``parameters`` go to
    ``AutoExecutor.update_parameters`` (``timeout_min``, ``slurm_partition``,
    ``cpus_per_task``, ``gpus_per_node``, …). A job runs the point's plain ``fullrank train``
    (through ``torchrun`` when ``gpus_per_point > 1``)."""
    console = console or Console(highlight=False)
    outcome, pending = _to_train(plan, out)
    while pending:  # in waves: a point goes once the point it starts from has finished
        ready = _ready(pending, out, outcome, console)
        if not ready:
            for p in pending:
                outcome.failed[p.name] = f"starts from {p.after}, which did not finish"
            break
        for p in ready:
            pending.remove(p)
        _submit(
            plan,
            out,
            ready,
            outcome,
            cluster=cluster,
            parameters=parameters,
            gpus_per_point=gpus_per_point,
            console=console,
            wait=wait or bool(pending),
        )
    return outcome


def _submit(
    plan: Plan,
    out: Path,
    pending: list[Point],
    outcome: Outcome,
    *,
    cluster: str,
    parameters: dict[str, Any],
    gpus_per_point: int,
    console: Console,
    wait: bool,
) -> None:
    """Submit ``pending`` as one job each; with ``wait``, wait and record what they did."""
    import submitit
    from submitit.helpers import CommandFunction

    executor = submitit.AutoExecutor(folder=out / ".submitit" / "%j", cluster=cluster)
    params = {"name": plan.sweep.name, "timeout_min": 24 * 60, **parameters}
    if gpus_per_point > 1:
        params.setdefault("gpus_per_node", gpus_per_point)
    executor.update_parameters(**params)
    threads = params.get("cpus_per_task") or (
        None if cluster != "local" else max(1, available_cores() // len(pending))
    )
    jobs = []
    with executor.batch():
        for point in pending:
            cmd = python_command(point, plan, out, threads=threads, gpus=gpus_per_point)
            jobs.append(executor.submit(CommandFunction(cmd, cwd=os.getcwd(), verbose=False)))
    by_job = {id(job): point for job, point in zip(jobs, pending)}
    ids = ", ".join(str(j.job_id) for j in jobs)
    console.print(
        f"submitted {len(jobs)} points through submitit ({cluster}): jobs {ids}; logs "
        f"under {out / '.submitit'}"
    )
    if not wait:
        return
    for job in submitit.helpers.as_completed(jobs):
        point = by_job[id(job)]
        try:
            job.result()
        except Exception as e:  # a failed job: reported, the others go on
            lines = [x for x in str(e).splitlines() if x.strip()]
            outcome.failed[point.name] = lines[-1][:300] if lines else type(e).__name__
            console.print(f"failed {point.name} ({outcome.failed[point.name]}); the others go on")
            continue
        if finished(out, point):
            outcome.done.append(point.name)
            console.print(f"done   {point.name}: {_summary_line(point, out / point.name)}")
        else:
            outcome.failed[point.name] = "the job ended without results.json"


def run_ensembles(plan: Plan, out: Path, console: Console | None = None) -> list[Path]:
    """Score the ensembles the sweep asks for (``ensemble``) whose seeds have all finished and
    that are not scored yet: ``OUT/ensembles/GROUP-kK/`` (outputs and ``results.json``), on the
    thread count the members were trained with (``train.threads``; PyTorch's otherwise)."""
    console = console or Console(highlight=False)
    written = []
    for group, points in plan.groups().items():
        for k in ensemble_sizes(plan, points):
            record = ensemble_file(out, group, k)
            members = points[:k]
            if record.is_file() or not all(finished(out, p) for p in members):
                continue
            assert members[0].experiment is not None

            def say(line: str, group: str = group) -> None:
                console.print(f"{group}: {line}", markup=False)

            exp = members[0].experiment
            with num_threads(exp.train.threads):  # the members' own count (train.threads), if set
                results = recipe_of(members[0].task).ensemble(
                    exp, [out / p.name for p in members], record.parent, say=say
                )
            write_text_atomic(record, json.dumps({"members": [p.name for p in members], **results}, indent=1))
            written.append(record)
    return written
