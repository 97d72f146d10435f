"""GPU benchmarks: MFU of a GPT-2-small LM, and where each head size lands.

``python bench/gpu.py [--out DIR] [--sections lm,attention,long] [--lm-batch 16,32]`` on a CUDA
machine; ``--smoke`` runs every section at toy sizes on whatever device there is (the tests' CPU).

Sections:

- ``ceiling`` — the bf16 matrix-multiply rate of this GPU (8192³ products, mean of 10 after 3
  warm-ups): the denominator of every utilisation below.
- ``lm`` — one training step (forward, backward, fused AdamW) of a GPT-2-small-sized LM
  (12 layers, d_model 768, 12 heads × 64, vocab 50304, seq 1024) under bf16 autocast and
  ``torch.compile``, attention through ``scaled_dot_product_attention`` (FlashAttention): fullrank's
  ``DecoderLM`` against Hugging Face's ``GPT2LMHeadModel`` (``attn_implementation="sdpa"``) with
  the same settings, interleaved in rounds. Model-FLOPs utilisation counts ``6·N + 12·L·H·Dh·n``
  FLOPs per token (PaLM's appendix B; ``N`` the parameters less the position table, so the tied
  output projection is counted), against the measured ceiling.
- ``attention`` — forward + backward of attention alone at ``(n_heads, d_head)`` from 32 to 1024
  per head: which of PyTorch's kernels accept it (FlashAttention, memory-efficient, cuDNN, math),
  which one PyTorch picks, TFLOP/s and peak memory for each; and fullrank's own dispatch
  (:class:`fullrank.layers.attention.ScaledDotProduct`), whose path for ``d_head > 256`` is the
  query-chunked, checkpointed :func:`fullrank.layers.attention.chunked_attention`.
- ``long`` — ``d_head`` 1024 as ``n`` grows from 1024 to 16384 (causal): fullrank's path, the
  memory-efficient and math kernels, and FlashAttention and cuDNN at ``d_head`` 256 beside them.

Prints Markdown tables and writes ``gpu.json`` and ``gpu.md`` into ``--out`` (``gpu-SECTIONS.*``
when ``--sections`` is not the default).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from jobs import lm_model

GPT2_SMALL = dict(vocab=50304, d=768, layers=12, heads=12, d_ff=3072, seq=1024, batch=16)
SMOKE_LM = dict(vocab=512, d=64, layers=2, heads=4, d_ff=256, seq=64, batch=2)

# (n_heads, d_head) of the attention map: the CPU suite's six, then [B20]'s d_head = n region
HEAD_GRID = [
    (8, 32),
    (16, 32),
    (32, 32),
    (8, 64),
    (8, 128),
    (8, 256),
    (16, 256),
    (8, 512),
    (4, 1024),
    (8, 1024),
]
DEFAULT_SECTIONS = "ceiling,lm,attention,long"
BACKENDS = {
    "flash": SDPBackend.FLASH_ATTENTION,
    "efficient": SDPBackend.EFFICIENT_ATTENTION,
    "cudnn": SDPBackend.CUDNN_ATTENTION,
    "math": SDPBackend.MATH,
}


# ------------------------------------------------------------------------------------- timing
def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn: Callable[[], Any], device: torch.device, warmup: int, iters: int) -> list[float]:
    """Seconds per call of ``fn``, ``iters`` calls after ``warmup`` untimed ones."""
    for _ in range(warmup):
        fn()
    sync(device)
    out = []
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        sync(device)
        out.append(time.perf_counter() - t0)
    return out


def peak_mem_mb(device: torch.device) -> float:
    return torch.cuda.max_memory_allocated(device) / 2**20 if device.type == "cuda" else float("nan")


def reset_peak(device: torch.device) -> float:
    """Start a peak-memory measurement; returns the MiB allocated now (subtract from the peak)."""
    if device.type != "cuda":
        return float("nan")
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats(device)
    return torch.cuda.memory_allocated(device) / 2**20


# ------------------------------------------------------------------------------------ ceiling
def ceiling(device: torch.device, smoke: bool) -> dict[str, Any]:
    n = 256 if smoke else 8192
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    times = timed(lambda: a @ b, device, warmup=3, iters=10)
    tflops = 2 * n**3 / statistics.mean(times) / 1e12
    return {"n": n, "dtype": str(dtype), "tflops": tflops}


# ----------------------------------------------------------------------------------------- LM
def model_flops_per_token(s: dict[str, int], n_params: int) -> float:
    """``6·N + 12·L·H·Dh·n`` (PaLM, appendix B); ``N`` excludes the position table."""
    n = n_params - s["seq"] * s["d"]
    return 6 * n + 12 * s["layers"] * s["d"] * s["seq"]


class LMJob:
    """One implementation's compiled training step on the GPU."""

    def __init__(self, impl: str, s: dict[str, int], device: torch.device, compile: bool) -> None:
        torch.manual_seed(0)
        self.device = device
        model, self.loss_fn = lm_model(impl, s)
        self.model = model.to(device)
        self.params = sum(p.numel() for p in self.model.parameters())
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=1e-4, fused=device.type == "cuda")
        self.x = torch.randint(0, s["vocab"], (s["batch"], s["seq"] + 1), device=device)
        self.loss = torch.compile(self._loss) if compile else self._loss
        self.dtype = torch.bfloat16 if device.type == "cuda" else torch.float32

    def _loss(self, x: torch.Tensor) -> torch.Tensor:
        with torch.autocast(self.device.type, dtype=self.dtype, enabled=self.device.type == "cuda"):
            return self.loss_fn(self.model, x)

    def step(self) -> None:
        self.loss(self.x).backward()
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)


