"""Run ``fullrank`` with a change made to the model just before its optimizer is built: the seam
that the fine-tuning probes (``squad_hold_qk.py``, ``squad_question_head.py``) use to attach or
hold parameters without a copy of the training loop.

A probe's command line is ``PROBE-OPTIONS -- FULLRANK-ARGS``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from torch import nn

if TYPE_CHECKING:
    from torch.optim import Optimizer

    from fullrank.training.config import TrainConfig


def run_fullrank_with(
    argv: Sequence[str],
    parser: argparse.ArgumentParser,
    change: Callable[[nn.Module, argparse.Namespace], None],
) -> int:
    """Parse the options before ``--`` with ``parser``, then run ``fullrank`` on the arguments
    after it with ``change(model, options)`` applied to the (possibly wrapped) model once, when
    the training loop builds its optimizer. Parameters the change adds are trained but are not
    in the parameter count that the run's header printed."""
    argv = list(argv)
    if "--" not in argv:
        parser.print_usage(sys.stderr)
        sys.exit(f"{parser.prog}: error: separate fullrank's arguments with --")
    cut = argv.index("--")
    options = parser.parse_args(argv[:cut])

    import fullrank.training.loop as loop
    from fullrank.cli import main as fullrank

    make_optimizer = loop.make_optimizer

    def changed_first(model: nn.Module, cfg: TrainConfig, *, fused: bool = False) -> Optimizer:
        change(model, options)
        return make_optimizer(model, cfg, fused=fused)

    loop.make_optimizer = changed_first  # the training loop builds its optimizer through this name
    return fullrank(argv[cut + 1 :])
