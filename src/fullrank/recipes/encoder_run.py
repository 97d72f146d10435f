"""What the encoder recipes (``bert``, ``classify``, ``squad``) share: the run's device, resume
point, starting checkpoint and tokenizer; building the model with the task's heads; the header
line; and writing ``results.json`` and the curves at the end."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from rich.console import Console
from torch import nn

from fullrank import fast
from fullrank.data.tokenizers import Tokenizer, ensure_vocab_matches
from fullrank.errors import ConfigError
from fullrank.models.encoder import EncoderConfig
from fullrank.recipes.common import Resume, RunReport, find_resume_point, prepare_tokenizer
from fullrank.recipes.config import ExperimentConfig, resolved_yaml
from fullrank.recipes.init import Start, build_initialised, find_start, start_config
from fullrank.training.checkpoints import latest_checkpoint
from fullrank.training.distributed import DistInfo, setup, teardown
from fullrank.training.loop import RunOutput, TrainResult, train
from fullrank.training.metrics import plot_run


@dataclass
class EncoderRun:
    """One encoder run being set up: see :func:`open_run`."""

    exp: ExperimentConfig
    dist: DistInfo
    resume_from: Path | None
    start: Start | None
    tok: Tokenizer
    console: Console

    @property
    def run_dir(self) -> Path:
        return self.exp.run_dir

    def say(self, text: str) -> None:
        if self.dist.is_main:
            self.console.print(text, markup=False, highlight=False, soft_wrap=True)

    def build(self, **fields: Any) -> tuple[nn.Module, EncoderConfig]:
        """The model (with ``fields``, e.g. ``n_classes``, set), initialised from ``seed`` and
        then from ``train.init_from`` (unless resuming)."""
        cfg = start_config(self.exp, self.start, self.tok.vocab_size, **fields)
        assert isinstance(cfg, EncoderConfig)
        ensure_vocab_matches(self.tok, cfg.vocab_size, f"model.vocab_size in {self.exp.name}")
        model = build_initialised(cfg, self.exp, self.start, resuming=self.resume_from is not None,
                                  rank=self.dist.rank, say=self.say)
        return model, cfg

    def header(self, cfg: EncoderConfig, data_line: str) -> None:
        """The run's first lines: size, heads, tokenizer, data, where it resumes from."""
        if not self.dist.is_main:
            return
        dh, dv = cfg.head_sizes
        self.console.print(
            f"[bold]{self.exp.name}[/bold] ({self.exp.task}): {cfg.num_params():,} parameters "
            f"({cfg.non_embedding_params():,} outside the embeddings) · {cfg.n_layers} layers · "
            f"d_model {cfg.d_model} · {cfg.n_heads} heads × d_head {dh} · seq_len {cfg.seq_len} · "
            f"{self.tok.kind} vocabulary of {self.tok.vocab_size}", soft_wrap=True)
        if self.dist.device.type == "cpu":
            self.console.print(fast.matmul_summary(self.exp.train.fast_matmul, self.exp.train.precision))
            self.console.print(fast.memory_summary())
        self.say(data_line + (f" · resuming from {self.resume_from.name}" if self.resume_from else ""))

    def output(self, cfg: EncoderConfig, **extra: Any) -> RunOutput:
        """Where the run writes, with what every checkpoint records besides the weights
        (:meth:`meta`) and the resolved ``config.yaml``."""
        return RunOutput(self.run_dir, cfg, self.tok, self.meta(**extra),
                         config_yaml=resolved_yaml(self.exp, cfg))

    def train(self, model: nn.Module, cfg: EncoderConfig, task: Any, batches: Any,
              out: RunOutput, *, progress: bool,
              evaluate: Callable[[nn.Module], dict[str, float]] | None) -> RunReport:
        """Train ``model`` on ``batches`` inside the speed engine (:func:`fullrank.fast.cpu`;
        oneDNN's products only on the CPU and where ``train.fast_matmul`` asks for them), leave
        the process group, and return the run's report (:meth:`report`)."""
        train_cfg = self.exp.train
        onednn = train_cfg.fast_matmul and self.dist.device.type == "cpu"
        with fast.cpu(model, onednn=onednn):
            result = train(model, task, batches, train_cfg, dist=self.dist, out=out,
                           resume_from=self.resume_from, progress=progress,
                           d_model=cfg.d_model, evaluate=evaluate)
        teardown()  # every rank together; what follows is rank 0's alone
        return self.report(result, cfg, out)

    def meta(self, **extra: Any) -> dict[str, Any]:
        """What every checkpoint of the run records besides the weights."""
        return {"task": self.exp.task, "experiment": self.exp.to_dict(),
                "init_from": str(self.start.path) if self.start else None,
                "init_weights": self.exp.train.init_weights, **extra}

    def report(self, result: TrainResult, cfg: EncoderConfig, out: RunOutput) -> RunReport:
        """The run's report after training: steps, time, parameters (total and outside the
        embeddings), the last checkpoint."""
        report = RunReport(str(self.run_dir), result.state.step, result.seconds, cfg.num_params(),
                           checkpoint=str(result.checkpoint or latest_checkpoint(out.checkpoints)))
        report.extra["non_embedding_params"] = cfg.non_embedding_params()
        return report

    def finish(self, report: RunReport) -> None:
        """``results.json`` and ``curves.png`` in the run directory (rank 0)."""
        report.extra["curves"] = str(plot_run(self.run_dir))
        report.extra["finished"] = time.strftime("%Y-%m-%d %H:%M:%S")
        (self.run_dir / "results.json").write_text(json.dumps(report.__dict__, indent=1),
                                                   encoding="utf-8")
        self.say(f"trained {report.steps} steps in {report.seconds / 60:.1f} min; results in "
                 f"{self.run_dir / 'results.json'}")


def open_run(exp: ExperimentConfig, resume: Resume, console: Console | None,
             tokenizer_files: Callable[[], Sequence[Path]] | None = None) -> EncoderRun:
    """Set up an encoder run: device and process group, the resume point, the
    ``train.init_from`` checkpoint and the tokenizer (the run's own when resuming, the
    checkpoint's, ``data.tokenizer_file``, or one trained on ``tokenizer_files()``)."""
    console = console or Console(highlight=False)
    dist = setup(exp.train.device)
    if exp.train.threads:
        torch.set_num_threads(exp.train.threads)
    resume_from = find_resume_point(exp.run_dir, resume, resume_from=exp.train.resume_from,
                                    dist=dist,
                                    log=lambda line: console.print(line, markup=False))
    start = find_start(exp)
    if start is None and not exp.data.tokenizer_file and tokenizer_files is None:
        raise ConfigError(f"task '{exp.task}' fine-tunes a model: set train.init_from (a "
                          f"pre-trained checkpoint, which brings its tokenizer) or "
                          f"data.tokenizer_file")
    files = list(tokenizer_files()) if (tokenizer_files is not None and start is None
                                        and not exp.data.tokenizer_file
                                        and not (resume_from and (exp.run_dir / "tokenizer.json").is_file())
                                        and dist.is_main) else []
    tok = prepare_tokenizer(exp, files, exp.run_dir, dist, resuming=resume_from is not None,
                            start=start.tokenizer if start else None)
    return EncoderRun(exp, dist, resume_from, start, tok, console)
