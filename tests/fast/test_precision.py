"""The oneDNN float32 matmul setting keeps float32 accuracy (against float64), is scoped, and is
optional: a PyTorch without it keeps the default path."""

from __future__ import annotations

import types

import pytest
import torch

from fullrank.fast import precision
from fullrank.fast.precision import FLOAT32_LEVEL, onednn_available, onednn_matmul, run_exact
from fullrank.models import DecoderLM, DecoderLMConfig

HAS_SETTING = precision.current_setting() is not None
needs_onednn = pytest.mark.skipif(not HAS_SETTING, reason="no oneDNN float32 setting in this PyTorch")
# the setting's accuracy is checked where fullrank uses it; on CPUs where oneDNN computes in
# bfloat16 (AMX) fullrank leaves it off, which test_fast_path_only_where_float32_accurate checks
needs_fast = pytest.mark.skipif(
    not onednn_available(),
    reason="fullrank leaves the oneDNN setting off here (no oneDNN, or it computes in bfloat16 on this CPU)",
)


def onednn_setting():
    """The setting itself, whether or not fullrank would use it here: for the tests of its
    mechanics (scoping, run_exact, compiled routing), which do not depend on its accuracy."""
    return precision._matmul_precision("bf16")


def fp32_precision() -> str:
    """``torch.backends.mkldnn.matmul.fp32_precision`` (torch >= 2.9; the stubs lack it)."""
    return getattr(torch.backends.mkldnn, "matmul").fp32_precision


def rel_err(x: torch.Tensor, ref: torch.Tensor) -> float:
    return float((x.detach().double() - ref.detach()).abs().max() / ref.detach().abs().max())


def test_threshold_separates_float32_from_bfloat16():
    """FLOAT32_LEVEL lies far from both: float32 products are well below it, products of
    bfloat16-rounded inputs well above."""
    g = torch.Generator().manual_seed(1)
    a, b = torch.randn(512, 512, generator=g), torch.randn(512, 512, generator=g)
    ref = a.double() @ b.double()
    with precision._matmul_precision("ieee"):
        assert rel_err(a @ b, ref) < FLOAT32_LEVEL / 5
    assert rel_err(a.bfloat16().double() @ b.bfloat16().double(), ref) > 50 * FLOAT32_LEVEL


def test_fast_path_only_where_float32_accurate():
    """fullrank takes the oneDNN setting exactly where the measured error is float32-level
    (off on CPUs that compute it in bfloat16), and onednn_matmul() is a no-op elsewhere."""
    if HAS_SETTING:
        assert onednn_available() == (precision.onednn_matmul_error() < FLOAT32_LEVEL)
    else:
        assert not onednn_available()
    before = precision.current_setting()
    with onednn_matmul():
        assert precision.current_setting() == ("bf16" if onednn_available() else before)
    assert precision.current_setting() == before


def test_probe_leaves_the_global_random_state_alone():
    torch.manual_seed(3)
    expected = torch.rand(4)
    torch.manual_seed(3)
    precision.onednn_matmul_error(64)
    torch.testing.assert_close(torch.rand(4), expected)


@needs_fast
@pytest.mark.parametrize("m,k,n", [(1024, 1024, 1024), (64, 512, 2048), (2048, 256, 8192)])
def test_matmul_error_against_float64_is_float32_level(m, k, n):
    a, b = torch.randn(m, k), torch.randn(k, n)
    ref = a.double() @ b.double()
    default = rel_err(a @ b, ref)
    with onednn_matmul():
        fast = rel_err(a @ b, ref)
        fast_linear = rel_err(torch.nn.functional.linear(a, b.T.contiguous()), ref)
    # float32 rounding is ~6e-8 per operation; bfloat16 would be ~4e-3
    assert fast < 1e-5 and fast_linear < 1e-5
    assert fast < 8 * default + 1e-7


