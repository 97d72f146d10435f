"""``fullrank eval CKPT --data FILE``: exact per-token perplexity of a language model; for a
pre-trained BERT, masked-LM accuracy and perplexity (and next-sentence accuracy) scored as a
run's validation is: BERT's 15% masking with masks fixed by the data."""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from fullrank.errors import CheckpointError, ConfigError

if TYPE_CHECKING:
    import torch

    from fullrank.training.checkpoints import Checkpoint


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("checkpoint", help="checkpoint directory or run directory (its latest)")
    p.add_argument("--data", required=True, help="text file to evaluate on")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    p.add_argument("--cache-dir", default=None, help="token cache directory (default: a temporary one)")
    p.add_argument(
        "--format",
        default=None,
        choices=["blocks", "wikitext", "wikiextractor"],
        help="for a BERT checkpoint, how the file marks its documents: blank lines (blocks, the "
        "default), ' = Title = ' lines (wikitext) or <doc> … </doc> (wikiextractor, also .xz/.gz)",
    )


def run(args: argparse.Namespace) -> int:
    from fullrank.data.corpus import tokenize_file
    from fullrank.data.lm import LMBlocks
    from fullrank.data.tokenizers import ensure_vocab_matches
    from fullrank.models import Encoder
    from fullrank.output import console
    from fullrank.paths import check_output_folder
    from fullrank.training.checkpoints import load_checkpoint
    from fullrank.training.distributed import pick_device
    from fullrank.training.tasks import LanguageModeling

    if args.cache_dir:
        check_output_folder(args.cache_dir, option="--cache-dir")
    device = pick_device(args.device)
    ckpt = load_checkpoint(args.checkpoint, device=device)
    if isinstance(ckpt.model, Encoder):
        return _masked_lm(args, ckpt, device)
    if args.format is not None:
        raise ConfigError(
            "--format: only for a BERT checkpoint; a language model reads the file as plain text"
        )
    if ckpt.task != "lm" or ckpt.tokenizer is None:
        raise CheckpointError(
            f"{ckpt.path}: `fullrank eval` needs a language-model or pre-trained BERT checkpoint "
            f"with its tokenizer (this one has task={ckpt.task!r})"
        )
    ensure_vocab_matches(ckpt.tokenizer, ckpt.config.vocab_size, str(ckpt.path))
    eos_per_line = ckpt.eos_per_line
    with tempfile.TemporaryDirectory() as tmp:
        ids = tokenize_file(args.data, ckpt.tokenizer, args.cache_dir or Path(tmp), eos_per_line=eos_per_line)
        blocks = LMBlocks(ids, seq_len=ckpt.config.seq_len, batch_size=args.batch_size, name=str(args.data))
        result = LanguageModeling().evaluate(ckpt.model, blocks.eval_batches(args.batch_size), device)
    console().print(
        f"{args.data}: loss {result['loss']:.4f} nats/token · perplexity {result['ppl']:.2f} "
        f"· {result['tokens']:,} tokens · {ckpt.path}"
    )
    return 0


def _masked_lm(args: argparse.Namespace, ckpt: Checkpoint, device: torch.device) -> int:
    from fullrank.output import console
    from fullrank.recipes.bert import evaluate_file

    if ckpt.model.mlm is None or ckpt.tokenizer is None:
        raise CheckpointError(
            f"{ckpt.path}: this encoder has no masked-LM head (task={ckpt.task!r}); `fullrank eval` "
            f"scores a pre-trained one, as a `task: bert` run leaves it"
        )
    with tempfile.TemporaryDirectory() as tmp:
        v = evaluate_file(
            ckpt.model,
            ckpt.tokenizer,
            args.data,
            args.format or "blocks",
            args.cache_dir or Path(tmp),
            batch_size=args.batch_size,
            device=device,
        )
    nsp = f" · NSP accuracy {v['nsp_acc']:.2f}%" if "nsp_acc" in v else ""
    console().print(
        f"{args.data}: MLM accuracy {v['mlm_acc']:.2f}% · MLM perplexity {v['mlm_ppl']:.2f}{nsp} "
        f"· {v['predictions']:,} predictions in {v['sequences']:,} sequences · {ckpt.path}"
    )
    return 0
