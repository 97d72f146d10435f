"""Metrics: one JSON line per record in ``metrics.jsonl`` and TensorBoard event files in ``tb/``,
and the loss/perplexity curves as a PNG."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from fullrank.data.text import loads_json
from fullrank.errors import DataError
from fullrank.paths import atomic_path, write_text_atomic

METRICS_FILE = "metrics.jsonl"
RESULTS_FILE = "results.json"


class MetricsLogger:
    """Appends ``{"step", "split", …}`` records; on resume, drops records past the checkpoint's
    step (work that the killed run did after its last save) so the curves have no doubles.

    The TensorBoard writer opens with the first record (each opening starts a new events file):
    a finished run run again logs nothing and so leaves no empty events file."""

    def __init__(self, run_dir: Path, *, resume_step: int = 0, enabled: bool = True) -> None:
        self.enabled = enabled
        self.run_dir, self.resume_step = run_dir, resume_step
        self.path = run_dir / METRICS_FILE
        self._tb: Any = None
        if not enabled:
            return
        run_dir.mkdir(parents=True, exist_ok=True)
        if self.path.exists():
            kept = [
                line
                for line in self.path.read_text(encoding="utf-8", errors="replace").splitlines()
                if _step_of(line) <= resume_step
            ]
            write_text_atomic(self.path, "".join(k + "\n" for k in kept))  # a kill keeps the old

    def log(self, step: int, split: str, **values: Any) -> None:
        if not self.enabled:
            return
        record = {"step": step, "split": split, **values}
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")
        if self._tb is None:
            from torch.utils.tensorboard import SummaryWriter  # heavy import, only when logging

            self._tb = SummaryWriter(
                str(self.run_dir / "tb"), purge_step=self.resume_step + 1 if self.resume_step else None
            )
        for k, v in values.items():
            if isinstance(v, (int, float)) and math.isfinite(v):
                self._tb.add_scalar(f"{split}/{k}", v, step)

    def close(self) -> None:
        if self._tb is not None:
            self._tb.close()


def _step_of(line: str) -> float:
    """The step of a metrics record; infinity for a line that is not one (a record torn by a
    killed run, which a resume drops)."""
    try:
        record = loads_json(line)
        return float(record["step"])
    except (ValueError, TypeError, KeyError):
        return math.inf


def read_metrics(run_dir: Path) -> list[dict[str, Any]]:
    path = Path(run_dir) / METRICS_FILE
    if not path.is_file():
        raise DataError(f"{path}: no metrics file; is {run_dir} a run directory of `fullrank train`?")
    records = []
    for i, line in enumerate(path.read_bytes().decode("utf-8", "replace").splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = loads_json(line)
        except ValueError:
            record = None
        if not isinstance(record, dict) or "step" not in record or "split" not in record:
            raise DataError(
                f"{path}:{i}: not a metrics record (a line torn by a killed run?); delete the line"
            )
        records.append(record)
    return records


def plain_log_ticks(axis: Any) -> None:
    """Plain numbers ("6", "10") on a log-scaled matplotlib ``axis`` instead of "6×10⁰"; minor
    ticks are labelled only while the axis spans less than about two decades."""
    from matplotlib.ticker import LogFormatter

    axis.set_major_formatter(LogFormatter())
    axis.set_minor_formatter(LogFormatter(labelOnlyBase=False, minor_thresholds=(2, 0.5)))


# validation scores in percent that a run may log (BERT pre-training, classification, SQuAD)
SCORES = {
    "mlm_acc": "MLM accuracy",
    "nsp_acc": "NSP accuracy",
    "accuracy": "accuracy",
    "em": "exact match",
    "f1": "F1",
}


def read_final(run_dir: Path) -> tuple[int, dict[str, Any]] | None:
    """``(step, valid)`` of a finished run's ``results.json``: the exact validation figure over the
    whole validation set at its last step; ``None`` before the run has finished, or where it has no
    validation figure (SQuAD reports its test part alone)."""
    try:
        results = loads_json((Path(run_dir) / RESULTS_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    valid = results.get("valid") if isinstance(results, dict) else None
    if not isinstance(valid, dict) or not any(k in valid for k in ("loss", *SCORES)):
        return None
    return int(results.get("steps", 0)), valid


def plot_run(
    run_dir: Path, out: Path | None = None, *, final: tuple[int, dict[str, Any]] | None = None
) -> Path:
    """Loss (train and validation), validation perplexity and, where logged, validation scores
    against step, as a PNG (default ``RUN_DIR/curves.png``); see :func:`curves_figure`.
    ``final`` defaults to the figure in the run's ``results.json`` (:func:`read_final`)."""
    import matplotlib.pyplot as plt

    fig = curves_figure(
        read_metrics(run_dir), final or read_final(run_dir), title=Path(run_dir).resolve().name
    )
    out = out or Path(run_dir) / "curves.png"
    with atomic_path(out) as tmp:
        fig.savefig(tmp, dpi=110)
    plt.close(fig)
    return out


# what one unit of validation loss is averaged over, by the count a record gives
LOSS_UNITS = {"tokens": "token", "predictions": "masked prediction", "examples": "example"}


