"""The fast CPU matmul setting keeps float32 accuracy (against float64), and is scoped."""

from __future__ import annotations

import contextlib
import resource
import subprocess
import sys

import pytest
import torch

from fullrank import memory, runtime
from fullrank.models import DecoderLM, DecoderLMConfig
from fullrank.runtime import FLOAT32_LEVEL, fast_matmul, fast_matmul_available

needs_onednn = pytest.mark.skipif(not runtime._ONEDNN, reason="no oneDNN in this PyTorch")
# the setting's accuracy is checked where fullrank uses it; on CPUs where oneDNN computes in
# bfloat16 (AMX) fullrank leaves it off, which test_fast_path_only_where_float32_accurate checks
needs_fast = pytest.mark.skipif(
    not fast_matmul_available(),
    reason="fullrank leaves the oneDNN setting off here (no oneDNN, or it computes in bfloat16 "
           "on this CPU)")


def onednn_setting():
    """The setting itself, whether or not fullrank would use it here: for the tests of its
    mechanics (scoping, run_exact, compiled routing), which do not depend on its accuracy."""
    return runtime._matmul_precision("bf16")


def rel_err(x: torch.Tensor, ref: torch.Tensor) -> float:
    return float((x.detach().double() - ref.detach()).abs().max() / ref.detach().abs().max())


def test_threshold_separates_float32_from_bfloat16():
    """FLOAT32_LEVEL lies far from both: float32 products are well below it, products of
    bfloat16-rounded inputs well above."""
    g = torch.Generator().manual_seed(1)
    a, b = torch.randn(512, 512, generator=g), torch.randn(512, 512, generator=g)
    ref = a.double() @ b.double()
    with runtime._matmul_precision("ieee") if runtime._ONEDNN else contextlib.nullcontext():
        assert rel_err(a @ b, ref) < FLOAT32_LEVEL / 5
    assert rel_err(a.bfloat16().double() @ b.bfloat16().double(), ref) > 50 * FLOAT32_LEVEL


def test_fast_path_only_where_float32_accurate():
    """fullrank takes the oneDNN setting exactly where the measured error is float32-level
    (off on CPUs that compute it in bfloat16), and fast_matmul() is a no-op elsewhere."""
    if runtime._ONEDNN:
        assert fast_matmul_available() == (runtime.onednn_matmul_error() < FLOAT32_LEVEL)
    else:
        assert not fast_matmul_available()
    before = torch.backends.mkldnn.matmul.fp32_precision
    with fast_matmul():
        now = torch.backends.mkldnn.matmul.fp32_precision
        assert now == ("bf16" if fast_matmul_available() else before)
    assert torch.backends.mkldnn.matmul.fp32_precision == before


def test_probe_leaves_the_global_random_state_alone():
    torch.manual_seed(3)
    expected = torch.rand(4)
    torch.manual_seed(3)
    runtime.onednn_matmul_error(64)
    torch.testing.assert_close(torch.rand(4), expected)


@needs_fast
@pytest.mark.parametrize("m,k,n", [(1024, 1024, 1024), (64, 512, 2048), (2048, 256, 8192)])
def test_matmul_error_against_float64_is_float32_level(m, k, n):
    a, b = torch.randn(m, k), torch.randn(k, n)
    ref = a.double() @ b.double()
    default = rel_err(a @ b, ref)
    with fast_matmul():
        fast = rel_err(a @ b, ref)
        fast_linear = rel_err(torch.nn.functional.linear(a, b.T.contiguous()), ref)
    # float32 rounding is ~6e-8 per operation; bfloat16 would be ~4e-3
    assert fast < 1e-5 and fast_linear < 1e-5
    assert fast < 8 * default + 1e-7


@needs_fast
def test_model_outputs_and_gradients_against_float64():
    torch.manual_seed(0)
    cfg = DecoderLMConfig(vocab_size=1000, d_model=256, n_heads=8, d_ff=1024, n_layers=2,
                          seq_len=128, dropout=0.0)
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
        return rel_err(out, ref), rel_err(model.embed.token.weight.grad, ref_grad)

    default = run()
    with fast_matmul():
        fast = run()
    assert fast[0] < 1e-5 and fast[1] < 1e-4
    assert fast[0] < 8 * default[0] + 1e-7 and fast[1] < 8 * default[1] + 1e-7


@needs_fast
def test_setting_is_restored():
    before = torch.backends.mkldnn.matmul.fp32_precision
    with fast_matmul():
        assert torch.backends.mkldnn.matmul.fp32_precision == "bf16"
    assert torch.backends.mkldnn.matmul.fp32_precision == before
    with fast_matmul(enabled=False):
        assert torch.backends.mkldnn.matmul.fp32_precision == before


@needs_onednn
def test_run_exact_switches_precision_for_its_node_forward_and_backward():
    """run_exact runs its function, and later that output node's backward, at full precision
    ("ieee") and puts the fast setting back after each; other nodes keep the fast setting."""
    from fullrank.runtime import run_exact

    seen: list[tuple[str, str]] = []

    class Probe(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, name):  # type: ignore[override]
            ctx.name = name
            seen.append((name, torch.backends.mkldnn.matmul.fp32_precision))
            return x * 2

        @staticmethod
        def backward(ctx, grad):  # type: ignore[override]
            seen.append((ctx.name + ".grad", torch.backends.mkldnn.matmul.fp32_precision))
            return grad * 2, None

    x = torch.randn(3, requires_grad=True)
    with onednn_setting():
        y = run_exact(Probe.apply, x, "exact")
        assert torch.backends.mkldnn.matmul.fp32_precision == "bf16"
        z = Probe.apply(y, "plain")
        z.sum().backward()
        assert torch.backends.mkldnn.matmul.fp32_precision == "bf16"
    assert seen == [("exact", "ieee"), ("plain", "bf16"), ("plain.grad", "bf16"), ("exact.grad", "ieee")]
    torch.testing.assert_close(x.grad, torch.full((3,), 4.0))


