"""The training loop: accumulation equals one large batch, and resuming is exact."""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any

import numpy as np
import pytest
import torch

from fullrank.data.lm import LMBlocks
from fullrank.errors import TrainingError
from fullrank.models import DecoderLM, DecoderLMConfig
from fullrank.training.checkpoints import latest_checkpoint, load_checkpoint, step_dirs
from fullrank.training.config import TrainConfig
from fullrank.training.distributed import DistInfo
from fullrank.training.loop import LoopState, RunOutput, train
from fullrank.training.losses import TokenLoss
from fullrank.training.tasks import LanguageModeling
from tests.robustness.damage import write_meta

CPU = DistInfo(rank=0, world=1, local_rank=0, device=torch.device("cpu"))
IDS = np.random.default_rng(0).integers(0, 23, 5000).astype(np.uint16)


def make_model(dropout: float = 0.0) -> DecoderLM:
    torch.manual_seed(0)
    return DecoderLM(
        DecoderLMConfig(
            vocab_size=23, d_model=24, n_heads=3, d_head=10, d_ff=37, n_layers=2, seq_len=12, dropout=dropout
        )
    )


def weights(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in model.state_dict().items()}


def run(model, cfg: TrainConfig, **kw):
    data = LMBlocks(IDS, seq_len=12, batch_size=cfg.batch_size, seed=cfg.seed)
    return train(model, LanguageModeling(), data, cfg, dist=CPU, progress=False, **kw)


@pytest.mark.parametrize("clip", [None, 0.5])
def test_gradient_accumulation_equals_one_large_batch(clip):
    # eps=1 makes Adam's update ~linear in the gradient: with the paper's 1e-9 an update is
    # ~lr·sign(g), and a zero gradient's rounding noise would flip it.
    base = dict(
        steps=4,
        optimizer="adamw",
        lr=1e-3,
        eps=1.0,
        schedule="constant",
        warmup=2,
        weight_decay=0.01,
        clip_grad=clip,
    )
    big, small = make_model(), make_model()
    run(big, TrainConfig(batch_size=8, grad_accum=1, **base))
    run(small, TrainConfig(batch_size=4, grad_accum=2, **base))
    for name, a in weights(big).items():
        torch.testing.assert_close(weights(small)[name], a, rtol=1e-5, atol=1e-6)


def train_on_a_cycle(model, **cfg):
    """Train ``model`` on the repeating sequence 0..22; return (loss before, loss after, result)."""
    data = LMBlocks(np.tile(np.arange(23, dtype=np.uint16), 200), seq_len=12, batch_size=8)
    task = LanguageModeling()
    before = task.evaluate(model, data.eval_batches(), torch.device("cpu"))["loss"]
    config = TrainConfig(batch_size=8, lr=3e-3, schedule="constant", warmup=5, optimizer="adamw", **cfg)
    result = train(model, task, data, config, dist=CPU, progress=False)
    return before, task.evaluate(model, data.eval_batches(), torch.device("cpu"))["loss"], result


def test_training_lowers_the_loss():
    before, after, _ = train_on_a_cycle(make_model(), steps=40)
    assert after < 0.5 * before


@pytest.mark.parametrize("freeze", [(), ("layers.0.*",)])
def test_resume_continues_bitwise_identically(tmp_path, freeze):
    cfg = TrainConfig(
        freeze=freeze,
        steps=8,
        batch_size=4,
        lr=1e-3,
        schedule="cosine",
        warmup=3,
        save_every=3,
        log_every=2,
        optimizer="adamw",
        weight_decay=0.01,
    )
    straight = make_model(dropout=0.3)  # dropout: the RNG state must be restored too
    torch.manual_seed(1)
    run(straight, cfg)

    out = RunOutput(tmp_path, make_model().config, None, {"task": "lm"})
    first = make_model(dropout=0.3)
    torch.manual_seed(1)
    # stop after step 4 (checkpoint at step 3 and at the stop), then restart from step 3:
    # steps 4.. are redone and must come out the same
    run(first, dataclasses.replace(cfg, stop_after=4), out=out)
    (out.checkpoints / "step-00000004").rename(out.checkpoints / "discarded")
    ckpt = latest_checkpoint(out.checkpoints)
    assert ckpt is not None and ckpt.name == "step-00000003"
    resumed = make_model(dropout=0.3)
    torch.manual_seed(12345)  # whatever the RNG was, the checkpoint's state is restored
    run(resumed, cfg, out=out, resume_from=ckpt)
    for name, a in weights(straight).items():
        assert torch.equal(weights(resumed)[name], a), name


