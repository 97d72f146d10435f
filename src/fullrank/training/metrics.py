"""Metrics: one JSON line per record in ``metrics.jsonl`` and TensorBoard event files in ``tb/``,
and the loss/perplexity curves as a PNG."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from fullrank.errors import DataError

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
            kept = [line for line in self.path.read_text(encoding="utf-8").splitlines()
                    if line.strip() and json.loads(line).get("step", 0) <= resume_step]
            self.path.write_text("".join(k + "\n" for k in kept), encoding="utf-8")

    def log(self, step: int, split: str, **values: Any) -> None:
        if not self.enabled:
            return
        record = {"step": step, "split": split, **values}
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")
        if self._tb is None:
            from torch.utils.tensorboard import SummaryWriter  # heavy import, only when logging

            self._tb = SummaryWriter(str(self.run_dir / "tb"),
                                     purge_step=self.resume_step + 1 if self.resume_step else None)
        for k, v in values.items():
            if isinstance(v, (int, float)) and math.isfinite(v):
                self._tb.add_scalar(f"{split}/{k}", v, step)

    def close(self) -> None:
        if self._tb is not None:
            self._tb.close()


def read_metrics(run_dir: Path) -> list[dict[str, Any]]:
    path = Path(run_dir) / METRICS_FILE
    if not path.is_file():
        raise DataError(f"{path}: no metrics file; is {run_dir} a run directory of `fullrank train`?")
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def plain_log_ticks(axis: Any) -> None:
    """Plain numbers ("6", "10") on a log-scaled matplotlib ``axis`` instead of "6×10⁰"; minor
    ticks are labelled only while the axis spans less than about two decades."""
    from matplotlib.ticker import LogFormatter

    axis.set_major_formatter(LogFormatter())
    axis.set_minor_formatter(LogFormatter(labelOnlyBase=False, minor_thresholds=(2, 0.5)))


def read_final(run_dir: Path) -> tuple[int, dict[str, Any]] | None:
    """``(step, valid)`` of a finished run's ``results.json``: the exact validation figure over the
    whole validation text at its last step; ``None`` before the run has finished."""
    try:
        results = json.loads((Path(run_dir) / RESULTS_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    valid = results.get("valid") if isinstance(results, dict) else None
    if not isinstance(valid, dict) or "loss" not in valid:
        return None
    return int(results.get("steps", 0)), valid


def plot_run(run_dir: Path, out: Path | None = None, *,
             final: tuple[int, dict[str, Any]] | None = None) -> Path:
    """Loss (train and validation) and validation perplexity against step, as a PNG
    (default ``RUN_DIR/curves.png``); see :func:`curves_figure`. ``final`` defaults to the figure
    in the run's ``results.json`` (:func:`read_final`)."""
    import matplotlib.pyplot as plt

    fig = curves_figure(read_metrics(run_dir), final or read_final(run_dir),
                        title=Path(run_dir).resolve().name)
    out = out or Path(run_dir) / "curves.png"
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def curves_figure(records: list[dict[str, Any]], final: tuple[int, dict[str, Any]] | None, *,
                  title: str = "") -> Any:
    """The matplotlib figure of :func:`plot_run`.

    The periodic validation points (``records``, from ``metrics.jsonl``) may cover only the first
    ``train.eval_batches`` batches: an estimate, labelled with its token count. ``final`` —
    ``(step, {"loss", "ppl", "tokens"})`` — is the exact figure over the whole validation text
    at the end, the one the run reports: drawn as a star, labelled with its value."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_loss, ax_ppl) = plt.subplots(1, 2, figsize=(11, 4.2))
    train = [r for r in records if r["split"] == "train" and "loss" in r]
    if train:
        ax_loss.plot([r["step"] for r in train], [r["loss"] for r in train], "-",
                     label="train loss (mean since the previous point)")
    valid = [r for r in records if r["split"] == "valid" and "loss" in r]
    if valid:
        tokens = valid[-1].get("tokens")
        whole = final is not None and tokens == final[1].get("tokens")
        where = ("on the whole validation text" if whole else
                 f"on the first {tokens:,} validation tokens" if tokens else "on validation data")
        steps = [r["step"] for r in valid]
        ax_loss.plot(steps, [r["loss"] for r in valid], "o-", color="C1", markersize=3,
                     label=f"valid loss, periodic, {where}")
        ax_ppl.plot(steps, [r["ppl"] for r in valid], "o-", color="C1", markersize=3,
                    label=f"periodic, {where}")
    if final is not None:
        step, v = final
        over = f"{v['tokens']:,} tokens" if "tokens" in v else "the whole validation text"
        for ax, key, digits in ((ax_loss, "loss", 3), (ax_ppl, "ppl", 2)):
            ax.plot([step], [v[key]], "*", color="C3", markersize=13, zorder=5,
                    label=f"final, exact: {v[key]:.{digits}f} over {over}")
            ax.annotate(f"{v[key]:.{digits}f}", (step, v[key]), textcoords="offset points",
                        xytext=(-8, 9), ha="right", color="C3", fontsize=9)
    ax_loss.set(xlabel="step", ylabel="loss (nats per token)", title="loss")
    ax_ppl.set(xlabel="step", ylabel="perplexity", title="validation perplexity", yscale="log")
    plain_log_ticks(ax_ppl.yaxis)
    for ax in (ax_loss, ax_ppl):
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig
