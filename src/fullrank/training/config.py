"""The training settings of one run (the ``train:`` section of an experiment file)."""

from __future__ import annotations

from typing import Literal

from fullrank.errors import ConfigError
from fullrank.validation import (
    Bool,
    NonNegativeFloat,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    Probability,
    Seed,
    Str,
    config_dataclass,
)

Schedule = Literal["noam", "rsqrt", "linear", "cosine", "constant"]


@config_dataclass
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
        stop_after: stop (evaluate, save) after this step, with the schedule still following
            ``steps``: the first part of a longer run, which ``--resume`` continues exactly
            (a probe of the first 1,500 steps of a 5,000-step schedule). ``None`` = run to ``steps``.
        init_from: start from the weights of this checkpoint (a checkpoint or run directory):
            weights only — a fresh optimiser and schedule. The architecture and tokenizer are the
            checkpoint's, with the fields the ``model`` section states on top; heads the task
            adds are new, heads it does not use are dropped (both listed when the run starts).
            Fine-tuning a pre-trained encoder, or training on from ``fullrank widen``'s output.
        init_weights: with ``init_from``, ``false`` takes only the architecture and tokenizer and
            leaves the weights at their random initialisation: the same model without
            pre-training, as a baseline.
        parallel: how ``torchrun`` processes share the work: ``"ddp"`` (each holds the whole
            model and optimizer; gradients are averaged) or ``"fsdp"`` (PyTorch FSDP2: each
            holds 1/N of the parameters, gradients and optimizer state, gathered layer by layer
            when needed; for a model that does not fit one device). Alone, no effect.
        fast_matmul: route CPU float32 matrix multiplies through oneDNN where that keeps
            float32 accuracy on this CPU (measured once per process; elsewhere, e.g. CPUs
            with AMX, it would compute in bfloat16 and is left off; see
            :mod:`fullrank.fast.precision`). No effect on GPUs.
        resume_from: continue the run exactly from this checkpoint directory (weights,
            optimizer, RNG, data position) instead of its newest readable one; implies
            ``--resume``.
        freeze: parameter names to hold at their start (``fnmatch`` patterns over
            ``model.named_parameters()``: ``embed.*``, ``layers.[01].*``): no gradient, no
            optimizer state, no weight decay. Fine-tuning part of a pre-trained model.
    """

    steps: PositiveInt = 1000
    batch_size: PositiveInt = 32
    grad_accum: PositiveInt = 1
    optimizer: Literal["adam", "adamw"] = "adam"
    lr: PositiveFloat = 1.0
    betas: tuple[Probability, Probability] = (0.9, 0.98)
    eps: PositiveFloat = 1e-9
    weight_decay: NonNegativeFloat = 0.0
    schedule: Schedule = "noam"
    warmup: NonNegativeInt = 4000
    min_lr: NonNegativeFloat = 0.0
    label_smoothing: Probability = 0.0
    clip_grad: PositiveFloat | None = None
    eval_every: PositiveInt = 500
    eval_batches: PositiveInt | None = None
    save_every: PositiveInt = 1000
    keep_last: PositiveInt = 5
    log_every: PositiveInt = 10
    seed: Seed = 0
    precision: Literal["fp32", "bf16"] = "fp32"
    compile: Bool = False
    device: Literal["auto", "cpu", "cuda"] = "auto"
    threads: NonNegativeInt = 0
    max_minutes: PositiveFloat | None = None
    stop_after: PositiveInt | None = None
    init_from: Str | None = None
    init_weights: Bool = True
    fast_matmul: Bool = True
    parallel: Literal["ddp", "fsdp"] = "ddp"
    resume_from: Str | None = None
    freeze: tuple[Str, ...] = ()

    def __post_init__(self) -> None:
        """What relates several fields (each field's type and range are pydantic's)."""
        if self.stop_after is not None and self.stop_after > self.steps:
            raise ConfigError(
                f"train.stop_after = {self.stop_after} is beyond train.steps = {self.steps}; "
                f"lower it or leave it out"
            )
        if self.schedule == "noam" and self.warmup == 0:
            raise ConfigError("train.warmup must be positive for the noam schedule ([V17] eq. 3)")
        if self.schedule == "cosine" and self.min_lr > self.lr:
            raise ConfigError(
                f"train.min_lr = {self.min_lr} is above train.lr = {self.lr}: the "
                f"cosine schedule decays from lr down to min_lr; lower min_lr"
            )
        if self.weight_decay > 0 and self.optimizer == "adam":
            raise ConfigError(
                "train.weight_decay > 0 needs optimizer: adamw (decoupled weight "
                "decay); plain adam would couple it to the gradient"
            )