def test_frozen_parameters_keep_their_start_and_the_others_train():
    model = make_model()
    start = weights(model)
    cfg = TrainConfig(steps=3, batch_size=4, lr=1e-2, schedule="constant", warmup=1, optimizer="adamw")
    cfg = dataclasses.replace(cfg, weight_decay=0.1, freeze=("embed.*", "layers.0.ffn.*"))
    run(model, cfg)
    held = {n for n, p in model.named_parameters() if not p.requires_grad}
    assert held == {"embed.token.weight"} | {
        f"layers.0.ffn.{m}.{w}" for m in ("fc1", "fc2") for w in ("weight", "bias")
    }
    for name, value in weights(model).items():
        assert torch.equal(value, start[name]) == (name in held), name  # no weight decay either


def test_a_freeze_pattern_that_matches_nothing_or_everything_is_refused():
    from fullrank.errors import ConfigError
    from fullrank.training.optim import frozen_names

    model = make_model()
    assert frozen_names(model, ["layers.1.*_norm.*"]) == [
        f"layers.1.{n}_norm.{w}" for n in ("attn", "ffn") for w in ("weight", "bias")
    ]
    with pytest.raises(ConfigError, match=r"'decoder\.\*' matches no parameter .* like embed.token.weight"):
        frozen_names(model, ["embed.*", "decoder.*"])
    with pytest.raises(ConfigError, match="holds every parameter"):
        frozen_names(model, ["*"])


def test_bf16_autocast_trains_on_cpu():
    model = make_model()
    before, after, result = train_on_a_cycle(model, steps=30, precision="bf16")
    assert result.state.step == 30
    assert all(p.dtype == torch.float32 for p in model.parameters())  # master weights stay fp32
    assert after < 0.7 * before


@pytest.mark.slow
def test_torch_compile_option_matches_eager():
    eager, compiled = make_model(), make_model()
    cfg: dict[str, Any] = dict(
        steps=3, batch_size=4, lr=1e-3, schedule="constant", warmup=1, optimizer="adamw", eps=1.0
    )
    run(eager, TrainConfig(**cfg))
    run(compiled, TrainConfig(**cfg, compile=True))
    for name, a in weights(eager).items():
        torch.testing.assert_close(weights(compiled)[name], a, rtol=1e-4, atol=1e-5)


def test_time_budget_counts_the_time_before_a_resume(tmp_path):
    # The time spent before a checkpoint counts after resuming: a run whose budget is spent
    # takes no further step (re-running a run stopped by max_minutes must not change it), and
    # one with time left logs elapsed times that continue from the checkpoint's.
    cfg = TrainConfig(
        steps=6,
        batch_size=4,
        lr=1e-3,
        schedule="constant",
        warmup=1,
        save_every=2,
        log_every=1,
        optimizer="adamw",
        max_minutes=1.0,
    )
    out = RunOutput(tmp_path, make_model().config, None, {"task": "lm"})
    first = make_model()
    run(first, dataclasses.replace(cfg, stop_after=2), out=out)
    ckpt = latest_checkpoint(out.checkpoints)
    assert ckpt is not None
    meta_path = ckpt / "meta.json"
    meta = json.loads(meta_path.read_text())
    assert 0 < meta["loop"]["elapsed_s"] < 60

    meta["loop"]["elapsed_s"] = 61.0  # as if the first session had used up the minute
    write_meta(ckpt, meta)
    model = make_model()
    result = run(model, cfg, out=out, resume_from=ckpt)
    assert result.state.step == 2 and latest_checkpoint(out.checkpoints) == ckpt
    for name, w in weights(model).items():  # the checkpoint's weights, untouched
        torch.testing.assert_close(w, weights(first)[name], rtol=0, atol=0)

    meta["loop"]["elapsed_s"] = 30.0  # half of it used up
    write_meta(ckpt, meta)
    result = run(make_model(), dataclasses.replace(cfg, stop_after=3), out=out, resume_from=ckpt)
    assert result.state.step == 3
    assert result.state.elapsed_s > 30.0
    logged = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["elapsed_s"] > 30.0 for r in logged if r["step"] == 3 and "elapsed_s" in r] == [True]