@needs_fast
def test_model_outputs_and_gradients_against_float64():
    torch.manual_seed(0)
    cfg = DecoderLMConfig(
        vocab_size=1000, d_model=256, n_heads=8, d_ff=1024, n_layers=2, seq_len=128, dropout=0.0
    )
    model = DecoderLM(cfg)
    ref_model = DecoderLM(cfg).double()
    ref_model.load_state_dict(model.state_dict())
    x = torch.randint(0, 1000, (4, 128))
    ref = ref_model(x)
    ref.square().mean().backward()
    ref_grad = ref_model.embed.token.weight.grad

    def run() -> tuple[float, float]:
        model.zero_grad()
        out = model(x)
        out.square().mean().backward()
        grad = model.embed.token.weight.grad
        assert grad is not None and ref_grad is not None
        return rel_err(out, ref), rel_err(grad, ref_grad)

    default = run()
    with onednn_matmul():
        fast = run()
    assert fast[0] < 1e-5 and fast[1] < 1e-4
    assert fast[0] < 8 * default[0] + 1e-7 and fast[1] < 8 * default[1] + 1e-7


@needs_fast
def test_setting_is_restored():
    before = fp32_precision()
    with onednn_matmul():
        assert fp32_precision() == "bf16"
    assert fp32_precision() == before
    with onednn_matmul(enabled=False):
        assert fp32_precision() == before


@needs_onednn
def test_run_exact_switches_precision_for_its_node_forward_and_backward():
    """run_exact runs its function, and later that output node's backward, at full precision
    ("ieee") and puts the fast setting back after each; other nodes keep the fast setting."""
    seen: list[tuple[str, str]] = []

    class Probe(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, name):
            ctx.name = name
            seen.append((name, fp32_precision()))
            return x * 2

        @staticmethod
        def backward(ctx, grad):
            seen.append((ctx.name + ".grad", fp32_precision()))
            return grad * 2, None

    x = torch.randn(3, requires_grad=True)
    with onednn_setting():
        y = run_exact(Probe.apply, x, "exact")
        assert fp32_precision() == "bf16"
        z = Probe.apply(y, "plain")
        z.sum().backward()
        assert fp32_precision() == "bf16"
    assert seen == [("exact", "ieee"), ("plain", "bf16"), ("plain.grad", "bf16"), ("exact.grad", "ieee")]
    torch.testing.assert_close(x.grad, torch.full((3,), 4.0))


@needs_onednn
def test_run_exact_survives_a_second_backward_of_the_same_graph():
    seen: list[str] = []

    class Probe(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 3

        @staticmethod
        def backward(ctx, grad):
            seen.append(fp32_precision())
            return grad * 3

    x = torch.randn(2, requires_grad=True)
    with onednn_setting():
        y = run_exact(Probe.apply, x)
        y.sum().backward(retain_graph=True)
        y.sum().backward()
        assert fp32_precision() == "bf16"
    assert seen == ["ieee", "ieee"]
    torch.testing.assert_close(x.grad, torch.full((2,), 6.0))


@pytest.fixture
def no_setting(monkeypatch):
    """A PyTorch without ``torch.backends.mkldnn.matmul.fp32_precision`` (releases before it)."""
    monkeypatch.setattr(torch.backends.mkldnn, "matmul", types.SimpleNamespace())


def test_without_the_setting_everything_stays_on_the_default_path(no_setting):
    """Where PyTorch lacks the attribute, the engine never takes the setting, says so in the
    log line, and its blocks, run_exact and the CPU attention kernel run the plain path."""
    from fullrank.fast.attention import cpu_attention
    from fullrank.layers.attention import attend

    assert precision.current_setting() is None
    assert not onednn_available() and not precision.onednn_active()
    assert "no oneDNN float32 setting" in precision.matmul_summary()
    with onednn_matmul(), precision._matmul_precision("bf16"):
        assert not precision.onednn_active()
        assert run_exact(torch.add, torch.ones(2), 1).tolist() == [2.0, 2.0]
    q, k, v = (torch.randn(2, 3, 5, 4, dtype=torch.float64) for _ in range(3))
    torch.testing.assert_close(cpu_attention(q, k, v, None, True), attend(q, k, v, is_causal=True))
