"""The ``fullrank`` command: one explicit table of sub-commands, each a thin module.

The table names each command's module and one-line help; a module is imported only when its
command runs (or its ``--help`` is asked for), so ``fullrank --help`` answers without importing
PyTorch. Every command module has ``add_arguments(parser)`` and ``run(args) -> int``. A
:class:`~fullrank.errors.FullrankError` becomes one line on stderr and exit status 2 (under
``torchrun`` the line comes from rank 0 alone, and the other ranks exit with the same status
quietly). Every argument is UTF-8 text and every float option a finite number
(:mod:`fullrank.cli.arguments`); a warning that the library logs becomes one line too
(``fullrank translate: warning: line 3: …``).
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import re
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import Any

from fullrank.cli.arguments import check_text
from fullrank.errors import FullrankError

# name → (module under fullrank.cli, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "info": ("info", "Summarise a model: parameters by component, head sizes, FLOPs per token, warnings."),
    "bottleneck": (
        "bottleneck",
        "Measure [B20]'s low-rank bottleneck: error against head size, "
        "standard vs fixed heads, and the two theorems.",
    ),
    "advise": (
        "advise",
        "Suggest (n_heads, d_head, d_ff) under a parameter budget, standard rule against fixed heads.",
    ),
    "train": ("train", "Train a model from an experiment file (YAML/TOML), with dotted key=value overrides."),
    "eval": (
        "eval",
        "Score a checkpoint on a text file: a language model's perplexity (every token, exactly once), "
        "a BERT's masked-LM accuracy.",
    ),
    "generate": ("generate", "Sample a continuation of a prompt from a language-model checkpoint."),
    "plot": (
        "plot",
        "Render a run's curves to PNG: loss, validation perplexity and scores, as it logged them.",
    ),
    "translate": (
        "translate",
        "Translate lines from stdin (or --input) with beam search; one output line per input line.",
    ),
    "parse": (
        "parse",
        "Parse tokenized sentences from stdin (or --input) into bracketed trees, one "
        "line per line ([V17] §6.3).",
    ),
    "parse-eval": (
        "parse_eval",
        "Score bracketed trees against references with EVALB's rules "
        "(COLLINS.prm): F1, exact match, all and ≤ 40 words.",
    ),
    "average": (
        "average",
        "Average checkpoints' parameters elementwise ([V17] §6.1: the last 5) into a new checkpoint.",
    ),
    "bleu": ("bleu", "Score detokenized translations against raw references (sacrebleu), with signatures."),
    "grid": (
        "grid",
        "Run chosen rows of [V17] Table 3 (a sweep file whose arms are the rows) and tabulate them.",
    ),
    "sweep": (
        "sweep",
        "Train every point of a sweep file (axes × arms × seeds, parameters matched) "
        "and tabulate and plot mean ± std.",
    ),
    "heads": (
        "heads",
        "Per layer and head: numerical rank of QKᵀ, effective rank and entropy of "
        "the attention, d_head against n.",
    ),
    "widen": (
        "widen",
        "Turn a checkpoint into one with larger heads (d_head, d_value) that computes the same function.",
    ),
    "import": (
        "import_hf",
        "Turn a Hugging Face model directory (BERT, RoBERTa-PreLayerNorm, GPT-2, "
        "Marian; safetensors) into a fullrank checkpoint with its tokenizer.",
    ),
    "export": (
        "export_hf",
        "Write a fullrank checkpoint as a Hugging Face model directory that "
        "transformers' from_pretrained loads.",
    ),
    "attention": (
        "attention",
        "Draw per-head attention maps and the 'from one token' view ([V17] Figures 3–5).",
    ),
    "classify": (
        "classify",
        "Label sentences or TAB-separated sentence pairs with a fine-tuned "
        "classifier: label and probabilities per line.",
    ),
    "answer": ("answer", "Answer a question about a text file with a fine-tuned SQuAD span model."),
    "fill-mask": (
        "fill_mask",
        "Fill each [MASK] of a text with a pre-trained BERT's likeliest pieces, with their probabilities.",
    ),
    "verify": (
        "verify",
        "Check a checkpoint, or every checkpoint of a run, against the SHA-256 "
        "of its files and its metadata.",
    ),
}


def load_command(name: str) -> ModuleType:
    """The module of command ``name`` (imported now)."""
    return importlib.import_module(f"fullrank.cli.{COMMANDS[name][0]}")


# what the command line takes for a negative number rather than an option: argparse's own
# ``-1`` and ``-.5``, and also ``-1e-3``, ``-inf`` and ``-nan``, so that ``--alpha -inf`` reaches
# the option's check
NEGATIVE_NUMBER = re.compile(r"^-(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$|^-(inf|infinity|nan)$", re.IGNORECASE)


class _Parser(argparse.ArgumentParser):
    """argparse, with a usage error on one line like every other error (exit status 2), and
    every negative number a value (:data:`NEGATIVE_NUMBER`)."""

    command_parser: argparse.ArgumentParser | None = None  # the sub-parser given its arguments

    def _parse_optional(self, arg_string: str) -> Any:
        # argparse has no public setting for it; no option of fullrank looks like a number, and
        # without this `-inf` would read as `-i nf`
        return None if NEGATIVE_NUMBER.match(arg_string) else super()._parse_optional(arg_string)

    def error(self, message: str) -> None:  # type: ignore[override]  # raises, never returns
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser(command: str | None = None) -> _Parser:
    """The parser; only ``command``'s sub-parser gets its arguments (the others show help)."""
    parser = _Parser(
        prog="fullrank", description="Transformers with a free attention head size ([V17] + [B20])."
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (_, help_text) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        if name == command:
            load_command(name).add_arguments(p)
            parser.command_parser = p
    return parser


def _command_in(argv: Sequence[str]) -> str | None:
    """The first argument that names a command (options before it take no value)."""
    for arg in argv:
        if not arg.startswith("-"):
            return arg if arg in COMMANDS else None
    return None


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command = _command_in(argv)
    parser = build_parser(command)
    args, extra = parser.parse_known_args(argv)
    # key=value overrides may also come after options (`train cfg --resume a.b=1`)
    if extra and hasattr(args, "overrides") and all("=" in e and not e.startswith("-") for e in extra):
        args.overrides += extra
    elif extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    module = load_command(args.command)
    if os.environ.get("FULLRANK_KEEP_FREED_MEMORY", "1") != "0":
        from fullrank.fast.memory import keep_freed_memory

        keep_freed_memory()  # training steps reuse their memory instead of faulting it in again
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_OneLine(args.command))
    logger = logging.getLogger("fullrank")
    logger.addHandler(handler)
    try:
        if parser.command_parser is not None:
            check_text(args, parser.command_parser)
        return module.run(args)
    except FullrankError as e:
        return _fail(args.command, str(e))
    except (MemoryError, RuntimeError) as e:  # numpy's and PyTorch's failed allocations
        if not _out_of_memory(e):
            raise
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        return _fail(
            args.command,
            f"out of memory ({first}); the sizes asked for do not fit this machine — ask for "
            f"smaller ones (model, batch, beam, sequences, resamples)",
        )
    finally:
        logger.removeHandler(handler)


def _fail(command: str, message: str) -> int:
    """Say ``message`` as the command's one-line error (once, on rank 0); exit status 2."""
    _leave_process_group()
    if int(os.environ.get("RANK", "0")) == 0:  # every rank meets the error; one says it
        print(f"fullrank {command}: error: {message}", file=sys.stderr)
    return 2


def _out_of_memory(e: BaseException) -> bool:
    """Whether ``e`` is a failed allocation: a ``MemoryError`` (numpy's too), PyTorch's CPU
    allocator refusing, or a device running out of memory."""
    if isinstance(e, MemoryError):
        return True
    text = str(e)
    return "can't allocate memory" in text or "out of memory" in text.lower()


class _OneLine(logging.Formatter):
    """``fullrank COMMAND: warning: MESSAGE``, like the command's errors."""

    def __init__(self, command: str) -> None:
        super().__init__()
        self.command = command

    def format(self, record: logging.LogRecord) -> str:
        return f"fullrank {self.command}: {record.levelname.lower()}: {record.getMessage()}"


def _leave_process_group() -> None:
    """Destroy the ``torch.distributed`` group if this process joined one, so that a rank
    stopped by an error exits without gloo's or NCCL's complaints about an open group."""
    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