def lm(
    device: torch.device, smoke: bool, ceiling_tflops: float, rounds: int, batch: int | None
) -> dict[str, Any]:
    s = dict(SMOKE_LM if smoke else GPT2_SMALL)
    s["batch"] = batch or s["batch"]
    compile = device.type == "cuda"
    jobs = {impl: LMJob(impl, s, device, compile) for impl in ("fullrank", "hf")}
    warm = 1 if smoke else 5
    iters = 2 if smoke else 10
    times: dict[str, list[float]] = {impl: [] for impl in jobs}
    mem: dict[str, float] = {}
    t_compile: dict[str, float] = {}
    for impl, job in jobs.items():  # compile + warm up each once, peak memory of a step
        t0 = time.perf_counter()
        before = reset_peak(device)
        timed(job.step, device, warmup=warm, iters=1)
        t_compile[impl] = time.perf_counter() - t0
        mem[impl] = peak_mem_mb(device) - before  # activations, gradients, optimizer state
    for _ in range(rounds):  # interleaved: A, B, A, B …
        for impl, job in jobs.items():
            times[impl] += timed(job.step, device, warmup=1, iters=iters)
    tokens = s["batch"] * s["seq"]
    out: dict[str, Any] = {"shape": s, "rounds": rounds, "steps_per_round": iters, "impls": {}}
    for impl, job in jobs.items():
        step = statistics.median(times[impl])
        fpt = model_flops_per_token(s, job.params)
        out["impls"][impl] = {
            "params": job.params,
            "step_ms": 1e3 * step,
            "tokens_per_s": tokens / step,
            "model_tflops": fpt * tokens / step / 1e12,
            "mfu": fpt * tokens / step / 1e12 / ceiling_tflops,
            "peak_mem_mb": mem[impl],
            "compile_and_warmup_s": t_compile[impl],
        }
    out["ratio_tokens_per_s"] = out["impls"]["fullrank"]["tokens_per_s"] / out["impls"]["hf"]["tokens_per_s"]
    return out


