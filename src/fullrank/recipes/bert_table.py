"""Reproduce the scaled-down [B20] BERT comparison (Tables 2 and 3) end to end, and tabulate it.

    python -m fullrank.recipes.bert_table --jobs 4                    # the whole table
    python -m fullrank.recipes.bert_table --scale 0.02 --finetune-seeds 1   # a smoke run

What it runs (each as ``fullrank train``, in its own process, ``--jobs`` at a time; a run whose
``results.json`` exists is skipped, a killed one resumes):

1. one WordPiece vocabulary for every model (``OUT/wordpiece.json``), trained as the pre-training
   recipe trains it, so that all models read the same tokens;
2. every pre-training config of ``configs/bert/table2`` and ``configs/bert/table3``, for
   ``--pretrain-seeds`` seeds;
3. for each pre-trained model, MNLI (``configs/bert/mnli.yaml``) and SQuAD
   (``configs/bert/squad.yaml``) fine-tuning for ``--finetune-seeds`` seeds — and the same
   model fine-tuned *without* pre-training (``train.init_weights=false``: same architecture and
   tokenizer, random weights);
4. ``--results`` (default ``docs/bert-results.md``): mean ± std over seeds, the number of runs,
   total and non-embedding parameters, minutes, and the command of each row.

``--scale`` multiplies every run's steps (and warm-up, evaluation and save intervals) for quick
checks; ``--set KEY=VALUE`` adds an override to every run (e.g. ``data.root=…``).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fullrank.recipes.config import apply_overrides, parse_experiment, read_file

TASKS = ("mnli", "squad")


@dataclass
class Job:
    """One ``fullrank train`` run of the table."""

    name: str
    config: Path
    overrides: list[str]
    group: str  # "pretrain", "mnli" or "squad"
    model: str  # the pre-training config's stem
    pretrained: bool = True
    seed: int = 0
    after: str | None = None  # the pre-training job this one starts from
    out: Path = field(default_factory=Path)

    @property
    def run_dir(self) -> Path:
        return self.out / self.name

    @property
    def done(self) -> bool:
        return (self.run_dir / "results.json").is_file()

    def command(self, python: str = "python") -> list[str]:
        return [python, "-m", "fullrank", "train", str(self.config), *self.overrides,
                "resume=auto", "--quiet"]


def scaled(config: Path, scale: float, extra: Sequence[str]) -> list[str]:
    """Overrides that multiply the config's steps, warm-up and intervals by ``scale``."""
    if scale == 1.0:
        return []
    exp = parse_experiment(apply_overrides(read_file(config), list(extra)), str(config))
    t = exp.train
    steps = max(1, round(t.steps * scale))
    return [f"train.steps={steps}", f"train.warmup={min(steps, math.ceil(t.warmup * scale))}",
            f"train.eval_every={max(1, round(t.eval_every * scale))}",
            f"train.save_every={max(1, round(t.save_every * scale))}",
            f"train.log_every={max(1, min(t.log_every, steps))}"]


def plan(configs: Path, out: Path, *, vocab: Path, device: str, threads: int,
         pretrain_seeds: int, finetune_seeds: int, scale: float, extra: Sequence[str],
         only: Sequence[str]) -> list[Job]:
    """Every job of the table, pre-training first."""
    common = [f"out_dir={out}", f"train.device={device}", f"train.threads={threads}", *extra]
    pre_cfgs = sorted((configs / "table2").glob("*.yaml")) + sorted((configs / "table3").glob("*.yaml"))
    pre_cfgs = [c for c in pre_cfgs if not only or c.stem in only]
    jobs: list[Job] = []
    for cfg in pre_cfgs:
        for s in range(pretrain_seeds):
            name = f"pre_{cfg.stem}_s{s}"
            jobs.append(Job(name, cfg, [f"name={name}", f"train.seed={s}",
                                        f"data.tokenizer_file={vocab.resolve()}", *common,
                                        *scaled(cfg, scale, extra)],
                            "pretrain", cfg.stem, seed=s, out=out))
    for cfg in pre_cfgs:
        for task in TASKS:
            task_cfg = configs / f"{task}.yaml"
            steps = scaled(task_cfg, scale, extra)
            for s_pre in range(pretrain_seeds):
                pre = f"pre_{cfg.stem}_s{s_pre}"
                for s in range(finetune_seeds):
                    name = f"{task}_{cfg.stem}_p{s_pre}_s{s}"
                    jobs.append(Job(name, task_cfg, [f"name={name}", f"train.seed={s}",
                                                     f"train.init_from={out / pre}", *common, *steps],
                                    task, cfg.stem, seed=s, after=pre, out=out))
            pre = f"pre_{cfg.stem}_s0"  # the baseline takes its architecture and tokenizer
            for s in range(finetune_seeds):
                name = f"{task}_{cfg.stem}_scratch_s{s}"
                jobs.append(Job(name, task_cfg, [f"name={name}", f"train.seed={s}",
                                                 f"train.init_from={out / pre}",
                                                 "train.init_weights=false", *common, *steps],
                                task, cfg.stem, pretrained=False, seed=s, after=pre, out=out))
    return jobs


