"""``fast.cpu``: the engine's one entry installs its seams on a model and undoes every one; the
model computes the same function inside (float64: to the last bits; float32: to float32
accuracy against float64); compiled models still trace whole."""

from __future__ import annotations

import contextlib
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from fullrank import fast
from fullrank.fast import precision
from fullrank.fast.attention import cpu_attention
from fullrank.fast.packed import PackedProduct
from fullrank.layers.attention import MultiHeadAttention, ScaledDotProduct
from fullrank.layers.linear import Linear
from fullrank.models import (
    DecoderLM,
    DecoderLMConfig,
    Encoder,
    EncoderConfig,
    EncoderDecoder,
    EncoderDecoderConfig,
)
from tests.helpers import ODD

HAS_SETTING = precision.current_setting() is not None


def lm(dtype=torch.float64, **kw) -> DecoderLM:
    cfg = DecoderLMConfig(**{**dict(vocab_size=41, n_layers=2, seq_len=16, dropout=0.0, **ODD), **kw})
    return DecoderLM(cfg).to(dtype)


def grad_of(p: torch.Tensor) -> torch.Tensor:
    assert p.grad is not None
    return p.grad


def cores(model):
    return [m for m in model.modules() if isinstance(m, ScaledDotProduct)]


def test_the_block_installs_its_seams_and_undoes_every_one():
    model = lm()
    attn = model.layers[0].self_attn
    assert isinstance(attn, MultiHeadAttention)
    attn.core.fused = False  # an explicit core is left alone
    weights = {n: p.data_ptr() for n, p in model.named_parameters()}
    with fast.cpu(model) as same:
        assert same is model
        assert [c.kernel for c in cores(model)] == [None, cpu_attention]
        with fast.cpu(model):  # nested: nothing new, nothing undone early
            assert cores(model)[1].kernel is cpu_attention
        assert cores(model)[1].kernel is cpu_attention
    assert all(c.kernel is None for c in cores(model))
    with pytest.raises(RuntimeError, match="inside"), fast.cpu(model.eval(), decoding=True):
        # packed products where oneDNN's are in use, else column-major weights
        assert all(
            isinstance(m.product, PackedProduct) or m.weight.t().is_contiguous()
            for m in model.modules()
            if isinstance(m, Linear)
        )
        raise RuntimeError("inside")
    assert all(c.kernel is None for c in cores(model))
    assert all(m.product is F.linear for m in model.modules() if isinstance(m, Linear))
    assert {n: p.data_ptr() for n, p in model.named_parameters()} == weights


@pytest.mark.parametrize("fast_setting", [False, True])
def test_training_inside_equals_training_outside_in_float64(fast_setting):
    """Outputs and gradients of a training step, causal and padded, the same inside the block
    (every CPU routing rule taken: with the oneDNN setting forced on, short sequences run
    written out, long ones the fused kernel at full precision) as outside."""
    if fast_setting and not HAS_SETTING:
        pytest.skip("this PyTorch has no oneDNN float32 setting")
    torch.manual_seed(0)
    model = lm(seq_len=128, max_len=128)
    short, long = torch.randint(3, 41, (3, 9)), torch.randint(3, 41, (2, 120))
    keep = torch.ones(3, 9, dtype=torch.bool)
    keep[0, 6:] = False

    def step():
        model.zero_grad()
        out = model(short, mask=keep).square().mean() + model(long).square().mean()
        out.backward()
        return out.detach(), [grad_of(p).clone() for p in model.parameters()]

    plain = step()
    setting = precision._matmul_precision("bf16") if fast_setting else contextlib.nullcontext()
    with setting, fast.cpu(model):
        inside = step()
    torch.testing.assert_close(inside[0], plain[0], rtol=1e-12, atol=1e-12)
    for a, b in zip(inside[1], plain[1]):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