@needs_onednn
def test_run_exact_survives_a_second_backward_of_the_same_graph():
    from fullrank.runtime import run_exact

    seen: list[str] = []

    class Probe(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):  # type: ignore[override]
            return x * 3

        @staticmethod
        def backward(ctx, grad):  # type: ignore[override]
            seen.append(torch.backends.mkldnn.matmul.fp32_precision)
            return grad * 3

    x = torch.randn(2, requires_grad=True)
    with onednn_setting():
        y = run_exact(Probe.apply, x)
        y.sum().backward(retain_graph=True)
        y.sum().backward()
        assert torch.backends.mkldnn.matmul.fp32_precision == "bf16"
    assert seen == ["ieee", "ieee"]
    torch.testing.assert_close(x.grad, torch.full((2,), 6.0))


@pytest.mark.parametrize("fast", [False, True])
def test_models_compile_to_one_graph_on_cpu(fast):
    """``torch.compile`` traces every model whole on a CPU: attention's routing reads the
    setting in a way compiled code can trace (``fullgraph=True`` raises at any graph break;
    asking ``torch.backends.mkldnn`` directly broke the graph in every attention layer)."""
    from fullrank.models import EncoderDecoder, EncoderDecoderConfig

    torch.manual_seed(0)
    lm = DecoderLM(DecoderLMConfig(vocab_size=300, d_model=32, n_heads=4, d_ff=64, n_layers=2,
                                   seq_len=16, dropout=0.1))
    ed = EncoderDecoder(EncoderDecoderConfig(vocab_size=300, d_model=32, n_heads=4, d_ff=64,
                                             n_layers=2, dropout=0.1, max_len=32, seq_len=16))
    src, tgt = torch.randint(3, 300, (2, 12)), torch.randint(3, 300, (2, 10))
    if fast and not runtime._ONEDNN:
        pytest.skip("no oneDNN in this PyTorch")
    with onednn_setting() if fast else contextlib.nullcontext():
        torch._dynamo.reset()
        for model, args in ((lm, (tgt,)), (ed, (src, tgt))):
            out = torch.compile(model, backend="eager", fullgraph=True)(*args)
            out.float().square().mean().backward()  # training mode: dropout, gradients
            assert all(p.grad is not None for p in model.parameters() if p.requires_grad)


def test_num_threads_sets_the_count_and_always_restores_it(restore_threads):
    from fullrank.runtime import num_threads

    torch.set_num_threads(3)
    with num_threads(1) as n:
        assert n == 1 and torch.get_num_threads() == 1
    assert torch.get_num_threads() == 3
    with num_threads() as n:  # None: left as is, what the block sets is undone
        assert n == 3
        torch.set_num_threads(2)
    assert torch.get_num_threads() == 3
    with pytest.raises(RuntimeError), num_threads(2):
        raise RuntimeError
    assert torch.get_num_threads() == 3


# a 64 MB block allocated, written and freed 11 times; the page faults of the last time (glibc
# places PyTorch's 64-byte-aligned blocks a little higher in its heap for the first few times,
# on fresh pages, before it settles, as a training loop's first steps do)
_FAULTS = """
import resource, sys, torch
from fullrank.runtime import keep_freed_memory
took = keep_freed_memory() if sys.argv[1] == "keep" else None
def faults():
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    x = torch.ones(1 << 24)
    del x
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
for _ in range(10):
    faults()
print(took, faults())
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc is Linux's")
def test_keep_freed_memory_reuses_freed_pages_instead_of_faulting_them_in_again():
    """In a fresh process: after keep_freed_memory() a freed 64 MB block comes back without
    page faults (glibc by default maps blocks this large afresh every time: 16,384 faults)."""
    out = subprocess.run([sys.executable, "-c", _FAULTS, "keep"], capture_output=True,
                         text=True, check=True).stdout.split()
    pages = (1 << 24) * 4 // resource.getpagesize()
    assert out[0] == "True"
    assert int(out[1]) < pages // 100


def test_keep_freed_memory_is_a_no_op_off_glibc(monkeypatch):
    def no_libc(name):
        raise OSError("no such library")

    monkeypatch.setattr(memory.ctypes, "CDLL", no_libc)
    monkeypatch.setattr(memory, "_memory_kept", False)
    assert runtime.keep_freed_memory() is False
    assert "defaults" in runtime.memory_summary()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc is Linux's")
def test_the_log_line_says_whether_freed_memory_is_kept():
    code = ("from fullrank import runtime; print(runtime.memory_summary()); "
            "runtime.keep_freed_memory(); print(runtime.memory_summary())")
    before, after = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                   check=True).stdout.splitlines()
    assert "defaults" in before and "kept for reuse" in after


def test_the_command_keeps_freed_memory_unless_told_not_to(monkeypatch, capsys):
    import fullrank.cli as cli

    calls = []
    monkeypatch.setattr(cli, "keep_freed_memory", lambda: calls.append(1))
    monkeypatch.delenv("FULLRANK_KEEP_FREED_MEMORY", raising=False)
    assert cli.main(["info", "aiayn_base"]) == 0
    monkeypatch.setenv("FULLRANK_KEEP_FREED_MEMORY", "0")
    assert cli.main(["info", "aiayn_base"]) == 0
    assert calls == [1]