def run_jobs(jobs: Sequence[Job], n_parallel: int, log: Any = print) -> dict[str, int]:
    """Run the jobs not yet done, ``n_parallel`` at a time, each after its pre-training; return
    the exit status of each run started (output in ``OUT/logs/NAME.log``)."""
    status: dict[str, int] = {}
    todo = [j for j in jobs if not j.done]
    finished = {j.name for j in jobs if j.done}
    failed: set[str] = set()
    running: dict[Future, Job] = {}

    def launch(pool: ThreadPoolExecutor, job: Job) -> None:
        logs = job.out / "logs"
        logs.mkdir(parents=True, exist_ok=True)

        def call() -> int:
            with open(logs / f"{job.name}.log", "a", encoding="utf-8") as f:
                return subprocess.run(job.command(sys.executable), stdout=f, stderr=subprocess.STDOUT,
                                      env={**os.environ, "PYTHONUNBUFFERED": "1"}).returncode
        log(f"start {job.name}")
        running[pool.submit(call)] = job

    with ThreadPoolExecutor(max_workers=max(1, n_parallel)) as pool:
        while todo or running:
            ready = [j for j in todo if j.after is None or j.after in finished]
            for job in [j for j in todo if j.after in failed]:
                todo.remove(job)
                failed.add(job.name)
                log(f"skip  {job.name}: {job.after} failed")
            while ready and len(running) < n_parallel:
                job = ready.pop(0)
                todo.remove(job)
                launch(pool, job)
            if not running:
                continue
            done, _ = wait(list(running), return_when=FIRST_COMPLETED)
            for fut in done:
                job = running.pop(fut)
                status[job.name] = fut.result()
                (finished if status[job.name] == 0 else failed).add(job.name)
                log(f"{'done ' if status[job.name] == 0 else 'FAIL '} {job.name} "
                    f"(exit {status[job.name]}; log {job.out / 'logs' / (job.name + '.log')})")
    return status


# ----------------------------------------------------------------------------------- table
def _results(job: Job) -> dict[str, Any] | None:
    path = job.run_dir / "results.json"
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def mean_std(values: Sequence[float]) -> str:
    if not values:
        return "—"
    if len(values) == 1:
        return f"{values[0]:.2f}"
    return f"{statistics.mean(values):.2f} ± {statistics.stdev(values):.2f}"


def _command(job: Job) -> str:
    """The row's command, seed-free (``{S}`` = the seed) and with ``$OUT`` for the driver's
    ``--out``."""
    shown = []
    for o in job.overrides:
        if o.startswith(("train.device=", "train.threads=")):
            continue
        if o.startswith("name="):
            o = o.removesuffix(f"_s{job.seed}") + "_s{S}"
        elif o == f"train.seed={job.seed}":
            o = "train.seed={S}"
        shown.append(o.replace(str(job.out), "$OUT"))
    return " ".join(["fullrank", "train", str(job.config), *shown])


