"""A sweep's results: mean ± std (n) over seeds per row, in each task's own figures, as Markdown,
CSV and [B20]-style plots.

Each point's ``results.json`` (written by the recipe at the end of a run) gives its final
figures; which they are is its task's (:attr:`fullrank.recipes.recipe.Recipe.metrics`: perplexity
for language models, BLEU for translation, F1 for parsing and SQuAD, accuracy for
classification, MLM accuracy for pre-training). :func:`collect` gathers the seeds of each arm ×
coordinates and the ensembles scored of them (``OUT/ensembles/``), :func:`write_summary` writes
``summary.md`` (a table per task) and ``summary.csv``, :func:`write_plots` draws a metric
against heads, parameters or head size, one line per arm with the seed spread as error bars
(the layout of [B20] Figures 1, 3 and 4).
"""

from __future__ import annotations

import csv
import json
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fullrank.paths import atomic_path, write_text_atomic
from fullrank.recipes.run import recipe_of
from fullrank.sweeps.plan import DERIVED, Plan, PlotSpec, Point, coordinate, value_text

X_LABELS = {
    "params": "parameters",
    "non_embedding": "non-embedding parameters",
    "d_head": "head size d_head",
    "flops": "forward FLOPs per token",
    "model.n_heads": "number of heads n_heads",
    "model.d_model": "model width d_model",
    "model.d_head": "head size d_head",
    "model.d_ff": "feed-forward width d_ff",
}
ENSEMBLES = "ensembles"


def _lookup(node: Any, path: tuple[str, ...]) -> Any:
    """``node`` at ``path``; a part with ``{model}`` takes the averaged model's entry where there
    is one (``test.avg5``), else the last checkpoint's (``test.last``)."""
    for part in path:
        if not isinstance(node, dict):
            return None
        if "{model}" in part:
            prefix = part.split("{model}")[0]
            found = sorted(k for k in node if k.startswith(prefix + "avg")) + [prefix + "last"]
            node = next((node[k] for k in found if k in node), None)
        else:
            node = node.get(part)
    return node


def figures(task: str, results: dict[str, Any]) -> dict[str, float]:
    """Every figure of ``task`` that ``results`` (a ``results.json``) holds, by metric name; a
    metric over evaluation sets (``{set}``) once per set."""
    out: dict[str, float] = {}
    for name, (path, _, _) in recipe_of(task).metrics.items():
        if "{set}" in name:
            sets = _lookup(results, ("extra", "eval_sets")) or {}
            for s in sets:
                v = _lookup(results, tuple(p.replace("{set}", s) for p in path))
                if isinstance(v, (int, float)):
                    out[name.replace("{set}", s)] = float(v)
            continue
        v = _lookup(results, path)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            out[name] = float(v)
    return out


def label(task: str, metric: str) -> str:
    """The metric's label for tables and axes (``validation perplexity``)."""
    metrics = recipe_of(task).metrics
    if metric in metrics:
        return metrics[metric][1]
    for name, (_, text, _) in metrics.items():
        if "{set}" in name and metric.endswith(name.split("{set}")[1]):
            return text.replace("{set}", metric[: len(metric) - len(name.split("{set}")[1])])
    return metric


@dataclass
class Row:
    """One arm × coordinates: its points, the seeds' results that exist, and the ensembles
    scored of them (size → results)."""

    group: str
    points: list[Point]
    results: dict[str, dict[str, Any]]  # point name → results.json
    ensembles: dict[int, dict[str, Any]] = field(default_factory=dict)

    @property
    def first(self) -> Point:
        return self.points[0]

    @property
    def task(self) -> str:
        return self.first.task

    def values(self, metric: str) -> list[float]:
        return [v for r in self.results.values() if (v := figures(self.task, r).get(metric)) is not None]

    def stats(self, metric: str) -> tuple[float | None, float | None, int]:
        """Mean, sample standard deviation (``None`` below two values) and count."""
        vals = self.values(metric)
        if not vals:
            return None, None, 0
        return statistics.fmean(vals), statistics.stdev(vals) if len(vals) > 1 else None, len(vals)

    def ensemble(self, size: int, metric: str) -> float | None:
        found = self.ensembles.get(size)
        return figures(self.task, found).get(metric) if found else None


def ensemble_file(out: Path, group: str, size: int) -> Path:
    """Where the ensemble of a row's first ``size`` seeds is recorded."""
    return out / ENSEMBLES / f"{group}-k{size}" / "results.json"


def ensemble_sizes(plan: Plan, points: list[Point]) -> list[int]:
    """The ensembles the sweep asks of a row with ``points`` (none for a task without them)."""
    ask = plan.sweep.ensemble
    if not ask or not recipe_of(points[0].task).ensembles or len(points) < 2:
        return []
    sizes = [len(points)] if isinstance(ask, bool) else [k for k in ask if 2 <= k <= len(points)]
    return sorted(set(sizes))