def test_a_stopped_and_resumed_run_leaves_the_checkpoints_of_one_straight_run(tmp_path):
    # A session stopped off the save interval (as train.max_minutes stops one) and resumed
    # keeps the same checkpoints as a run that never stopped: the last K to average stay
    # evenly spaced.
    cfg = TrainConfig(
        steps=9,
        batch_size=4,
        lr=1e-3,
        schedule="constant",
        warmup=1,
        save_every=2,
        keep_last=3,
        log_every=1,
        optimizer="adamw",
    )
    straight = RunOutput(tmp_path / "straight", make_model().config, None, {"task": "lm"})
    run(make_model(), cfg, out=straight)
    split = RunOutput(tmp_path / "split", make_model().config, None, {"task": "lm"})
    run(make_model(), dataclasses.replace(cfg, stop_after=7), out=split)
    stopped = latest_checkpoint(split.checkpoints)
    assert stopped is not None and stopped.name == "step-00000007"
    run(make_model(), cfg, out=split, resume_from=stopped)
    names = [p.name for p in sorted(straight.checkpoints.glob("step-*"))]
    assert names == ["step-00000006", "step-00000008", "step-00000009"]
    assert [p.name for p in sorted(split.checkpoints.glob("step-*"))] == names


def test_stop_after_runs_the_first_steps_of_the_schedule_and_resume_finishes_it(tmp_path):
    # train.stop_after stops at that step with the learning rate of the whole schedule; the
    # resumed run (without it) ends with the weights of the run that never stopped
    cfg: dict[str, Any] = dict(
        steps=6, batch_size=4, lr=1e-3, schedule="linear", warmup=2, save_every=3, log_every=1
    )
    straight = make_model()
    run(straight, TrainConfig(**cfg, optimizer="adamw"))
    out = RunOutput(tmp_path, make_model().config, None, {"task": "lm"})
    first = run(make_model(), TrainConfig(**cfg, optimizer="adamw", stop_after=4), out=out)
    assert first.state.step == 4
    logged = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["lr"] for r in logged if "lr" in r][-1] == pytest.approx(1e-3 * 2 / 4)  # linear, 6 steps
    model = make_model()
    run(model, TrainConfig(**cfg, optimizer="adamw"), out=out, resume_from=latest_checkpoint(out.checkpoints))
    for name, w in weights(model).items():
        torch.testing.assert_close(w, weights(straight)[name], rtol=0, atol=0)


def test_more_processes_than_gpus_is_a_config_error(monkeypatch):
    """torchrun --nproc_per_node=2 on a one-GPU machine: a one-line ConfigError, not CUDA's."""
    from fullrank.errors import ConfigError
    from fullrank.training.distributed import pick_device

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    assert pick_device("auto", 0) == torch.device("cuda", 0)
    with pytest.raises(ConfigError, match="nproc_per_node=1 or set train.device=cpu"):
        pick_device("auto", 1, option="train.device")
    assert pick_device("cpu", 1) == torch.device("cpu")


def test_cuda_on_a_machine_without_a_gpu_is_a_config_error_naming_the_option(monkeypatch):
    from fullrank.errors import ConfigError
    from fullrank.training.distributed import pick_device

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    assert pick_device("auto") == torch.device("cpu")
    no_gpu = r"^--device=cuda: this machine has no GPU .*; use --device=cpu, or auto$"
    with pytest.raises(ConfigError, match=no_gpu):
        pick_device("cuda")
    with pytest.raises(ConfigError, match=r"^train.device=cuda: this machine has no GPU"):
        pick_device("cuda", option="train.device")


