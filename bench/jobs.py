"""One benchmark job, run in its own process: ``python bench/jobs.py '<json spec>'``.

A spec names a ``workload`` (``lm``, ``encdec``, ``attention``, ``matmul``) and an ``impl``;
the job builds the model, runs untimed warm-up steps, times ``steps`` steps and prints one JSON
line: ``value`` (throughput), ``unit``, ``params``, ``step_ms`` (median), ``gflops`` (achieved
model FLOP/s) and ``peak_rss_mb``. All float32 on the CPU with ``threads`` threads; dropout 0
everywhere, so every implementation does the same arithmetic.

Implementations:

- ``fullrank`` — fullrank as ``fullrank train`` trains: the speed engine on (``fullrank.fast.cpu``
  around the steps, freed memory kept for reuse) and PyTorch's fused AdamW;
- ``fullrank_same`` — fullrank with the peers' settings (PyTorch's defaults);
- ``hf`` — Hugging Face ``transformers`` (GPT-2 for the LM, Marian for encoder-decoder);
- ``xt`` — ``x-transformers`` (``TransformerWrapper``/``XTransformer``);
- ``torch`` — ``torch.nn.TransformerEncoder``/``torch.nn.Transformer`` with embeddings.
"""

from __future__ import annotations

import contextlib
import json
import math
import resource
import statistics
import sys
import time
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

LM_SIZES = {
    "S": dict(vocab=8192, d=256, layers=4, heads=8, d_ff=1024, seq=256, batch=8),
    "M": dict(vocab=32000, d=512, layers=6, heads=8, d_ff=2048, seq=256, batch=4),
}
ENCDEC = dict(vocab=8000, d=256, layers=3, heads=4, d_ff=1024, src=32, tgt=32, batch=32)


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def n_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


# ------------------------------------------------------------------------------ language model
def lm_model(impl: str, s: dict[str, int]) -> tuple[nn.Module, Any]:
    """A GPT-2-shaped LM (pre-LN, GELU, learned positions, tied output) and its loss function
    ``(model, tokens (B, T+1)) → scalar``."""
    v, d, L, h, f, t = s["vocab"], s["d"], s["layers"], s["heads"], s["d_ff"], s["seq"]
    if impl in ("fullrank", "fullrank_same"):
        from fullrank.data.batch import LMBatch
        from fullrank.models import DecoderLM, DecoderLMConfig
        from fullrank.training.tasks import LanguageModeling

        model: nn.Module = DecoderLM(
            DecoderLMConfig(
                vocab_size=v,
                d_model=d,
                n_heads=h,
                d_ff=f,
                n_layers=L,
                seq_len=t,
                dropout=0.0,
                norm_first=True,
                activation="gelu",
                positions="learned",
                d_head=s.get("d_head"),
            )
        )
        task = LanguageModeling()  # what `fullrank train` runs: the fused output cross-entropy
        return model, lambda m, x: _mean(task.loss(m, LMBatch(x)))
    if impl == "hf":
        from transformers import GPT2Config, GPT2LMHeadModel

        cfg = GPT2Config(  # type: ignore[call-arg]  # typed signature omits its **kwargs, attn_implementation
            vocab_size=v,
            n_positions=t,
            n_embd=d,
            n_layer=L,
            n_head=h,
            n_inner=f,
            resid_pdrop=0.0,
            embd_pdrop=0.0,
            attn_pdrop=0.0,
            bos_token_id=0,
            eos_token_id=0,
            attn_implementation="sdpa",
        )
        model = GPT2LMHeadModel(cfg)
        return model, lambda m, x: F.cross_entropy(
            m(input_ids=x[:, :-1]).logits.reshape(-1, v), x[:, 1:].reshape(-1)
        )
    if impl == "xt":
        from x_transformers import Decoder, TransformerWrapper

        model = TransformerWrapper(
            num_tokens=v,
            max_seq_len=t,
            tie_embedding=True,
            attn_layers=Decoder(dim=d, depth=L, heads=h, attn_dim_head=d // h, ff_mult=f // d),
        )
        return model, lambda m, x: F.cross_entropy(m(x[:, :-1]).reshape(-1, v), x[:, 1:].reshape(-1))
    if impl == "torch":
        model = TorchLM(v, d, L, h, f, t)
        return model, lambda m, x: F.cross_entropy(m(x[:, :-1]).reshape(-1, v), x[:, 1:].reshape(-1))
    raise ValueError(impl)


def make_adamw(impl: str, model: nn.Module) -> torch.optim.Optimizer:
    """AdamW: PyTorch's fused kernel for ``fullrank`` (what ``fullrank train`` uses), PyTorch's
    default implementation for every other side (``fullrank_same`` included)."""
    return torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True if impl == "fullrank" else None)


def _mean(out: Any) -> torch.Tensor:
    return out.loss / out.n_tokens