def _scored(record: dict[str, Any]) -> tuple[int, str] | None:
    """How much of the validation data a record scored: ``(count, unit)`` — tokens, the predicted
    positions of masked-LM pre-training, classified examples or SQuAD questions — or ``None``
    where it does not say."""
    for unit in (*LOSS_UNITS, "questions"):
        if record.get(unit) is not None:
            return int(record[unit]), unit
    return None


def curves_figure(
    records: list[dict[str, Any]], final: tuple[int, dict[str, Any]] | None, *, title: str = ""
) -> Any:
    """The matplotlib figure of :func:`plot_run`: loss; validation perplexity (``ppl``, or
    ``mlm_ppl`` for BERT pre-training) where a run logs one; and validation scores in percent
    (:data:`SCORES`) where it logs those.

    The periodic validation points (``records``, from ``metrics.jsonl``) may cover only the first
    ``train.eval_batches`` batches: an estimate, labelled with its count. ``final`` —
    ``(step, {"loss", "ppl", "tokens"})`` — is the exact figure over the whole validation set
    at the end, the one the run reports: drawn as a star, labelled with its value."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    valid = [r for r in records if r["split"] == "valid"]
    finals = [final[1]] if final is not None else []
    ppl_key = "mlm_ppl" if any("mlm_ppl" in r for r in valid + finals) else "ppl"
    has_ppl = any(ppl_key in r for r in valid + finals)
    scores = [k for k in SCORES if any(k in r for r in valid)]
    panels = 1 + has_ppl + bool(scores)
    fig, grid = plt.subplots(1, panels, figsize=(5.5 * panels, 4.2), squeeze=False)
    axes = list(grid[0])
    ax_loss = axes[0]
    ax_ppl = axes[1] if has_ppl else None
    ax_scores = axes[-1] if scores else None
    train = [r for r in records if r["split"] == "train" and "loss" in r]
    if train:
        ax_loss.plot(
            [r["step"] for r in train],
            [r["loss"] for r in train],
            "-",
            label="train loss (mean since the previous point)",
        )
    periodic = [r for r in valid if "loss" in r]
    unit = next((c[1] for r in periodic + finals if (c := _scored(r)) is not None), None)
    if periodic:
        count = _scored(periodic[-1])
        whole = final is not None and count is not None and count == _scored(final[1])
        everything = "text" if unit == "tokens" else "set"
        where = (
            f"on the whole validation {everything}"
            if whole
            else f"on the first {count[0]:,} validation {count[1]}"
            if count
            else "on validation data"
        )
        ax_loss.plot(
            [r["step"] for r in periodic],
            [r["loss"] for r in periodic],
            "o-",
            color="C1",
            markersize=3,
            label=f"valid loss, periodic, {where}",
        )
        rows = [r for r in periodic if ppl_key in r]
        if ax_ppl is not None and rows:
            what = "MLM perplexity, periodic" if ppl_key == "mlm_ppl" else "periodic"
            ax_ppl.plot(
                [r["step"] for r in rows],
                [r[ppl_key] for r in rows],
                "o-",
                color="C1",
                markersize=3,
                label=f"{what}, {where}",
            )
    if final is not None:
        step, v = final
        scored = _scored(v)
        over = f"{scored[0]:,} {scored[1]}" if scored else "the whole validation set"
        for ax, key, digits in ((ax_loss, "loss", 3), (ax_ppl, ppl_key, 2)):
            if ax is not None and key in v:
                ax.plot(
                    [step],
                    [v[key]],
                    "*",
                    color="C3",
                    markersize=13,
                    zorder=5,
                    label=f"final, exact: {v[key]:.{digits}f} over {over}",
                )
                ax.annotate(
                    f"{v[key]:.{digits}f}",
                    (step, v[key]),
                    textcoords="offset points",
                    xytext=(-8, 9),
                    ha="right",
                    color="C3",
                    fontsize=9,
                )
    nsp = any("nsp_acc" in r for r in valid)  # masked LM and next sentence summed: no one unit
    per = f"nats per {LOSS_UNITS[unit]}" if unit in LOSS_UNITS and not nsp else "nats"
    ax_loss.set(xlabel="step", ylabel=f"loss ({per})", title="loss")
    if ax_ppl is not None:
        ax_ppl.set(xlabel="step", ylabel="perplexity", title="validation perplexity", yscale="log")
        plain_log_ticks(ax_ppl.yaxis)
    if ax_scores is not None:
        for i, key in enumerate(scores):
            rows = [r for r in valid if key in r]
            ax_scores.plot(
                [r["step"] for r in rows],
                [r[key] for r in rows],
                "o-",
                color=f"C{i + 2}",
                label=f"valid {SCORES[key]}",
                markersize=3,
            )
            if final is not None and key in final[1]:
                ax_scores.plot(
                    [final[0]],
                    [final[1][key]],
                    "*",
                    color=f"C{i + 2}",
                    markersize=13,
                    zorder=5,
                    label=f"final {SCORES[key]}, exact: {final[1][key]:.2f}",
                )
        ax_scores.set(xlabel="step", ylabel="percent", title="validation scores")
    for ax in axes:
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig
