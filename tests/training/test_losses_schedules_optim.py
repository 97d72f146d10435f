"""Label-smoothed cross-entropy, learning-rate schedules and parameter groups."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor

from fullrank.models import DecoderLM, DecoderLMConfig
from fullrank.training.config import TrainConfig
from fullrank.training.losses import label_smoothed_cross_entropy, linear_cross_entropy
from fullrank.training.optim import make_optimizer, parameter_groups
from fullrank.training.schedules import cosine, linear, make_schedule, noam, rsqrt


@pytest.mark.reference
@pytest.mark.parametrize("eps", [0.0, 0.1, 0.3])
def test_label_smoothing_matches_torch_cross_entropy(eps):
    logits = torch.randn(5, 7, 13, dtype=torch.float64)
    target = torch.randint(1, 13, (5, 7))
    target[1, 4:] = 0  # padding
    target[3, 2:] = 0
    out = label_smoothed_cross_entropy(logits, target, epsilon=eps, ignore_index=0)
    ref = F.cross_entropy(
        logits.reshape(-1, 13), target.reshape(-1), ignore_index=0, label_smoothing=eps, reduction="mean"
    )
    assert int(out.n_tokens) == int((target != 0).sum())
    torch.testing.assert_close(out.loss / out.n_tokens, ref, rtol=1e-12, atol=1e-12)
    ref_nll = F.cross_entropy(logits.reshape(-1, 13), target.reshape(-1), ignore_index=0, reduction="sum")
    torch.testing.assert_close(out.nll, ref_nll, rtol=1e-12, atol=1e-12)


def _loss_inputs(with_bias: bool, grad: bool) -> tuple[Tensor, Tensor, Tensor | None, Tensor]:
    """Hidden states ``(3, 11, 24)``, a 37-word output matrix, its bias and targets, in float64."""
    h = torch.randn(3, 11, 24, dtype=torch.float64, requires_grad=grad)
    w = torch.randn(37, 24, dtype=torch.float64, requires_grad=grad)
    b = torch.randn(37, dtype=torch.float64, requires_grad=grad) if with_bias else None
    target = torch.randint(0, 37, (3, 11))
    target[1, 5:] = 0
    return h, w, b, target


@pytest.mark.parametrize("eps,ignore", [(0.0, None), (0.1, 0), (0.2, 3)])
@pytest.mark.parametrize("chunk_rows", [1, 7, 1000])
@pytest.mark.parametrize("with_bias", [False, True])
def test_fused_linear_cross_entropy_equals_the_plain_path(eps, ignore, chunk_rows, with_bias):
    h, w, b, target = _loss_inputs(with_bias, grad=True)
    fused = linear_cross_entropy(
        h,
        w,
        target,
        bias=b,
        epsilon=eps,
        ignore_index=ignore,
        chunk_bytes=chunk_rows * 37 * 8,
        min_chunk_rows=1,
    )
    (0.3 * fused.loss).backward()
    assert h.grad is not None and w.grad is not None
    grads = h.grad.clone(), w.grad.clone()
    grad_b = None
    if b is not None:
        assert b.grad is not None
        grad_b = b.grad.clone()
    h.grad = w.grad = None
    if b is not None:
        b.grad = None
    logits = h @ w.T + (b if b is not None else 0)
    plain = label_smoothed_cross_entropy(logits, target, epsilon=eps, ignore_index=ignore)
    (0.3 * plain.loss).backward()
    if b is not None:
        torch.testing.assert_close(grad_b, b.grad, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(fused.loss, plain.loss, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(fused.nll, plain.nll, rtol=1e-12, atol=1e-12)
    assert int(fused.n_tokens) == int(plain.n_tokens)
    torch.testing.assert_close(grads[0], h.grad, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(grads[1], w.grad, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("eps,ignore", [(0.0, None), (0.1, 0), (0.2, 3)])
@pytest.mark.parametrize("chunk_rows", [1, 7, 1000])
@pytest.mark.parametrize("with_bias", [False, True])
def test_evaluation_in_chunks_equals_the_plain_path(eps, ignore, chunk_rows, with_bias):
    h, w, b, target = _loss_inputs(with_bias, grad=False)
    with torch.no_grad():
        out = linear_cross_entropy(
            h,
            w,
            target,
            bias=b,
            epsilon=eps,
            ignore_index=ignore,
            chunk_bytes=chunk_rows * 37 * 4,
            min_chunk_rows=1,
        )
        logits = h @ w.T + (b if b is not None else 0)
        plain = label_smoothed_cross_entropy(logits, target, epsilon=eps, ignore_index=ignore)
    assert out.loss.dtype == torch.float64 and out.loss.grad_fn is None
    torch.testing.assert_close(out.loss, plain.loss, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(out.nll, plain.nll, rtol=1e-12, atol=1e-12)
    assert int(out.n_tokens) == int(plain.n_tokens)


def test_evaluation_in_chunks_under_bfloat16_autocast_and_of_no_rows():
    h, w, t = torch.randn(50, 32), torch.randn(500, 32), torch.randint(0, 500, (50,))
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        out = linear_cross_entropy(h, w, t, epsilon=0.1, chunk_bytes=7 * 500 * 4, min_chunk_rows=1)
        plain = label_smoothed_cross_entropy(h @ w.T, t, epsilon=0.1)
    assert out.loss.dtype == torch.float32
    torch.testing.assert_close(out.loss, plain.loss, rtol=1e-5, atol=1e-3)
    with torch.no_grad():
        empty = linear_cross_entropy(torch.randn(0, 32), w, torch.zeros(0, dtype=torch.long))
    assert float(empty.loss) == 0.0 and int(empty.n_tokens) == 0


def test_fused_cross_entropy_of_no_rows_and_a_second_backward():
    w = torch.randn(37, 24, dtype=torch.float64, requires_grad=True)
    empty = linear_cross_entropy(
        torch.randn(0, 24, dtype=torch.float64, requires_grad=True), w, torch.zeros(0, dtype=torch.long)
    )
    empty.loss.backward()
    assert (
        float(empty.loss.detach()) == 0.0 and w.grad is not None and torch.equal(w.grad, torch.zeros_like(w))
    )
    h = torch.randn(5, 24, dtype=torch.float64, requires_grad=True)
    out = linear_cross_entropy(h, w, torch.randint(0, 37, (5,)))
    out.loss.backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="one backward pass"):
        out.loss.backward()


def test_fused_path_in_float32_and_without_grad():
    h = torch.randn(64, 32, requires_grad=True)
    w = torch.randn(500, 32, requires_grad=True)
    t = torch.randint(0, 500, (64,))
    fused = linear_cross_entropy(h, w, t, epsilon=0.1, chunk_bytes=10 * 500 * 4, min_chunk_rows=1)
    plain = label_smoothed_cross_entropy(h @ w.T, t, epsilon=0.1)
    torch.testing.assert_close(fused.loss, plain.loss, rtol=1e-5, atol=1e-4)
    with torch.no_grad():
        assert linear_cross_entropy(h, w, t).loss.grad_fn is None


def test_padding_positions_get_no_gradient():
    logits = torch.randn(2, 4, 9, requires_grad=True)
    target = torch.tensor([[3, 4, 0, 0], [5, 0, 0, 0]])
    label_smoothed_cross_entropy(logits, target, epsilon=0.1, ignore_index=0).loss.backward()
    assert logits.grad is not None
    assert logits.grad[0, 2:].abs().sum() == 0 and logits.grad[1, 1:].abs().sum() == 0
    assert logits.grad[0, :2].abs().sum() > 0


def test_noam_is_the_paper_formula():
    # [V17] eq. 3 with d_model=512, warmup=4000: peak at step 4000
    lrs = [noam(s, d_model=512, warmup=4000) for s in (1, 2000, 4000, 8000, 16000)]
    assert lrs[0] == pytest.approx(512**-0.5 * 4000**-1.5)
    assert lrs[2] == pytest.approx(512**-0.5 * 4000**-0.5)
    assert lrs[1] < lrs[2] and lrs[3] == pytest.approx(lrs[2] / math.sqrt(2))
    assert lrs[4] == pytest.approx(512**-0.5 * 16000**-0.5)


def test_rsqrt_linear_cosine():
    assert rsqrt(50, peak=0.1, warmup=100) == pytest.approx(0.05)
    assert rsqrt(400, peak=0.1, warmup=100) == pytest.approx(0.05)  # 0.1·√(100/400)
    assert linear(100, peak=1e-4, warmup=100, total=1100) == pytest.approx(1e-4)
    assert linear(600, peak=1e-4, warmup=100, total=1100) == pytest.approx(5e-5)
    assert linear(1100, peak=1e-4, warmup=100, total=1100) == 0.0
    assert cosine(100, peak=1.0, warmup=100, total=1100, floor=0.1) == pytest.approx(1.0)
    assert cosine(600, peak=1.0, warmup=100, total=1100, floor=0.1) == pytest.approx(0.55)
    assert cosine(1100, peak=1.0, warmup=100, total=1100, floor=0.1) == pytest.approx(0.1)


def test_make_schedule_dispatches():
    cfg = TrainConfig(schedule="noam", warmup=10, lr=2.0)
    assert make_schedule(cfg, 64)(10) == pytest.approx(2.0 * noam(10, d_model=64, warmup=10))


def test_no_weight_decay_on_biases_and_norms_and_tied_weights_once():
    model = DecoderLM(DecoderLMConfig(vocab_size=11, d_model=16, n_heads=2, d_ff=24, n_layers=2, seq_len=8))
    decay, no_decay = parameter_groups(model, 0.1)
    names = {id(p): n for n, p in model.named_parameters()}
    assert all(p.ndim == 2 for p in decay["params"])
    assert all("bias" in names[id(p)] or "norm" in names[id(p)] for p in no_decay["params"])
    all_params = decay["params"] + no_decay["params"]
    assert len(all_params) == len({id(p) for p in model.parameters()})
    opt = make_optimizer(model, TrainConfig(optimizer="adamw", weight_decay=0.1))
    assert isinstance(opt, torch.optim.AdamW) and opt.param_groups[1]["weight_decay"] == 0.0
    assert opt.defaults["betas"] == (0.9, 0.98) and opt.defaults["eps"] == 1e-9  # [V17] §5.3


def test_train_config_errors_name_the_field():
    from fullrank.errors import ConfigError

    with pytest.raises(ConfigError, match=r"TrainConfig\.steps = 0: should be greater than 0"):
        TrainConfig(steps=0)
    with pytest.raises(ConfigError, match="needs optimizer: adamw"):
        TrainConfig(weight_decay=0.1)