class TorchLM(nn.Module):
    """``torch.nn.TransformerEncoder`` (pre-LN, GELU) as a causal LM with tied embeddings."""

    def __init__(self, v: int, d: int, layers: int, h: int, f: int, t: int) -> None:
        super().__init__()
        self.tok, self.pos = nn.Embedding(v, d), nn.Embedding(t, d)
        layer = nn.TransformerEncoderLayer(
            d, h, f, dropout=0.0, activation="gelu", batch_first=True, norm_first=True
        )
        self.blocks = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(d)
        self.mask = nn.Transformer.generate_square_subsequent_mask(t)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = x.shape[1]
        h = self.tok(x) + self.pos.weight[:t]
        h = self.blocks(h, mask=self.mask[:t, :t], is_causal=True)
        return self.norm(h) @ self.tok.weight.T


def lm_job(spec: dict[str, Any]) -> dict[str, Any]:
    s = LM_SIZES[spec["size"]] if "size" in spec else spec["shape"]
    torch.manual_seed(0)
    model, loss_fn = lm_model(spec["impl"], s)
    opt = make_adamw(spec["impl"], model)
    x = torch.randint(0, s["vocab"], (s["batch"], s["seq"] + 1))

    def step() -> None:
        loss = loss_fn(model, x)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    rss_before = peak_rss_mb()
    with engine(spec, model):
        times = timed(step, spec)
    tokens = s["batch"] * s["seq"]
    inner = s["heads"] * s.get("d_head", s["d"] // s["heads"])
    flops = (
        6 * non_embedding_matmul_params(s) * tokens
        + 6 * s["vocab"] * s["d"] * tokens
        + 3 * 2 * 2 * s["layers"] * s["batch"] * s["seq"] ** 2 * inner
    )  # attention (full n²)
    return {
        **result(spec, model, times, tokens, "tokens/s", flops),
        "step_rss_mb": peak_rss_mb() - rss_before,
    }


def non_embedding_matmul_params(s: dict[str, int]) -> int:
    inner = s["heads"] * s.get("d_head", s["d"] // s["heads"])
    return s["layers"] * (4 * s["d"] * inner + 2 * s["d"] * s["d_ff"])


# ------------------------------------------------------------------------------ encoder-decoder
def encdec_model(impl: str, s: dict[str, int]) -> tuple[nn.Module, Any]:
    v, d, L, h, f = s["vocab"], s["d"], s["layers"], s["heads"], s["d_ff"]
    from fullrank.models import EncoderDecoderConfig

    config = EncoderDecoderConfig(
        vocab_size=v, d_model=d, n_heads=h, d_ff=f, n_layers=L, dropout=0.0, max_len=256, seq_len=s["tgt"]
    )
    if impl in ("fullrank", "fullrank_same"):
        from fullrank.models import EncoderDecoder
        from fullrank.training.losses import linear_cross_entropy

        model: nn.Module = EncoderDecoder(config)

        def loss(m: EncoderDecoder, src: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
            # what the Translation task computes, for a batch without padding (no masks)
            h = m(src, tgt[:, :-1], hidden_only=True)
            return _mean(linear_cross_entropy(h, m.output_weight, tgt[:, 1:]))

        return model, loss
    if impl == "hf":
        from transformers import MarianConfig, MarianMTModel

        from fullrank.models.convert_hf import marian_config_kwargs

        # the same architecture, described by the converter that tests/reference checks
        model = MarianMTModel(MarianConfig(**marian_config_kwargs(config, pad_id=0, bos_id=1, eos_id=2)))
        return model, lambda m, src, tgt: F.cross_entropy(
            m(input_ids=src, decoder_input_ids=tgt[:, :-1]).logits.reshape(-1, v), tgt[:, 1:].reshape(-1)
        )
    if impl == "xt":
        from x_transformers import XTransformer

        model = XTransformer(
            dim=d,
            enc_num_tokens=v,
            enc_depth=L,
            enc_heads=h,
            enc_max_seq_len=s["src"],
            dec_num_tokens=v,
            dec_depth=L,
            dec_heads=h,
            dec_max_seq_len=s["tgt"] + 1,
            tie_token_emb=True,  # it shifts tgt itself
            enc_attn_dim_head=d // h,
            dec_attn_dim_head=d // h,
            enc_ff_mult=f // d,
            dec_ff_mult=f // d,
        )
        return model, lambda m, src, tgt: m(src, tgt)
    if impl == "torch":
        model = TorchSeq2Seq(v, d, L, h, f)
        return model, lambda m, src, tgt: F.cross_entropy(
            m(src, tgt[:, :-1]).reshape(-1, v), tgt[:, 1:].reshape(-1)
        )
    raise ValueError(impl)


class TorchSeq2Seq(nn.Module):
    """``torch.nn.Transformer`` (post-LN, ReLU) with a shared, scaled, tied embedding and
    sinusoidal positions: the [V17] model built from PyTorch's modules."""

    def __init__(self, v: int, d: int, layers: int, h: int, f: int) -> None:
        super().__init__()
        from fullrank.layers.embeddings import sinusoidal_table

        self.emb = nn.Embedding(v, d)
        self.pe: torch.Tensor
        self.register_buffer("pe", sinusoidal_table(256, d), persistent=False)
        self.core = nn.Transformer(d, h, layers, layers, f, dropout=0.0, batch_first=True)
        self.scale = math.sqrt(d)

    def forward(self, src: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
        s = self.emb(src) * self.scale + self.pe[: src.shape[1]]
        t = self.emb(tgt) * self.scale + self.pe[: tgt.shape[1]]
        mask = nn.Transformer.generate_square_subsequent_mask(tgt.shape[1])
        return self.core(s, t, tgt_mask=mask, tgt_is_causal=True) @ self.emb.weight.T


def encdec_job(spec: dict[str, Any]) -> dict[str, Any]:
    s = ENCDEC
    torch.manual_seed(0)
    model, loss_fn = encdec_model(spec["impl"], s)
    opt = make_adamw(spec["impl"], model)
    src = torch.randint(3, s["vocab"], (s["batch"], s["src"]))
    tgt = torch.randint(3, s["vocab"], (s["batch"], s["tgt"] + 1))

    def step() -> None:
        loss = loss_fn(model, src, tgt)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    with engine(spec, model):
        times = timed(step, spec)
    tokens = s["batch"] * (s["src"] + s["tgt"])
    d, f, L = s["d"], s["d_ff"], s["layers"]
    per_src = L * (4 * d * d + 2 * d * f)
    per_tgt = L * (8 * d * d + 2 * d * f) + s["vocab"] * d
    flops = 6 * s["batch"] * (per_src * s["src"] + per_tgt * s["tgt"])
    return result(spec, model, times, tokens, "tokens/s", flops)


# ------------------------------------------------------------------------- attention, matmul
def attention_job(spec: dict[str, Any]) -> dict[str, Any]:
    """Scaled dot-product attention alone (no projections), forward + backward."""
    from fullrank.layers.attention import ScaledDotProduct

    b, n, h, dh = spec.get("batch", 8), spec.get("seq", 256), spec["heads"], spec["d_head"]
    torch.manual_seed(0)
    q, k, v = (torch.randn(b, h, n, dh, requires_grad=True) for _ in range(3))
    core = ScaledDotProduct(fused=spec["impl"] != "explicit")

    def step() -> None:
        core(q, k, v).sum().backward()

    with engine(spec, core):
        times = timed(step, spec)
    flops = 3 * 4 * b * h * n * n * dh  # forward q·kᵀ and p·v, backward twice that
    return result(spec, None, times, b * n, "tokens/s", flops)


def matmul_job(spec: dict[str, Any]) -> dict[str, Any]:
    """The ceiling: a plain matrix multiply, forward + backward, measured the same way."""
    m = spec.get("m", 2048)
    torch.manual_seed(0)
    a = torch.randn(m, m, requires_grad=True)
    w = torch.randn(m, m, requires_grad=True)

    def step() -> None:
        (a @ w).sum().backward()

    with engine(spec, None):
        times = timed(step, spec)
    return result(spec, None, times, m, "rows/s", 3 * 2 * m**3)


# ---------------------------------------------------------------------------------- common
def engine(spec: dict[str, Any], model: nn.Module | None) -> contextlib.AbstractContextManager:
    """The ``fullrank`` side's speed engine around its steps, as ``fullrank train`` enters it
    (``fast.cpu``; for the matrix-multiply ceiling, its precision setting alone); nothing for
    the other sides."""
    if spec["impl"] != "fullrank":
        return contextlib.nullcontext()
    if model is None:
        from fullrank.fast.precision import onednn_matmul

        return onednn_matmul()
    from fullrank import fast

    return fast.cpu(model)


def timed(step: Any, spec: dict[str, Any]) -> list[float]:
    """Seconds per step after ``warmup`` untimed steps: wall time, or with ``"clock": "cpu"``
    the process's CPU time (for one thread on shared cores, which load disturbs far less)."""
    clock = time.process_time if spec.get("clock") == "cpu" else time.perf_counter
    for _ in range(spec.get("warmup", 3)):
        step()
    times = []
    for _ in range(spec.get("steps", 10)):
        t0 = clock()
        step()
        times.append(clock() - t0)
    return times


def result(
    spec: dict[str, Any], model: nn.Module | None, times: list[float], items: int, unit: str, flops: float
) -> dict[str, Any]:
    med = statistics.median(times)
    return {
        **spec,
        "value": items / med,
        "unit": unit,
        "step_ms": 1000 * med,
        "params": n_params(model) if model is not None else 0,
        "gflops": flops / med / 1e9,
        "peak_rss_mb": peak_rss_mb(),
    }


JOBS = {"lm": lm_job, "encdec": encdec_job, "attention": attention_job, "matmul": matmul_job}


def main() -> None:
    spec = json.loads(sys.argv[1])
    torch.set_num_threads(spec.get("threads", 2))
    if spec["impl"] == "fullrank":
        from fullrank.fast import keep_freed_memory

        keep_freed_memory()  # as the `fullrank` command does
    print(json.dumps(JOBS[spec["workload"]](spec)))


if __name__ == "__main__":
    main()