# ---------------------------------------------------------------------------------- attention
def attention_case(
    h: int, dh: int, device: torch.device, smoke: bool, ceiling_tflops: float
) -> dict[str, Any]:
    """Forward + backward of non-causal attention ``(B, h, n, dh)`` on each kernel."""
    from fullrank.layers.attention import ScaledDotProduct, chunked_attention

    b, n = (1, 32) if smoke else (4, 4096)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    q, k, v = (torch.randn(b, h, n, dh, device=device, dtype=dtype, requires_grad=True) for _ in range(3))
    g = torch.randn(b, h, n, dh, device=device, dtype=dtype)
    flops = 3 * 4 * b * h * n * n * dh  # forward 2 products of 2·n²·dh, backward twice that
    row: dict[str, Any] = {"n_heads": h, "d_head": dh, "batch": b, "seq": n, "kernels": {}}
    with contextlib.suppress(Exception):
        row["pytorch_picks"] = SDPBackend(torch._fused_sdp_choice(q, k, v)).name

    def run(fn: Callable[[], torch.Tensor]) -> dict[str, Any]:
        def step() -> None:
            fn().backward(g)
            q.grad = k.grad = v.grad = None

        try:
            before = reset_peak(device)
            times = timed(step, device, warmup=1 if smoke else 3, iters=2 if smoke else 10)
        except (RuntimeError, torch.OutOfMemoryError) as e:
            return {"ok": False, "why": str(e).splitlines()[0][:160]}
        ms = 1e3 * statistics.median(times)
        tflops = flops / (ms / 1e3) / 1e12
        return {
            "ok": True,
            "ms": ms,
            "tflops": tflops,
            "of_ceiling": tflops / ceiling_tflops,
            "peak_mem_mb": peak_mem_mb(device) - before,
        }

    if device.type == "cuda":
        for name, backend in BACKENDS.items():
            with sdpa_kernel([backend]):
                row["kernels"][name] = run(lambda: F.scaled_dot_product_attention(q, k, v))
    sdp = ScaledDotProduct()
    row["kernels"]["fullrank"] = run(lambda: sdp(q, k, v))
    row["kernels"]["chunked-256q"] = run(lambda: chunked_attention(q, k, v, chunk=256))
    return row


def _attention_step(
    fn: Callable[..., torch.Tensor],
    backends: list[SDPBackend],
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
) -> None:
    """One causal attention forward and backward under ``backends``; the gradients dropped."""
    with sdpa_kernel(backends):
        fn(q, k, v, is_causal=True).backward(g)
    q.grad = k.grad = v.grad = None


def long_heads(device: torch.device, smoke: bool) -> list[dict[str, Any]]:
    """[B20]'s ``d_head = n`` region: forward + backward at ``d_head`` 1024 as ``n`` grows, on
    fullrank's path and on the kernels PyTorch has for it, against FlashAttention at 256."""
    from fullrank.layers.attention import ScaledDotProduct

    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    rows = []
    for n in (32, 64) if smoke else (1024, 2048, 4096, 8192, 16384):
        for dh, kernels in ((1024, ("fullrank", "efficient", "math")), (256, ("flash", "cudnn"))):
            h, b = 4, 1
            q, k, v = (
                torch.randn(b, h, n, dh, device=device, dtype=dtype, requires_grad=True) for _ in range(3)
            )
            g = torch.randn_like(q)
            flops = 3 * 4 * b * h * n * n * dh
            for name in kernels:
                if device.type != "cuda" and name != "fullrank":
                    continue
                fn = ScaledDotProduct() if name == "fullrank" else F.scaled_dot_product_attention
                backends = list(BACKENDS.values()) if name == "fullrank" else [BACKENDS[name]]

                step = functools.partial(_attention_step, fn, backends, q, k, v, g)
                row: dict[str, Any] = {"seq": n, "n_heads": h, "d_head": dh, "kernel": name}
                try:
                    before = reset_peak(device)
                    ms = 1e3 * statistics.median(timed(step, device, warmup=2, iters=5))
                    row |= {
                        "ms": ms,
                        "tflops": flops / 2 / (ms / 1e3) / 1e12,  # causal: half
                        "peak_mem_mb": peak_mem_mb(device) - before,
                    }
                except (RuntimeError, torch.OutOfMemoryError) as e:
                    row |= {"why": str(e).splitlines()[0][:160]}
                rows.append(row)
                print(json.dumps(row), flush=True)
            del q, k, v, g
    return rows


def attention(device: torch.device, smoke: bool, ceiling_tflops: float) -> list[dict[str, Any]]:
    grid = HEAD_GRID[:3] + [(2, 512)] if smoke else HEAD_GRID
    return [attention_case(h, dh, device, smoke, ceiling_tflops) for h, dh in grid]


