"""The same models on CUDA: parity with float64 references and with the CPU, the chunked path for
head sizes no fused kernel takes, decoding, and training end to end (bf16, compile, resume).

CI has no GPU, so these skip there; run them on a CUDA machine with ``pytest -m gpu``.
"""

from __future__ import annotations

import json
import shutil
from typing import Any

import pytest
import torch
from safetensors.torch import load_file

from fullrank.cli import main
from fullrank.fast import BeamDecoder
from fullrank.inference import (
    Seq2SeqDecoder,
    UncachedSeq2SeqDecoder,
    beam_search,
    greedy_search,
    max_output_len,
)
from fullrank.layers.attention import FUSED_MAX_HEAD, MultiHeadAttention, attend, chunked_attention
from fullrank.layers.masks import causal_mask, padding_mask
from fullrank.models import DecoderLM, DecoderLMConfig, EncoderDecoder, EncoderDecoderConfig
from tests.e2e.bert_fixture import write_configs
from tests.e2e.lm_fixture import tiny_experiment
from tests.helpers import ODD
from tests.inference.toy import BOS, EOS, padded_sources, translation_model
from tests.layers.test_attention import naive_multihead

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (CI has no GPU)"),
]
CUDA = torch.device("cuda")


@pytest.mark.reference
@pytest.mark.parametrize(
    "heads", [(4, 64, 64), (3, 10, 6), (2, FUSED_MAX_HEAD + 64, 96)], ids=["4x64", "odd", "chunked"]
)
@pytest.mark.parametrize("case", ["causal", "padding", "cross"])
def test_attention_on_cuda_matches_the_float64_reference(heads, case):
    """float32 on CUDA (SDPA's kernels; ``d_head`` above 256 on :func:`chunked_attention`)
    against [V17] eq. 1 head by head in float64 on the CPU."""
    h, dh, dv = heads
    d, b, t, s = 48, 3, 37, 29
    mha = MultiHeadAttention(d, h, dh, dv).eval()
    x = torch.randn(b, t, d)
    kw: dict[str, Any]
    if case == "causal":
        mem, kw = x, dict(is_causal=True)
        allowed = causal_mask(t, t)[None].expand(b, t, t)
    else:
        mem = torch.randn(b, s, d) if case == "cross" else torch.randn(b, t, d)
        keep = torch.rand(b, mem.shape[1]) > 0.3
        keep[:, 0] = True
        allowed = keep[:, None, :].expand(b, t, mem.shape[1])
        kw = dict(mask=padding_mask(keep).to(CUDA))
    ref = naive_multihead(mha, x, mem, allowed)
    got = mha.to(CUDA)(x.to(CUDA), None if case == "causal" else mem.to(CUDA), **kw)
    torch.testing.assert_close(got.cpu().double(), ref, atol=2e-5, rtol=1e-4)


@pytest.mark.reference
@pytest.mark.parametrize("is_causal", [False, True])
def test_chunked_attention_on_cuda_equals_attend_with_gradients(is_causal):
    """Large heads in bfloat16 on CUDA: forward and gradients of the chunked path against the
    written-out product in float32."""
    b, h, n, dh = 2, 2, 300, 512
    q, k, v = (torch.randn(b, h, n, dh, device=CUDA, requires_grad=True) for _ in range(3))
    out = chunked_attention(*(x.bfloat16() for x in (q, k, v)), is_causal=is_causal, chunk=64)
    grad = torch.randn_like(out)
    got = torch.autograd.grad(out, (q, k, v), grad)
    ref_out = attend(q, k, v, is_causal=is_causal)
    ref = torch.autograd.grad(ref_out, (q, k, v), grad.float())
    torch.testing.assert_close(out.float(), ref_out, atol=3e-2, rtol=3e-2)
    for a, r in zip(got, ref):
        torch.testing.assert_close(a, r, atol=6e-2, rtol=6e-2)


def _lm(**kw) -> DecoderLM:
    return DecoderLM(DecoderLMConfig(**{**dict(vocab_size=53, n_layers=2, seq_len=40, **ODD), **kw})).eval()


@pytest.mark.parametrize("d_head", [10, FUSED_MAX_HEAD + 8])
def test_language_model_on_cuda_matches_the_cpu_and_is_causal(d_head):
    model = _lm(d_head=d_head)
    ids = torch.randint(0, 53, (3, 40))
    cpu = model(ids)
    gpu_model = model.to(CUDA)
    gpu = gpu_model(ids.to(CUDA))
    torch.testing.assert_close(gpu.cpu(), cpu, atol=1e-4, rtol=1e-4)
    changed = ids.clone()
    changed[:, 25:] = torch.randint(0, 53, (3, 15))
    later = gpu_model(changed.to(CUDA))
    torch.testing.assert_close(later[:, :25], gpu[:, :25], atol=1e-5, rtol=1e-5)
    assert not torch.allclose(later[:, 25:], gpu[:, 25:])


