"""``fullrank verify CKPT_OR_RUN``: check checkpoints against their recorded SHA-256 and metadata.

One line per checkpoint (and one for a run's ``latest`` pointer); exit status 2 when any fails.
Nothing is built or loaded into a model, and nothing is changed.
"""

from __future__ import annotations

import argparse
import functools
from collections.abc import Callable


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("path", help="a checkpoint directory, or a run directory (all its checkpoints)")


def run(args: argparse.Namespace) -> int:
    from fullrank.errors import CheckpointError, FullrankError
    from fullrank.training.checkpoints import check_pointer, check_readable, checkpoints_in

    found, root = checkpoints_in(args.path)
    checks: list[tuple[str, Callable[[], str]]] = [
        (str(ckpt), functools.partial(check_readable, ckpt)) for ckpt in found
    ]
    if root is not None:
        checks.append((str(root / "latest"), functools.partial(check_pointer, root)))
    failed = 0
    for name, check in checks:
        try:
            print(f"{name}: ok — {check()}", flush=True)
        except FullrankError as e:
            failed += 1
            print(f"{name}: FAILED — {e}", flush=True)
    if failed:
        raise CheckpointError(
            f"{failed} of {len(checks)} checks failed (listed above); use "
            f"another checkpoint, or resume, which passes over unreadable ones"
        )
    return 0
