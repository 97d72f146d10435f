"""Metrics: one JSON line per record in ``metrics.jsonl`` and TensorBoard event files in ``tb/``,
and the loss/perplexity curves as a PNG."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from fullrank.errors import DataError

METRICS_FILE = "metrics.jsonl"


class MetricsLogger:
    """Appends ``{"step", "split", …}`` records; on resume, drops records past the checkpoint's
    step (work that the killed run did after its last save) so the curves have no doubles."""

    def __init__(self, run_dir: Path, *, resume_step: int = 0, enabled: bool = True) -> None:
        self.enabled = enabled
        self.path = run_dir / METRICS_FILE
        self._tb = None
        if not enabled:
            return
        run_dir.mkdir(parents=True, exist_ok=True)
        if self.path.exists():
            kept = [line for line in self.path.read_text(encoding="utf-8", errors="replace")
                    .splitlines() if _step_of(line) <= resume_step]
            self.path.write_text("".join(k + "\n" for k in kept), encoding="utf-8")
        from torch.utils.tensorboard import SummaryWriter  # heavy import, only when logging

        self._tb = SummaryWriter(str(run_dir / "tb"), purge_step=resume_step + 1 if resume_step else None)

    def log(self, step: int, split: str, **values: Any) -> None:
        if not self.enabled:
            return
        record = {"step": step, "split": split, **values}
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")
        if self._tb is not None:
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
        record = json.loads(line)
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
            record = json.loads(line)
        except ValueError:
            record = None
        if not isinstance(record, dict) or "step" not in record or "split" not in record:
            raise DataError(f"{path}:{i}: not a metrics record (a line torn by a killed run?); "
                            f"delete the line")
        records.append(record)
    return records


def plain_log_ticks(axis: Any) -> None:
    """Plain numbers ("6", "10") on a log-scaled matplotlib ``axis`` instead of "6×10⁰"; minor
    ticks are labelled only while the axis spans less than about two decades."""
    from matplotlib.ticker import LogFormatter

    axis.set_major_formatter(LogFormatter())
    axis.set_minor_formatter(LogFormatter(labelOnlyBase=False, minor_thresholds=(2, 0.5)))


# validation scores in percent that a run may log (BERT pre-training, classification, SQuAD)
SCORES = {"mlm_acc": "MLM accuracy", "nsp_acc": "NSP accuracy", "accuracy": "accuracy",
          "em": "exact match", "f1": "F1"}


def plot_run(run_dir: Path, out: Path | None = None) -> Path:
    """Loss (train and validation), validation perplexity (``ppl``, or ``mlm_ppl`` for BERT
    pre-training) and, where logged, validation scores in percent (:data:`SCORES`) against step,
    as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    records = read_metrics(run_dir)
    out = out or Path(run_dir) / "curves.png"
    valid = [r for r in records if r["split"] == "valid"]
    ppl_key = "mlm_ppl" if any("mlm_ppl" in r for r in valid) else "ppl"
    scores = [k for k in SCORES if any(k in r for r in valid)]
    panels = 2 + bool(scores)
    fig, axes = plt.subplots(1, panels, figsize=(5.5 * panels, 4))
    ax_loss, ax_ppl = axes[0], axes[1]
    for split, style in (("train", "-"), ("valid", "o-")):
        rows = [r for r in records if r["split"] == split and "loss" in r]
        if rows:
            ax_loss.plot([r["step"] for r in rows], [r["loss"] for r in rows], style,
                         label=f"{split} loss", markersize=3)
    rows = [r for r in valid if ppl_key in r]
    if rows:
        ax_ppl.plot([r["step"] for r in rows], [r[ppl_key] for r in rows], "o-", color="C1",
                    label="valid MLM perplexity" if ppl_key == "mlm_ppl" else "valid perplexity",
                    markersize=3)
    ax_loss.set(xlabel="step", ylabel="loss (nats per token)", title="loss")
    ax_ppl.set(xlabel="step", ylabel="perplexity", title="validation perplexity", yscale="log")
    plain_log_ticks(ax_ppl.yaxis)
    if scores:
        for i, key in enumerate(scores):
            rows = [r for r in valid if key in r]
            axes[2].plot([r["step"] for r in rows], [r[key] for r in rows], "o-", color=f"C{i + 2}",
                         label=f"valid {SCORES[key]}", markersize=3)
        axes[2].set(xlabel="step", ylabel="percent", title="validation scores")
    for ax in axes:
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend()
    fig.suptitle(Path(run_dir).resolve().name)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