def collect(plan: Plan, out: Path) -> list[Row]:
    """Every group of the plan with the ``results.json`` of its finished seeds."""
    rows = []
    for group, points in plan.groups().items():
        results = {}
        for p in points:
            f = out / p.name / "results.json"
            if f.is_file():
                results[p.name] = json.loads(f.read_text(encoding="utf-8"))
        ensembles = {
            k: json.loads(ensemble_file(out, group, k).read_text(encoding="utf-8"))
            for k in ensemble_sizes(plan, points)
            if ensemble_file(out, group, k).is_file()
        }
        rows.append(Row(group, points, results, ensembles))
    return rows


def metrics_present(rows: list[Row]) -> list[str]:
    """The metrics any of ``rows`` has, each task's own first."""
    seen: list[str] = []
    for r in rows:
        for results in r.results.values():
            seen += [m for m in figures(r.task, results) if m not in seen]
    return seen


def table(plan: Plan, rows: list[Row]) -> tuple[list[str], list[dict[str, Any]]]:
    """Columns and one record per row: the settings, the counts, mean/std/n of each metric, the
    ensembles' figures and any reference figures of the arm."""
    keys = list(dict.fromkeys(k for r in rows for k in r.first.coords))
    metrics = metrics_present(rows)
    refs = list(dict.fromkeys(k for ref in plan.sweep.reference.values() for k in ref))
    derived = [c for c in ("d_head", "d_ff") if f"model.{c}" not in keys]
    sizes = sorted({k for r in rows for k in r.ensembles})
    columns = [
        "point",
        "arm",
        "task",
        *keys,
        *derived,
        "params",
        "non_embedding",
        "flops_per_token",
        "match",
        "seeds",
        "n",
    ]
    for m in metrics:
        columns += [f"{m}_mean", f"{m}_std"]
    columns += [f"ensemble{k}_{m}" for k in sizes for m in metrics]
    columns += refs
    records = []
    for r in rows:
        p = r.first
        rec: dict[str, Any] = {
            "point": r.group,
            "arm": p.arm,
            "task": p.task,
            **{k: value_text(coordinate(p, k)) for k in keys},
            "d_head": p.model.head_sizes[0],
            "d_ff": p.model.d_ff,
            "params": p.params,
            "non_embedding": p.non_embedding,
            "flops_per_token": p.flops,
            "match": p.match,
            "seeds": len(r.points),
            "n": len(r.results),
        }
        for m in metrics:
            mean, std, _ = r.stats(m)
            rec[f"{m}_mean"], rec[f"{m}_std"] = mean, std
        for k in sizes:
            for m in metrics:
                rec[f"ensemble{k}_{m}"] = r.ensemble(k, m)
        rec = {k: v for k, v in rec.items() if k in columns}
        rec.update({k: plan.sweep.reference.get(p.arm, {}).get(k) for k in refs})
        records.append(rec)
    return columns, records