def test_bert_training_with_dropout_inside_equals_written_out_attention_in_float64():
    """BERT's fine-tuning step with its dropout (0.1 on attention and on every sublayer): inside
    the block (the training kernel for the written-out route) the loss and every gradient equal
    those of the same model with written-out cores (``attend()``) outside, from the same seed:
    the same dropout draws, the same arithmetic."""
    cfg: dict[str, Any] = dict(
        vocab_size=53,
        n_layers=2,
        seq_len=12,
        max_len=12,
        dropout=0.1,
        attn_dropout=0.1,
        pretraining_heads=False,
        n_classes=3,
        **ODD,
    )
    torch.manual_seed(0)
    engine = Encoder(EncoderConfig(**cfg)).double()
    written = Encoder(EncoderConfig(**cfg, fused_attention=False)).double()
    written.load_state_dict(engine.state_dict())
    tokens, labels = torch.randint(3, 53, (5, 12)), torch.tensor([0, 2, 1, 1, 0])
    keep = torch.ones(5, 12, dtype=torch.bool)
    keep[1, 7:] = False
    keep[3, 4:] = False

    def step(model):
        torch.manual_seed(1)
        model.zero_grad()
        logits = model.class_logits(model(tokens, segments=torch.zeros_like(tokens), mask=keep))
        loss = F.cross_entropy(logits, labels)
        loss.backward()
        return loss.detach(), [p.grad.clone() for p in model.parameters()]

    plain = step(written)
    with fast.cpu(engine):
        inside = step(engine)
    torch.testing.assert_close(inside[0], plain[0], rtol=1e-12, atol=1e-12)
    for a, b in zip(inside[1], plain[1]):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)
    assert not torch.allclose(plain[0], step(engine.eval())[0])  # and dropout did act


def test_float32_inside_stays_at_float32_accuracy():
    """What the engine takes on this CPU (the oneDNN setting only where it is float32-accurate):
    outputs and gradients of a float32 model inside the block within float32's error of a
    float64 reference."""
    torch.manual_seed(0)
    model = lm(torch.float32, seq_len=64, max_len=64)
    ref = lm(seq_len=64, max_len=64)
    ref.load_state_dict(model.state_dict())
    x = torch.randint(3, 41, (4, 64))
    out_ref = ref(x)
    out_ref.square().mean().backward()
    with fast.cpu(model):
        out = model(x)
        out.square().mean().backward()

    def rel(a, b):
        return float((a.double() - b).abs().max() / b.abs().max())

    assert rel(out.detach(), out_ref.detach()) < 1e-5
    assert rel(model.embed.token.weight.grad, ref.embed.token.weight.grad) < 1e-4


@pytest.mark.parametrize("fast_setting", [False, True])
def test_models_compile_to_one_graph_inside(fast_setting):
    """``torch.compile`` traces every model whole on a CPU inside the block: the engine's kernel
    reads the setting in a way compiled code can trace (``fullgraph=True`` raises at any graph
    break; asking ``torch.backends.mkldnn`` directly broke the graph in every layer)."""
    if fast_setting and not HAS_SETTING:
        pytest.skip("this PyTorch has no oneDNN float32 setting")
    torch.manual_seed(0)
    lm_model = DecoderLM(
        DecoderLMConfig(vocab_size=300, d_model=32, n_heads=4, d_ff=64, n_layers=2, seq_len=16, dropout=0.1)
    )
    ed = EncoderDecoder(
        EncoderDecoderConfig(
            vocab_size=300, d_model=32, n_heads=4, d_ff=64, n_layers=2, dropout=0.1, max_len=32, seq_len=16
        )
    )
    src, tgt = torch.randint(3, 300, (2, 12)), torch.randint(3, 300, (2, 10))
    setting = precision._matmul_precision("bf16") if fast_setting else contextlib.nullcontext()
    torch._dynamo.reset()
    with setting:
        for model, args in ((lm_model, (tgt,)), (ed, (src, tgt))):
            with fast.cpu(model):
                out = torch.compile(model, backend="eager", fullgraph=True)(*args)
                out.float().square().mean().backward()  # training mode: dropout, gradients
            assert all(p.grad is not None for p in model.parameters() if p.requires_grad)