# ---------------------------------------------------------------------------------- reporting
def markdown(res: dict[str, Any]) -> str:
    lines = [f"# GPU benchmarks — {res['device']} (torch {res['torch']})", ""]
    if "ceiling" in res:
        c = res["ceiling"]
        lines += [f"Matrix-multiply ceiling: {c['tflops']:.0f} TFLOP/s ({c['dtype']}, {c['n']}³).", ""]
    for r in res.get("lm", []):
        s = r["shape"]
        lines += [
            f"## LM training step (GPT-2 small: {s['layers']} layers, d {s['d']}, "
            f"{s['heads']} heads, vocab {s['vocab']}, seq {s['seq']}, batch {s['batch']}; "
            f"bf16 autocast, fused AdamW, torch.compile, SDPA; {r['rounds']} interleaved rounds)",
            "",
            "| impl | params | step ms | tokens/s | model TFLOP/s | MFU | step peak MiB |",
            "|---|---:|---:|---:|---:|---:|---:|",
        ]
        for impl, x in r["impls"].items():
            lines.append(
                f"| {impl} | {x['params']:,} | {x['step_ms']:.1f} | "
                f"{x['tokens_per_s']:,.0f} | {x['model_tflops']:.0f} | "
                f"{100 * x['mfu']:.1f}% | {x['peak_mem_mb']:,.0f} |"
            )
        lines += ["", f"fullrank / Hugging Face tokens/s: {r['ratio_tokens_per_s']:.2f}×", ""]
    if "attention" in res:
        rows = res["attention"]
        names = list(rows[0]["kernels"])
        b, n = rows[0]["batch"], rows[0]["seq"]
        lines += [
            f"## Attention forward+backward (batch {b}, n {n}, bf16, non-causal): "
            f"TFLOP/s · peak MiB beyond q, k, v, the output gradient and what was allocated before",
            "",
            "| heads × d_head | PyTorch picks | " + " | ".join(names) + " |",
            "|---|---|" + "---|" * len(names),
        ]
        for row in rows:
            cells = []
            for name in names:
                k = row["kernels"][name]
                cells.append(f"{k['tflops']:.0f} · {k['peak_mem_mb']:,.0f}" if k["ok"] else "—")
            lines.append(
                f"| {row['n_heads']} × {row['d_head']} | {row.get('pytorch_picks', '?')} | "
                + " | ".join(cells)
                + " |"
            )
        lines.append("")
    if "long" in res:
        lines += [
            "## d_head 1024 as n grows (4 heads, batch 1, causal, forward+backward): "
            "TFLOP/s · peak MiB beyond the inputs; FlashAttention and cuDNN at d_head 256",
            "",
            "| n | kernel | d_head | ms | TFLOP/s | peak MiB |",
            "|---:|---|---:|---:|---:|---:|",
        ]
        for r in res["long"]:
            if "ms" in r:
                lines.append(
                    f"| {r['seq']} | {r['kernel']} | {r['d_head']} | {r['ms']:.1f} | "
                    f"{r['tflops']:.0f} | {r['peak_mem_mb']:,.0f} |"
                )
            else:
                lines.append(f"| {r['seq']} | {r['kernel']} | {r['d_head']} | — | — | {r['why']} |")
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=Path("bench/results"))
    p.add_argument("--sections", default=DEFAULT_SECTIONS)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument(
        "--lm-batch",
        type=lambda x: [int(b) for b in x.split(",")],
        default=[0],
        help="LM batch sizes, comma-separated (default: GPT-2 small's 16)",
    )
    p.add_argument("--smoke", action="store_true", help="toy sizes, any device (for the tests)")
    args = p.parse_args(argv)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.type != "cuda" and not args.smoke:
        p.error("no CUDA device: these benchmarks need a GPU (--smoke runs toy sizes anywhere)")
    sections = args.sections.split(",")
    res: dict[str, Any] = {
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "torch": torch.__version__,
    }
    res["ceiling"] = ceiling(device, args.smoke)
    print(f"ceiling: {res['ceiling']['tflops']:.1f} TFLOP/s", flush=True)
    if "lm" in sections:
        res["lm"] = []
        for batch in args.lm_batch:
            res["lm"].append(lm(device, args.smoke, res["ceiling"]["tflops"], args.rounds, batch))
            print(json.dumps(res["lm"][-1]), flush=True)
            if device.type == "cuda":
                torch._dynamo.reset()
                torch.cuda.empty_cache()
    if "attention" in sections:
        res["attention"] = attention(device, args.smoke, res["ceiling"]["tflops"])
    if "long" in sections:
        res["long"] = long_heads(device, args.smoke)
    md = markdown(res)
    print(md)
    args.out.mkdir(parents=True, exist_ok=True)
    name = "gpu" if args.sections == DEFAULT_SECTIONS else "gpu-" + "-".join(sections)
    name += "-smoke" if args.smoke else ""
    (args.out / f"{name}.json").write_text(json.dumps(res, indent=1))
    (args.out / f"{name}.md").write_text(md + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
