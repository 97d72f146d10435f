"""The training settings of one run (the ``train:`` section of an experiment file)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from fullrank.errors import ConfigError

Schedule = Literal["noam", "rsqrt", "linear", "cosine", "constant"]


@dataclass(frozen=True, kw_only=True)
class TrainConfig:
    """How to train. Defaults follow [V17] §5.3 (Adam 0.9/0.98/1e-9, Noam warm-up 4000).

    Attributes:
        steps: optimizer steps to take.
        batch_size: sequences per global batch (language models), split over ranks; for
            translation the batch is set by ``data.max_tokens`` and this is unused.
        grad_accum: global batches accumulated into one optimizer step.
        optimizer: ``"adam"`` or ``"adamw"`` (decoupled weight decay, never on biases/norms).
        lr: peak learning rate; for ``noam`` a multiplier of ``d_model^-0.5·min(…)`` ([V17] eq. 3).
        betas, eps: Adam moments and epsilon.
        weight_decay: decoupled weight decay ([B20] uses 0.01).
        schedule: ``noam`` ([V17] eq. 3), ``rsqrt`` (linear warm-up then ``1/√step``, [B20] LM),
            ``linear`` (warm-up then linear decay to 0, [B20] BERT), ``cosine`` (warm-up then
            cosine to ``min_lr``), ``constant`` (after warm-up).
        warmup: warm-up steps.
        min_lr: floor of the cosine schedule.
        label_smoothing: ε_ls ([V17] §5.4: 0.1 for translation).
        clip_grad: max global gradient norm, or ``None``.
        eval_every, eval_batches: evaluate every N steps on at most this many batches
            (``None`` = the whole validation file, exact per-token perplexity).
        save_every, keep_last: checkpoint every N steps; keep the last K (a checkpoint written
            off the interval when a session stops is dropped once the resumed run saves again).
        log_every: metrics line every N steps.
        seed: seeds model initialisation, data order and dropout.
        precision: ``"fp32"`` or ``"bf16"`` (autocast; master weights stay fp32).
        compile: wrap the model with ``torch.compile``.
        device: ``"auto"`` (CUDA if available), ``"cpu"`` or ``"cuda"``.
        threads: CPU threads for PyTorch (``0`` = leave PyTorch's default).
        max_minutes: stop (evaluate, save) after this much wall time, counted across resumes
            (a resumed run whose time is spent takes no step); the schedule still follows
            ``steps``. ``None`` = no limit.
        parallel: how ``torchrun`` processes share the work: ``"ddp"`` (each holds the whole
            model and optimizer; gradients are averaged) or ``"fsdp"`` (PyTorch FSDP2: each
            holds 1/N of the parameters, gradients and optimizer state, gathered layer by layer
            when needed; for a model that does not fit one device). Alone, no effect.
        fast_matmul: route CPU float32 matrix multiplies through oneDNN where that keeps
            float32 accuracy on this CPU (measured once per process; elsewhere, e.g. CPUs
            with AMX, it would compute in bfloat16 and is left off; see
            :mod:`fullrank.runtime`). No effect on GPUs.
    """

    steps: int = 1000
    batch_size: int = 32
    grad_accum: int = 1
    optimizer: Literal["adam", "adamw"] = "adam"
    lr: float = 1.0
    betas: tuple[float, float] = (0.9, 0.98)
    eps: float = 1e-9
    weight_decay: float = 0.0
    schedule: Schedule = "noam"
    warmup: int = 4000
    min_lr: float = 0.0
    label_smoothing: float = 0.0
    clip_grad: float | None = None
    eval_every: int = 500
    eval_batches: int | None = None
    save_every: int = 1000
    keep_last: int = 5
    log_every: int = 10
    seed: int = 0
    precision: Literal["fp32", "bf16"] = "fp32"
    compile: bool = False
    device: Literal["auto", "cpu", "cuda"] = "auto"
    threads: int = 0
    max_minutes: float | None = None
    fast_matmul: bool = True
    parallel: Literal["ddp", "fsdp"] = "ddp"

    def __post_init__(self) -> None:
        for name in ("steps", "batch_size", "grad_accum", "eval_every", "save_every",
                     "keep_last", "log_every"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"train.{name} must be a positive integer, got "
                                  f"{getattr(self, name)}")
        if self.lr <= 0:
            raise ConfigError(f"train.lr must be positive, got {self.lr}")
        if self.warmup < 0:
            raise ConfigError(f"train.warmup must be >= 0, got {self.warmup}")
        if self.schedule == "noam" and self.warmup == 0:
            raise ConfigError("train.warmup must be positive for the noam schedule ([V17] eq. 3)")
        if not 0.0 <= self.label_smoothing < 1.0:
            raise ConfigError(f"train.label_smoothing must be in [0, 1), got {self.label_smoothing}")
        if not all(0.0 <= b < 1.0 for b in self.betas):
            raise ConfigError(f"train.betas must be in [0, 1), got {self.betas}")
        if self.clip_grad is not None and self.clip_grad <= 0:
            raise ConfigError(f"train.clip_grad must be positive or null, got {self.clip_grad}")
        if self.weight_decay < 0:
            raise ConfigError(f"train.weight_decay must be >= 0, got {self.weight_decay}")
        if self.weight_decay > 0 and self.optimizer == "adam":
            raise ConfigError("train.weight_decay > 0 needs optimizer: adamw (decoupled weight "
                              "decay); plain adam would couple it to the gradient")
        if self.max_minutes is not None and self.max_minutes <= 0:
            raise ConfigError(f"train.max_minutes must be positive or null, got {self.max_minutes}")
        if self.threads < 0:
            raise ConfigError(f"train.threads must be >= 0, got {self.threads}")