def _cell(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return f"{v:.4g}" if abs(v) < 1e4 else f"{v:,.0f}"
    if isinstance(v, int) and not isinstance(v, bool) and abs(v) >= 10_000:
        return f"{v:,}"
    return str(v)


def _fixed(v: float | None) -> str:
    return "" if v is None else f"{v:.2f}"


def _stat(row: Row, metric: str) -> str:
    mean, std, n = row.stats(metric)
    if mean is None:
        return ""
    return f"{mean:.2f} ± {std:.2f} ({n})" if std is not None else f"{mean:.2f} ({n})"


def markdown(plan: Plan, rows: list[Row]) -> str:
    """The summary: a table per task, each with its own figures as ``mean ± std (n)`` over the
    finished seeds, and ``ensemble of k`` columns where the sweep scores ensembles."""
    columns, records = table(plan, rows)
    parts = [f"# Sweep {plan.sweep.name}\n"]
    for task in dict.fromkeys(r.task for r in rows):
        mine = [(rec, row) for rec, row in zip(records, rows) if row.task == task]
        metrics = metrics_present([row for _, row in mine])
        keys = [
            c
            for c in columns
            if c not in ("task", "n", "match")
            and not c.endswith("_std")
            and not c.endswith("_mean")
            and not c.startswith("ensemble")
            and any(rec.get(c) is not None for rec, _ in mine)
        ]
        sizes = sorted({k for _, row in mine for k in row.ensembles})
        main = metrics[:2]  # the task's own figures, for the ensemble columns
        head = [
            *keys,
            *(label(task, m) for m in metrics),
            *(f"ensemble of {k}: {label(task, m)}" for k in sizes for m in main),
        ]
        lines = [f"## {task}", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for rec, row in mine:
            cells = [_cell(rec.get(c)) for c in keys] + [_stat(row, m) for m in metrics]
            cells += [_fixed(row.ensemble(k, m)) for k in sizes for m in main]
            lines.append("| " + " | ".join(cells) + " |")
        parts.append("\n".join(lines) + "\n")
    note = (
        "mean ± sample standard deviation over the finished seeds (n); `seeds` = seeds "
        "planned; an ensemble of k = the first k seeds' models decoded together. Counts "
        "from the closed forms, equal to the built models'.\n"
    )
    return "\n".join(parts) + "\n" + note


def write_summary(plan: Plan, out: Path) -> tuple[Path, Path, list[Row]]:
    """``summary.md`` and ``summary.csv`` under ``out``."""
    rows = collect(plan, out)
    columns, records = table(plan, rows)
    md, csv_path = out / "summary.md", out / "summary.csv"
    write_text_atomic(md, markdown(plan, rows))
    with atomic_path(csv_path) as tmp, open(tmp, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        writer.writerows({k: ("" if v is None else v) for k, v in rec.items()} for rec in records)
    return md, csv_path, rows


# ------------------------------------------------------------------------------------ plots
def default_plots(plan: Plan) -> list[PlotSpec]:
    """Metric against every numeric axis, against parameters, and against head size."""
    keys = plan.sweep.coordinate_keys()
    numeric = [k for k in keys if all(isinstance(coordinate(p, k), (int, float)) for p in plan.points)]
    specs = [PlotSpec(x=k) for k in numeric]
    specs.append(PlotSpec(x="params"))
    if "model.n_heads" in numeric and "model.d_head" not in numeric:
        specs.append(PlotSpec(x="d_head"))
    return specs


def _x_of(point: Point, x: str) -> float | None:
    if x in DERIVED:
        return float(DERIVED[x](point))
    v = coordinate(point, x)
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _power_of_two(values: list[float]) -> bool:
    return all(v > 0 and float(v).is_integer() and (int(v) & (int(v) - 1)) == 0 for v in values)


def _auto_metric(rows: list[Row]) -> list[str]:
    """Each task's own figure: the first of its metrics (:attr:`Recipe.metrics`) present."""
    out = []
    for task in dict.fromkeys(r.task for r in rows):
        present = metrics_present([r for r in rows if r.task == task])
        if present and present[0] not in out:
            out.append(present[0])
    return out


def write_plots(plan: Plan, rows: list[Row], out: Path) -> list[Path]:
    """One PNG per plot spec and metric (the sweep's ``plots``, else :func:`default_plots`;
    metric ``auto``: each task's own figure)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import EngFormatter, FuncFormatter, MaxNLocator, NullFormatter

    metrics = metrics_present(rows)
    written = []
    for spec in plan.sweep.plots or default_plots(plan):
        for metric in _auto_metric(rows) if spec.metric == "auto" else [spec.metric]:
            if metric not in metrics:
                continue
            lines: dict[str, list[tuple[float, float, float]]] = {}
            task = next(r.task for r in rows if r.values(metric))
            for r in rows:
                x = _x_of(r.first, spec.x)
                mean, std, _ = r.stats(metric)
                if x is None or mean is None:
                    continue
                name = (
                    r.first.arm
                    if spec.series == "arm"
                    else f"{spec.series.rsplit('.', 1)[-1]} = {value_text(coordinate(r.first, spec.series))}"
                )
                if spec.series != "arm" and len(plan.sweep.arms) > 1:
                    name = f"{r.first.arm}, {name}"
                lines.setdefault(name, []).append((x, mean, std or 0.0))
            if not lines:
                continue
            fig, ax = plt.subplots(figsize=(6.4, 4.4))
            for i, (name, pts) in enumerate(lines.items()):
                pts.sort()
                ax.errorbar(
                    [p[0] for p in pts],
                    [p[1] for p in pts],
                    yerr=[p[2] for p in pts],
                    marker="os^Dvx*"[i % 7],
                    ms=5,
                    capsize=3,
                    lw=1.6,
                    label=name,
                )
            xs = [p[0] for pts in lines.values() for p in pts]
            logx = spec.logx if spec.logx is not None else (_power_of_two(xs) and len(set(xs)) > 2)
            if spec.x in ("params", "non_embedding", "flops"):
                ax.xaxis.set_major_locator(MaxNLocator(6))
                ax.xaxis.set_major_formatter(EngFormatter(sep=""))  # 7.5k, 4.8M
            elif logx:
                ax.set_xscale("log", base=2)
                ax.set_xticks(sorted(set(xs)))
                ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
                ax.xaxis.set_minor_formatter(NullFormatter())
            elif all(float(x).is_integer() for x in xs) and len(set(xs)) <= 12:
                ax.set_xticks(sorted(set(xs)))  # the swept values themselves
            ax.set_xlabel(X_LABELS.get(spec.x, spec.x))
            ax.set_ylabel(label(task, metric))
            n = max(len(r.results) for r in rows)
            ax.set_title(
                f"{plan.sweep.name}: {label(task, metric)} vs "
                f"{X_LABELS.get(spec.x, spec.x)}\nmean ± std over up to {n} "
                f"seed{'s' if n != 1 else ''}",
                fontsize=10,
            )
            ax.grid(alpha=0.3)
            ax.legend(fontsize=9)
            fig.tight_layout()
            series = "" if spec.series == "arm" else f"_by_{spec.series.rsplit('.', 1)[-1]}"
            path = out / f"{metric}_vs_{spec.x.rsplit('.', 1)[-1]}{series}.png"
            with atomic_path(path) as tmp:
                fig.savefig(tmp, dpi=120)
            plt.close(fig)
            written.append(path)
    return written
