"""A sweep's results: mean ± std (n) over seeds per point, as Markdown, CSV and [B20]-style plots.

Each point's ``results.json`` (written by the recipe at the end of a run) gives its final
validation and test figures; :func:`aggregate` averages the seeds of each arm × coordinates,
:func:`write_summary` writes ``summary.md`` and ``summary.csv``, :func:`write_plots` draws
metric against heads, parameters or head size, one line per arm with the seed spread as error
bars (the layout of [B20] Figures 1, 3 and 4).
"""

from __future__ import annotations

import csv
import json
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fullrank.paths import atomic_path, write_text_atomic
from fullrank.recipes.sweep import DERIVED, Plan, PlotSpec, Point, coordinate, value_text

# metric → (where in results.json, label for tables and axes); BLEU is the last checkpoint's
METRICS: dict[str, tuple[tuple[str, ...], str]] = {
    "valid_ppl": (("valid", "ppl"), "validation perplexity"),
    "test_ppl": (("test", "ppl"), "test perplexity"),
    "valid_loss": (("valid", "loss"), "validation loss (nats/token)"),
    "test_loss": (("test", "loss"), "test loss (nats/token)"),
    "valid_bleu": (("extra", "bleu", "valid.last", "sacrebleu"), "validation BLEU"),
    "test_bleu": (("extra", "bleu", "test.last", "sacrebleu"), "test BLEU"),
}
X_LABELS = {"params": "parameters", "non_embedding": "non-embedding parameters",
            "d_head": "head size d_head", "flops": "forward FLOPs per token",
            "model.n_heads": "number of heads n_heads", "model.d_model": "model width d_model",
            "model.d_head": "head size d_head", "model.d_ff": "feed-forward width d_ff"}


def metric_of(results: dict[str, Any], name: str) -> float | None:
    node: Any = results
    for part in METRICS[name][0]:
        node = node.get(part) if isinstance(node, dict) else None
    return float(node) if isinstance(node, (int, float)) else None


@dataclass
class Row:
    """One arm × coordinates: its points, and the seeds' results that exist."""

    group: str
    points: list[Point]
    results: dict[int, dict[str, Any]]  # seed → results.json

    @property
    def first(self) -> Point:
        return self.points[0]

    def values(self, metric: str) -> list[float]:
        return [v for r in self.results.values() if (v := metric_of(r, metric)) is not None]

    def stats(self, metric: str) -> tuple[float | None, float | None, int]:
        """Mean, sample standard deviation (``None`` below two values) and count."""
        vals = self.values(metric)
        if not vals:
            return None, None, 0
        return statistics.fmean(vals), statistics.stdev(vals) if len(vals) > 1 else None, len(vals)


def collect(plan: Plan, out: Path) -> list[Row]:
    """Every group of the plan with the ``results.json`` of its finished seeds."""
    rows = []
    for group, points in plan.groups().items():
        results = {}
        for p in points:
            f = out / p.name / "results.json"
            if f.is_file():
                results[p.seed] = json.loads(f.read_text(encoding="utf-8"))
        rows.append(Row(group, points, results))
    return rows


def metrics_present(rows: list[Row]) -> list[str]:
    return [m for m in METRICS if any(r.values(m) for r in rows)]


def table(plan: Plan, rows: list[Row]) -> tuple[list[str], list[dict[str, Any]]]:
    """Columns and one record per row: the settings, the counts, mean/std/n of each metric and
    any reference figures of the arm."""
    keys = list(dict.fromkeys(k for r in rows for k in r.first.coords))
    metrics = metrics_present(rows)
    refs = list(dict.fromkeys(k for ref in plan.sweep.reference.values() for k in ref))
    derived = [c for c in ("d_head", "d_ff") if f"model.{c}" not in keys]
    columns = ["point", "arm", *keys, *derived, "params", "non_embedding",
               "flops_per_token", "match", "seeds", "n"]
    for m in metrics:
        columns += [f"{m}_mean", f"{m}_std"]
    columns += refs
    records = []
    for r in rows:
        p = r.first
        rec: dict[str, Any] = {"point": r.group, "arm": p.arm,
                               **{k: value_text(coordinate(p, k)) for k in keys},
                               "d_head": p.model.head_sizes[0], "d_ff": p.model.d_ff,
                               "params": p.params, "non_embedding": p.non_embedding,
                               "flops_per_token": p.flops, "match": p.match,
                               "seeds": len(r.points), "n": len(r.results)}
        for m in metrics:
            mean, std, _ = r.stats(m)
            rec[f"{m}_mean"], rec[f"{m}_std"] = mean, std
        rec = {k: v for k, v in rec.items() if k in columns or k.startswith(tuple(metrics))}
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


def markdown(plan: Plan, rows: list[Row]) -> str:
    """The summary table: a metric is ``mean ± std (n)`` over the finished seeds."""
    columns, records = table(plan, rows)
    metrics = metrics_present(rows)
    shown = [c for c in columns if not c.endswith(("_mean", "_std")) and c not in ("n", "match")]
    head = [*shown, *metrics]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for rec, row in zip(records, rows):
        cells = [_cell(rec[c]) for c in shown]
        for m in metrics:
            mean, std, n = row.stats(m)
            cells.append("" if mean is None else
                         f"{mean:.2f} ± {std:.2f} ({n})" if std is not None else f"{mean:.2f} ({n})")
        lines.append("| " + " | ".join(cells) + " |")
    title = f"# Sweep {plan.sweep.name}\n\n"
    note = ("\nmean ± sample standard deviation over the finished seeds (n); `seeds` = seeds "
            "planned. Counts from the closed forms, equal to the built models'.\n")
    return title + "\n".join(lines) + "\n" + note


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
    numeric = [k for k in keys if all(isinstance(coordinate(p, k), (int, float))
                                      for p in plan.points)]
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


def write_plots(plan: Plan, rows: list[Row], out: Path) -> list[Path]:
    """One PNG per plot spec (the sweep's ``plots``, else :func:`default_plots`)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import EngFormatter, FuncFormatter, MaxNLocator, NullFormatter

    metrics = metrics_present(rows)
    if not metrics:
        return []
    written = []
    for spec in plan.sweep.plots or default_plots(plan):
        metric = spec.metric if spec.metric != "auto" else next(
            m for m in ("test_ppl", "valid_ppl", "valid_bleu", "test_bleu", "valid_loss")
            if m in metrics or m == "valid_loss")
        if metric not in metrics:
            continue
        lines: dict[str, list[tuple[float, float, float]]] = {}
        for r in rows:
            x = _x_of(r.first, spec.x)
            mean, std, _ = r.stats(metric)
            if x is None or mean is None:
                continue
            label = r.first.arm if spec.series == "arm" else \
                f"{spec.series.rsplit('.', 1)[-1]} = {value_text(coordinate(r.first, spec.series))}"
            if spec.series != "arm" and len(plan.sweep.arms) > 1:
                label = f"{r.first.arm}, {label}"
            lines.setdefault(label, []).append((x, mean, std or 0.0))
        if not lines:
            continue
        fig, ax = plt.subplots(figsize=(6.4, 4.4))
        for i, (label, pts) in enumerate(lines.items()):
            pts.sort()
            ax.errorbar([p[0] for p in pts], [p[1] for p in pts], yerr=[p[2] for p in pts],
                        marker="os^Dvx*"[i % 7], ms=5, capsize=3, lw=1.6, label=label)
        xs = [p[0] for pts in lines.values() for p in pts]
        logx = spec.logx if spec.logx is not None else (_power_of_two(xs) and len(set(xs)) > 2)
        if spec.x in ("params", "non_embedding", "flops"):
            ax.xaxis.set_major_locator(MaxNLocator(6))
            ax.xaxis.set_major_formatter(EngFormatter(sep=""))  # 7.5k, 4.8M
        elif logx:
            ax.set_xscale("log", base=2)
            ticks = sorted(set(xs))
            ax.set_xticks(ticks)
            ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
            ax.xaxis.set_minor_formatter(NullFormatter())
        elif all(float(x).is_integer() for x in xs) and len(set(xs)) <= 12:
            ax.set_xticks(sorted(set(xs)))  # the swept values themselves
        ax.set_xlabel(X_LABELS.get(spec.x, spec.x))
        ax.set_ylabel(METRICS[metric][1])
        n = max(len(r.results) for r in rows)
        ax.set_title(f"{plan.sweep.name}: {METRICS[metric][1]} vs {X_LABELS.get(spec.x, spec.x)}"
                     f"\nmean ± std over up to {n} seed{'s' if n != 1 else ''}", fontsize=10)
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

