"""The language-model task ([B20] §4): a text file → a tokenizer (trained on the training file,
or loaded) → token caches → ``DecoderLM`` trained on shuffled blocks → exact validation and test
perplexity → a text sample. The run itself is :func:`fullrank.recipes.run.run`'s.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch
from torch import nn

from fullrank import fast
from fullrank.data.corpus import tokenize_file
from fullrank.data.lm import LMBlocks, check_world
from fullrank.data.tokenizers import Tokenizer
from fullrank.inference.decoders import LanguageModel, LMDecoder
from fullrank.inference.sampling import sample
from fullrank.models import ModelConfig
from fullrank.paths import write_text_atomic
from fullrank.recipes.config import LMExperiment
from fullrank.recipes.init import planned_config
from fullrank.recipes.recipe import Recipe, Run, RunReport, Setup, planned_tokenizer
from fullrank.training.distributed import DistInfo
from fullrank.training.tasks import LanguageModeling


class LanguageModelRecipe(Recipe[LMExperiment]):
    """``task: lm``."""

    metrics = {
        "test_ppl": (("test", "ppl"), "test perplexity", True),
        "valid_ppl": (("valid", "ppl"), "validation perplexity", True),
        "test_loss": (("test", "loss"), "test loss (nats/token)", True),
        "valid_loss": (("valid", "loss"), "validation loss (nats/token)", True),
    }

    def check(self, exp: LMExperiment, dist: DistInfo) -> None:
        check_world(exp.train.batch_size, dist.rank, dist.world)
        super().check(exp, dist)

    def setup(self, run: Run[LMExperiment]) -> Setup:
        exp = run.exp
        data, cfg = exp.data, exp.train
        tok = run.tokenizer(lambda: [data.path(data.train)])
        model_cfg = run.model_config(tok)
        ids = {
            name: corpus(run, exp, split, tok)
            for name, split in (("train", data.train), ("valid", data.valid), ("test", data.test))
            if split
        }
        self.ids = ids
        batches = LMBlocks(
            ids["train"], seq_len=model_cfg.seq_len, batch_size=cfg.batch_size, seed=cfg.seed, name=data.train
        )
        self.loss = LanguageModeling(cfg.label_smoothing)
        self.seq_len = model_cfg.seq_len
        return Setup(
            model_config=model_cfg,
            tokenizer=tok,
            batches=batches,
            loss=self.loss,
            data_line=(
                f"data: {len(ids['train']):,} training tokens ({len(batches):,} batches "
                f"of {cfg.batch_size}×{model_cfg.seq_len + 1} per epoch)"
            ),
            vocabulary=f"vocab {tok.vocab_size} ({tok.kind})",
            per_rank=cfg.batch_size // run.dist.world,
            unit="sequences",
            validate=(lambda m: self.perplexity(run, m, "valid", cfg.eval_batches))
            if "valid" in ids
            else None,
            meta={"data": {"eos_per_line": data.eos_per_line}},
        )

    def perplexity(self, run: Run, model: nn.Module, split: str, limit: int | None) -> dict[str, float]:
        """Per-token loss and perplexity of ``split`` (at most ``limit`` batches). Rank 0
        evaluates alone, in batches of the global size: with ``train.eval_batches`` the periodic
        validation covers the same rows as a one-process run."""
        bs = run.exp.train.batch_size
        blocks = LMBlocks(
            self.ids[split], seq_len=self.seq_len, batch_size=bs, seed=run.exp.train.seed, name=split
        )
        return self.loss.evaluate(model, blocks.eval_batches(bs), run.dist.device, limit=limit)

    def evaluate(self, run: Run[LMExperiment], setup: Setup, model: nn.Module, report: RunReport) -> None:
        exp = run.exp
        for split in ("valid", "test"):
            if split not in self.ids:
                continue
            r = self.perplexity(run, model, split, None)
            setattr(report, split, r)
            run.say(
                f"{split + ':':6} loss {r['loss']:.4f} · perplexity {r['ppl']:.2f} ({r['tokens']:,} tokens)"
            )
        s = exp.sample
        report.sample = generate_text(
            model, setup.tokenizer, s.prompt, s.max_new_tokens, s.temperature, s.top_k, seed=exp.train.seed
        )
        run.console.rule("sample")
        run.console.print(report.sample, markup=False)
        run.console.rule()
        write_text_atomic(run.run_dir / "sample.txt", report.sample)

    def plan_model(
        self, exp: LMExperiment, out: Path, cache: dict[str, Any], base: ModelConfig | None
    ) -> tuple[ModelConfig, list[str]]:
        if base is not None or exp.model.get("vocab_size"):
            return planned_config(exp, exp.model.get("vocab_size", 0), base), []
        tok, overrides = planned_tokenizer(exp, lambda: [exp.data.path(exp.data.train)], out, cache)
        return planned_config(exp, tok.vocab_size, None), overrides


def corpus(run: Run, exp: LMExperiment, name: str, tok: Tokenizer) -> np.ndarray:
    """Token ids of one file (rank 0 fills the cache first; the others then read it)."""

    def read() -> np.ndarray:
        return tokenize_file(exp.data.path(name), tok, exp.data.cache_dir, eos_per_line=exp.data.eos_per_line)

    run.first(read)
    return read()


@torch.inference_mode()
def generate_text(
    model: torch.nn.Module,
    tok: Tokenizer,
    prompt: str,
    max_new_tokens: int,
    temperature: float,
    top_k: int | None,
    seed: int = 0,
    on_text: Callable[[str], None] | None = None,
) -> str:
    """Sample a continuation of ``prompt`` (returned with the prompt).

    The model sees at most ``seq_len`` positions, so a long sample is drawn in windows: when the
    context is full, decoding restarts (a fresh cache) from the last ``seq_len // 2`` tokens.
    ``on_text`` receives the text as it is drawn, the prompt first, then each window's new text
    (a character whose bytes are not all drawn yet waits for the next window); the pieces add up
    to the text returned.
    """
    with fast.cpu(model, decoding=True):
        return _generate_text(model, tok, prompt, max_new_tokens, temperature, top_k, seed, on_text)


def _generate_text(
    model: torch.nn.Module,
    tok: Tokenizer,
    prompt: str,
    max_new_tokens: int,
    temperature: float,
    top_k: int | None,
    seed: int,
    on_text: Callable[[str], None] | None,
) -> str:
    seq_len: int = getattr(model, "config").seq_len
    device = next(model.parameters()).device
    tokens = tok.encode(prompt) or [tok.bos_id]
    generator = torch.Generator(device=device).manual_seed(seed)
    shown = ""

    def show(text: str) -> None:  # hand ``on_text`` what it has not had of ``text``
        nonlocal shown
        if not text.startswith(shown):
            raise RuntimeError(f"the {tok.kind} tokenizer's decoding changed text it had already decoded")
        if on_text is not None and len(text) > len(shown):
            on_text(text[len(shown) :])
            shown = text

    produced = 0
    while produced < max_new_tokens:
        if on_text is not None:  # a character whose bytes are not all drawn yet waits
            show(tok.decode(tokens).rstrip("\ufffd"))
        context = tokens[-(seq_len // 2) :] if len(tokens) >= seq_len else tokens
        n = min(max_new_tokens - produced, seq_len - len(context))
        out = sample(
            LMDecoder(cast(LanguageModel, model)),
            torch.tensor([context], device=device),
            max_new_tokens=n,
            temperature=temperature,
            top_k=top_k,
            generator=generator,
        )
        tokens += out[0, len(context) :].tolist()
        produced += n
    text = tok.decode(tokens)
    if on_text is not None:
        show(text)
    return text