def test_encoder_decoder_on_cuda_matches_the_cpu_with_padding():
    model = EncoderDecoder(
        EncoderDecoderConfig(vocab_size=41, n_layers=2, n_decoder_layers=3, max_len=64, seq_len=16, **ODD)
    ).eval()
    src, keep = padded_sources([11, 4, 8], 41)
    tgt = torch.randint(3, 41, (3, 9))
    cpu = model(src, tgt, src_mask=keep)
    gpu = model.to(CUDA)(src.to(CUDA), tgt.to(CUDA), src_mask=keep.to(CUDA))
    torch.testing.assert_close(gpu.cpu(), cpu, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("cached", [Seq2SeqDecoder, BeamDecoder], ids=["plain", "engine"])
@pytest.mark.parametrize("norm_first", [False, True])
def test_decoding_on_cuda_equals_the_cpu_and_the_uncached_reference(norm_first, cached):
    """float64 on CUDA: cached greedy and beam search (the plain decoder, and the engine's that
    ``fullrank translate`` uses) give the CPU's outputs and scores, and the uncached reference
    decoder's."""
    model = translation_model(norm_first=norm_first)
    src, keep = padded_sources([6, 2, 4, 9], 13)
    limit = max_output_len(keep.sum(1), b=8)
    kw: dict[str, Any] = dict(batch_size=4, bos_id=BOS, eos_id=EOS, max_len=limit)

    def decode(m, s, k, dev):
        s, k = s.to(dev), k.to(dev)
        greedy = greedy_search(cached(m, s, k), **kw)
        beam = beam_search(cached(m, s, k), beam_size=4, n_best=4, alpha=0.6, **kw)
        return greedy, [[(h.tokens, h.score) for h in sent] for sent in beam]

    cpu_greedy, cpu_beam = decode(model, src, keep, "cpu")
    model = model.to(CUDA)
    gpu_greedy, gpu_beam = decode(model, src, keep, CUDA)
    assert gpu_greedy == cpu_greedy
    assert greedy_search(UncachedSeq2SeqDecoder(model, src.to(CUDA), keep.to(CUDA)), **kw) == gpu_greedy
    for g, c in zip(gpu_beam, cpu_beam):
        assert [x for x, _ in g] == [x for x, _ in c]
        assert [y for _, y in g] == pytest.approx([y for _, y in c], abs=1e-9)


@pytest.mark.slow
def test_training_on_cuda_in_bf16_compiled_and_resumed(tmp_path, capsys):
    """``fullrank train`` on the GPU with bf16 autocast and ``torch.compile``: it learns, and a run
    stopped half-way and resumed ends with the weights of the run that went straight through."""
    extra = "train.device=cuda train.precision=bf16 train.compile=true train.keep_last=10".split()
    assert main(["train", str(tiny_experiment(tmp_path, steps=24, save_every=6)), "--quiet", *extra]) == 0
    run = tmp_path / "runs" / "tiny"
    records = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    losses = [r["loss"] for r in records if r["split"] == "train"]
    assert losses[-1] < losses[0] - 0.3, losses
    # the same run as if it had been stopped after step 12: later checkpoints gone, then resumed
    copy = tmp_path / "copy"
    shutil.copytree(tmp_path / "runs", copy / "runs")
    shutil.copy(tmp_path / "tiny.yaml", copy / "tiny.yaml")
    for step in (18, 24):
        shutil.rmtree(copy / f"runs/tiny/checkpoints/step-{step:08d}")
    (copy / "runs/tiny/checkpoints/latest").write_text("step-00000012")
    assert (
        main(["train", str(copy / "tiny.yaml"), "--quiet", "--resume", *extra, f"out_dir={copy / 'runs'}"])
        == 0
    )
    capsys.readouterr()
    a = load_file(str(run / "checkpoints/step-00000024/model.safetensors"))
    b = load_file(str(copy / "runs/tiny/checkpoints/step-00000024/model.safetensors"))
    assert a.keys() == b.keys()
    for key in a:
        torch.testing.assert_close(b[key], a[key], atol=1e-5, rtol=1e-4, msg=key)


@pytest.mark.slow
def test_bert_pretraining_and_fine_tuning_on_cuda(tmp_path):
    """The BERT tasks on the GPU: pre-training's losses follow the CPU's in float32 (no dropout,
    the same masks), and pre-training, classification and SQuAD fine-tuning run in bf16 to
    their scores, as ``configs/sweeps/b20_bert_gpu.yaml`` runs them."""
    cfgs = write_configs(tmp_path, steps=4)
    exact = "model.dropout=0.0 model.attn_dropout=0.0 model.ffn_dropout=0.0".split()
    for device in ("cpu", "cuda"):
        argv = ["train", str(cfgs["bert"]), "--quiet", *exact, f"train.device={device}", f"name=pre_{device}"]
        assert main(argv) == 0, device
    losses = {
        device: [
            r["loss"]
            for r in map(
                json.loads, (tmp_path / "runs" / f"pre_{device}" / "metrics.jsonl").read_text().splitlines()
            )
            if r["split"] == "train"
        ]
        for device in ("cpu", "cuda")
    }
    assert len(losses["cuda"]) == 2 and losses["cuda"] == pytest.approx(losses["cpu"], rel=1e-3)
    bf16 = ["--quiet", "train.device=cuda", "train.precision=bf16"]
    assert main(["train", str(cfgs["bert"]), *bf16]) == 0
    for task in ("classify", "squad"):
        assert main(["train", str(cfgs[task]), *bf16]) == 0, task
    cls = json.loads((tmp_path / "runs" / "cls" / "results.json").read_text())
    qa = json.loads((tmp_path / "runs" / "qa" / "results.json").read_text())
    assert 0 <= cls["valid"]["accuracy"] <= 100 and qa["test"]["questions"] == 12
