"""The language-model recipe: an experiment file in, a trained, evaluated checkpoint out.

Steps: tokenizer (trained on the training file, or loaded) → token caches → ``DecoderLM`` →
:func:`fullrank.training.loop.train` → exact validation/test perplexity → a text sample → the
loss-curve PNG. Works the same on one CPU, one GPU, or under ``torchrun``.
"""

from __future__ import annotations

import json
import time
from typing import Any

import torch
from rich.console import Console

from fullrank import fast
from fullrank.data.corpus import tokenize_file
from fullrank.data.lm import LMBlocks, check_world
from fullrank.data.tokenizers import Tokenizer, ensure_vocab_matches
from fullrank.inference.decoders import LMDecoder
from fullrank.inference.sampling import sample
from fullrank.output import console as make_console
from fullrank.recipes.common import (Resume, RunReport, find_resume_point, keeps_thread_count,
                                     parallel_batch, parallel_line, prepare_tokenizer)
from fullrank.recipes.init import build_initialised, find_start, start_config
from fullrank.recipes.config import ExperimentConfig, resolved_yaml
from fullrank.training.checkpoints import latest_checkpoint, load_checkpoint
from fullrank.training.distributed import DistInfo, barrier, setup, sharded, teardown
from fullrank.training.loop import RunOutput, train
from fullrank.training.metrics import plot_run
from fullrank.training.tasks import LanguageModeling

def corpus(exp: ExperimentConfig, name: str | None, tok: Tokenizer, dist: DistInfo) -> Any:
    """Token ids of one split (rank 0 fills the cache first; the others then read it)."""
    if name is None:
        return None
    path = exp.data.path(name)
    if dist.is_main:
        ids = tokenize_file(path, tok, exp.data.cache_dir, eos_per_line=exp.data.eos_per_line)
    barrier(dist)
    if not dist.is_main:
        ids = tokenize_file(path, tok, exp.data.cache_dir, eos_per_line=exp.data.eos_per_line)
    return ids