class BreaksAt:
    """Language modelling whose loss (and with ``nll``, the reported NLL too) becomes NaN at
    call ``at``: a stand-in for a learning rate that blows the weights up."""

    def __init__(self, at: int, *, nll: bool) -> None:
        self.inner, self.at, self.nll, self.calls = LanguageModeling(), at, nll, 0

    def loss(self, model, batch):
        out = self.inner.loss(model, batch)
        self.calls += 1
        if self.calls == self.at:
            nan = torch.tensor(float("nan"))
            out = TokenLoss(out.loss * nan, out.nll * nan if self.nll else out.nll, out.n_tokens)
        return out


@pytest.mark.parametrize(
    "nll, message",
    [
        (True, r"step 5: the training loss is not a finite number"),
        (False, r"step 4: a weight \(after the update\) is not a finite number"),
    ],
)
def test_a_non_finite_loss_stops_training_and_keeps_the_last_good_checkpoint(tmp_path, nll, message):
    # nll=True: the loss of step 5 is NaN (found at step 6, the next log line and save);
    # nll=False: only the gradient of step 4 is NaN, so step 4's weights are, found before
    # step 4's save
    cfg = TrainConfig(
        steps=12,
        batch_size=4,
        lr=1e-3,
        schedule="constant",
        warmup=1,
        save_every=2,
        log_every=3,
        optimizer="adamw",
    )
    out = RunOutput(tmp_path, make_model().config, None, {"task": "lm"})
    data = LMBlocks(IDS, seq_len=12, batch_size=4)
    with pytest.raises(
        TrainingError,
        match=message + r"; stopped without saving .*latest stays "
        r"the last good checkpoint",
    ):
        train(
            make_model(), BreaksAt(4 if not nll else 5, nll=nll), data, cfg, dist=CPU, progress=False, out=out
        )
    good = latest_checkpoint(out.checkpoints)
    assert good is not None
    assert good.name == ("step-00000004" if nll else "step-00000002")
    assert [p.name for p in step_dirs(out.checkpoints)][-1] == good.name
    ckpt = load_checkpoint(good)
    assert all(torch.isfinite(p).all() for p in ckpt.model.parameters())
    logged = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert all(math.isfinite(r["loss"]) for r in logged)


def test_the_noam_schedule_takes_the_model_width_from_the_caller():
    """The loop knows no model class: the noam schedule's d_model comes from the caller, and
    without it the run fails before any step, naming the fix."""
    from fullrank.errors import ConfigError
    from fullrank.training.schedules import noam

    cfg = TrainConfig(steps=1, batch_size=4, schedule="noam", warmup=4, lr=2.0, optimizer="adamw")
    model = make_model()
    before = weights(model)
    with pytest.raises(ConfigError, match="d_model"):
        run(model, cfg)
    assert all(torch.equal(v, weights(model)[k]) for k, v in before.items())
    seen = []
    real_step = torch.optim.AdamW.step

    def step(self, *a, **kw):
        seen.append(self.param_groups[0]["lr"])
        return real_step(self, *a, **kw)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(torch.optim.AdamW, "step", step)
        run(model, cfg, d_model=24)
    assert seen == [pytest.approx(noam(1, d_model=24, warmup=4, scale=2.0))]


@pytest.mark.parametrize(
    ("saved", "units", "position", "expected"),
    [
        (2, 1, (0, 3), (0, 6)),  # two ranks' bucket batches, resumed in one process
        (1, 2, (0, 6), (0, 3)),  # one process's, resumed on two ranks
        (1, 2, (0, 5), (0, 3)),  # between two global batches: on to the next
        (1, 2, (1, 9), (2, 0)),  # past the shorter epoch's end: the next epoch
        (None, 2, (0, 5), (0, 5)),  # recorded before units were: counted in this run's
        (2, 2, (0, 5), (0, 5)),
    ],
)
def test_a_data_position_carries_over_to_another_world_size(saved, units, position, expected):
    state = LoopState(epoch=position[0], index=position[1], units=saved)
    state.rebase(units, lambda epoch: 10 // units)
    assert (state.epoch, state.index, state.units) == (*expected, units)