def table(jobs: Sequence[Job]) -> str:
    """The Markdown results: pre-training, then fine-tuning with and without pre-training."""
    models = list(dict.fromkeys(j.model for j in jobs))
    pre = {m: [j for j in jobs if j.group == "pretrain" and j.model == m] for m in models}
    lines = ["## Pre-training (WikiText-2, MLM + NSP; validation pairs with fixed masks)", "",
             "| model | d_model | heads × d_head | params | non-embedding | MLM acc % | MLM ppl "
             "| NSP acc % | n | minutes | command |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for m in models:
        runs = [(j, r) for j in pre[m] if (r := _results(j)) is not None]
        if not runs:
            continue
        j0, r0 = runs[0]
        model = load_run_model(j0.run_dir)
        lines.append(
            f"| {m} | {model['d_model']} | {model['n_heads']} × {model['d_head']} | "
            f"{r0['params']:,} | {r0['extra'].get('non_embedding_params', 0):,} | "
            f"{mean_std([r['valid']['mlm_acc'] for _, r in runs])} | "
            f"{mean_std([r['valid']['mlm_ppl'] for _, r in runs])} | "
            f"{mean_std([r['valid']['nsp_acc'] for _, r in runs])} | {len(runs)} | "
            f"{statistics.mean(r['seconds'] for _, r in runs) / 60:.1f} | "
            f"`{_command(j0)}` |")
    lines += ["", "## Fine-tuning (mean ± std over seeds; `scratch` = the same model without "
                  "pre-training)", "",
              "| model | init | MNLI dev | MNLI hard m | MNLI hard mm | SNLI hard | n | SQuAD EM | "
              "SQuAD F1 | n | minutes (MNLI / SQuAD) |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for m in models:
        for pretrained in (True, False):
            mnli = [r for j in jobs if j.group == "mnli" and j.model == m and j.pretrained == pretrained
                    if (r := _results(j)) is not None]
            squad = [r for j in jobs if j.group == "squad" and j.model == m and j.pretrained == pretrained
                     if (r := _results(j)) is not None]
            if not mnli and not squad:
                continue

            def acc(name: str) -> str:
                if name == "valid":
                    return mean_std([r["valid"]["accuracy"] for r in mnli if r.get("valid")])
                return mean_std([r["extra"]["eval_sets"][name]["accuracy"] for r in mnli
                                 if name in r["extra"].get("eval_sets", {})])
            minutes = " / ".join(f"{statistics.mean(r['seconds'] for r in rs) / 60:.1f}" if rs else "—"
                                 for rs in (mnli, squad))
            lines.append(
                f"| {m} | {'pre-trained' if pretrained else 'scratch'} | {acc('valid')} | "
                f"{acc('mnli_hard_matched')} | {acc('mnli_hard_mismatched')} | {acc('snli_hard')} | "
                f"{len(mnli)} | {mean_std([r['test']['em'] for r in squad if r.get('test')])} | "
                f"{mean_std([r['test']['f1'] for r in squad if r.get('test')])} | {len(squad)} | "
                f"{minutes} |")
    examples = {g: next((j for j in jobs if j.group == g and j.pretrained), None) for g in TASKS}
    lines += ["", "Commands: `{S}` is the seed, `$OUT` the driver's `--out`; a fine-tuning row "
                  "repeats its command for each pre-trained model (`train.init_from`), and the "
                  "scratch rows add `train.init_weights=false`:", ""]
    lines += [f"- {g}: `{_command(j)}`" for g, j in examples.items() if j is not None]
    return "\n".join(lines) + "\n"


def load_run_model(run_dir: Path) -> dict[str, Any]:
    """``d_model``, ``n_heads`` and the resolved ``d_head`` of a run's model."""
    import yaml

    model = yaml.safe_load((run_dir / "config.yaml").read_text(encoding="utf-8"))["model"]
    d_head = model.get("d_head") or model["d_model"] // model["n_heads"]
    return {"d_model": model["d_model"], "n_heads": model["n_heads"], "d_head": d_head}


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m fullrank.recipes.bert_table",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--configs", default="configs/bert", type=Path)
    ap.add_argument("--out", default="runs/bert-table", type=Path, help="run directories")
    ap.add_argument("--results", default="docs/bert-results.md", type=Path)
    ap.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    ap.add_argument("--jobs", type=int, default=1, help="runs side by side")
    ap.add_argument("--threads", type=int, default=0,
                    help="CPU threads per run (default: the CPUs divided among --jobs)")
    ap.add_argument("--pretrain-seeds", type=int, default=1)
    ap.add_argument("--finetune-seeds", type=int, default=3)
    ap.add_argument("--scale", type=float, default=1.0, help="multiply every run's steps")
    ap.add_argument("--only", nargs="*", default=[], help="pre-training configs (stems) to run")
    ap.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE",
                    help="overrides for every run, e.g. data.root=/data")
    ap.add_argument("--table-only", action="store_true", help="run nothing; write the table")
    args = ap.parse_args(argv)
    threads = args.threads or max(1, (os.cpu_count() or 2) // max(args.jobs, 1))
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    vocab = out / "wordpiece.json"
    jobs = plan(args.configs, out, vocab=vocab, device=args.device, threads=threads,
                pretrain_seeds=args.pretrain_seeds, finetune_seeds=args.finetune_seeds,
                scale=args.scale, extra=args.set, only=args.only)
    if not args.table_only:
        if not vocab.is_file():
            from fullrank.recipes.bert import train_wordpiece

            base = parse_experiment(apply_overrides(read_file(args.configs / "pretrain.yaml"),
                                                    list(args.set)), "pretrain.yaml")
            train_wordpiece(base.data, vocab)  # type: ignore[arg-type]
            print(f"vocabulary: {vocab}")
        start = time.perf_counter()
        status = run_jobs(jobs, args.jobs)
        print(f"{len(status)} runs in {(time.perf_counter() - start) / 60:.1f} min, "
              f"{sum(1 for s in status.values() if s)} failed")
    args.results.parent.mkdir(parents=True, exist_ok=True)
    args.results.write_text(table(jobs), encoding="utf-8")
    print(f"table: {args.results}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