@keeps_thread_count
def run_lm(exp: ExperimentConfig, *, resume: Resume = "never", progress: bool = True,
           console: Console | None = None) -> RunReport:
    """Train, evaluate and sample a language model as ``exp`` describes."""
    console = console or make_console()
    cfg = exp.train
    dist = setup(cfg.device)
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    check_world(cfg.batch_size, dist.rank, dist.world)  # before anything is read or written
    run_dir = exp.run_dir
    start = find_resume_point(run_dir, resume, resume_from=cfg.resume_from, dist=dist,
                              log=lambda line: console.print(line, markup=False))
    origin = find_start(exp)
    tok = prepare_tokenizer(exp, [exp.data.path(exp.data.train)], run_dir, dist,
                            resuming=start is not None, start=origin and origin.tokenizer)
    model_cfg = start_config(exp, origin, tok.vocab_size)
    ensure_vocab_matches(tok, model_cfg.vocab_size, f"model.vocab_size in {exp.name}")
    train_ids = corpus(exp, exp.data.train, tok, dist)
    valid_ids = corpus(exp, exp.data.valid, tok, dist)
    test_ids = corpus(exp, exp.data.test, tok, dist)

    model = build_initialised(model_cfg, exp, origin, resuming=start is not None, rank=dist.rank,
                              say=console.print if dist.is_main else (lambda _: None))
    n_params = sum(p.numel() for p in model.parameters())
    data = LMBlocks(train_ids, seq_len=model_cfg.seq_len, batch_size=cfg.batch_size,
                    seed=cfg.seed, name=exp.data.train)
    task = LanguageModeling(cfg.label_smoothing)
    # rank 0 evaluates alone, in batches of the global size: with train.eval_batches the
    # periodic validation covers the same rows as a one-process run
    eval_bs = cfg.batch_size

    def evaluate_split(ids: Any, name: str, limit: int | None) -> dict[str, float]:
        blocks = LMBlocks(ids, seq_len=model_cfg.seq_len, batch_size=eval_bs, seed=cfg.seed,
                          name=name)
        return task.evaluate(model, blocks.eval_batches(eval_bs), dist.device, limit=limit)

    parallel = parallel_batch(dist, per_rank=cfg.batch_size // dist.world,
                              grad_accum=cfg.grad_accum, unit="sequences")
    if dist.is_main:
        dh, dv = model_cfg.head_sizes
        console.print(f"[bold]{exp.name}[/bold]: {n_params:,} parameters · {model_cfg.n_layers} "
                      f"layers · d_model {model_cfg.d_model} · {model_cfg.n_heads} heads × d_head "
                      f"{dh} · seq_len {model_cfg.seq_len} · vocab {tok.vocab_size} ({tok.kind})")
        if dist.device.type == "cpu":
            console.print(fast.matmul_summary(cfg.fast_matmul, cfg.precision))
            console.print(fast.memory_summary())
        console.print(f"data: {len(train_ids):,} training tokens ({len(data):,} batches of "
                      f"{cfg.batch_size}×{model_cfg.seq_len + 1} per epoch)"
                      + (f" · resuming from {start.name}" if start else ""))
        if dist.distributed:
            console.print(parallel_line(parallel))
    out = RunOutput(run_dir, model_cfg, tok,
                    {"task": "lm", "experiment": exp.to_dict(), "data": {
                        "eos_per_line": exp.data.eos_per_line}},
                    config_yaml=resolved_yaml(exp, model_cfg))
    with fast.cpu(model, onednn=cfg.fast_matmul and dist.device.type == "cpu"):
        result = train(model, task, data, cfg, dist=dist, out=out, resume_from=start,
                       progress=progress, d_model=model_cfg.d_model,
                       evaluate=(lambda m: evaluate_split(valid_ids, exp.data.valid or "",
                                                          cfg.eval_batches))
                       if valid_ids is not None else None)
    teardown()  # every rank together; what follows is rank 0's alone
    if sharded(dist, cfg.parallel) and dist.is_main:
        # the trained weights were spread over the ranks, which have left: rank 0 goes on with
        # the whole model that the last checkpoint holds
        model = load_checkpoint(result.checkpoint).model.to(dist.device)
    report = RunReport(str(run_dir), result.state.step, result.seconds, n_params,
                       checkpoint=str(result.checkpoint or latest_checkpoint(out.checkpoints)))
    report.extra["parallel"] = parallel
    if dist.is_main:
        model.eval()
        if valid_ids is not None:
            report.valid = evaluate_split(valid_ids, exp.data.valid or "", None)
            console.print(f"valid: loss {report.valid['loss']:.4f} · perplexity "
                          f"{report.valid['ppl']:.2f} ({report.valid['tokens']:,} tokens)")
        if test_ids is not None:
            report.test = evaluate_split(test_ids, exp.data.test or "", None)
            console.print(f"test:  loss {report.test['loss']:.4f} · perplexity "
                          f"{report.test['ppl']:.2f} ({report.test['tokens']:,} tokens)")
        report.sample = generate_text(model, tok, exp.sample.prompt, exp.sample.max_new_tokens,
                                      exp.sample.temperature, exp.sample.top_k, seed=cfg.seed)
        console.rule("sample")
        console.print(report.sample, markup=False)
        console.rule()
        (run_dir / "sample.txt").write_text(report.sample, encoding="utf-8")
        curves = plot_run(run_dir, final=(result.state.step, report.valid) if report.valid else None)
        report.extra["curves"] = str(curves)
        report.extra["finished"] = time.strftime("%Y-%m-%d %H:%M:%S")
        (run_dir / "results.json").write_text(json.dumps(report.__dict__, indent=1), encoding="utf-8")
        console.print(f"checkpoint: {report.checkpoint}\ncurves: {curves}\n"
                      f"trained {result.state.step} steps in {result.seconds / 60:.1f} min")
    return report


@torch.inference_mode()
def generate_text(model: torch.nn.Module, tok: Tokenizer, prompt: str, max_new_tokens: int,
                  temperature: float, top_k: int | None, seed: int = 0) -> str:
    """Sample a continuation of ``prompt`` (returned with the prompt).

    The model sees at most ``seq_len`` positions, so a long sample is drawn in windows: when the
    context is full, decoding restarts (a fresh cache) from the last ``seq_len // 2`` tokens.
    """
    with fast.cpu(model, decoding=True):
        return _generate_text(model, tok, prompt, max_new_tokens, temperature, top_k, seed)


def _generate_text(model: torch.nn.Module, tok: Tokenizer, prompt: str, max_new_tokens: int,
                   temperature: float, top_k: int | None, seed: int) -> str:
    seq_len = model.config.seq_len  # type: ignore[union-attr]
    device = next(model.parameters()).device
    tokens = tok.encode(prompt) or [tok.bos_id]
    generator = torch.Generator(device=device).manual_seed(seed)
    produced = 0
    while produced < max_new_tokens:
        context = tokens[-(seq_len // 2):] if len(tokens) >= seq_len else tokens
        n = min(max_new_tokens - produced, seq_len - len(context))
        out = sample(LMDecoder(model), torch.tensor([context], device=device), max_new_tokens=n,
                     temperature=temperature, top_k=top_k, generator=generator)
        tokens += out[0, len(context):].tolist()
        produced += n
    return tok.decode(tokens)
