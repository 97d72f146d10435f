"""``fullrank train CONFIG [key=value …] [--resume]``: run an experiment file."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from fullrank.errors import ConfigError

RESUME_WORDS = {"auto": "auto", "true": "always", "always": "always", "false": "never",
                "never": "never"}


def recipes() -> dict[str, Callable[..., object]]:
    """The recipe of each task (imported when a run starts, not for ``--help``)."""
    from fullrank.recipes.lm import run_lm
    from fullrank.recipes.mt import run_mt

    return {"lm": run_lm, "mt": run_mt}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("config", help="experiment file, e.g. configs/lm/shakespeare_char.yaml")
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE",
                   help="overrides such as train.steps=500 model.d_head=64; "
                        "resume=auto continues the run if it has a checkpoint")
    p.add_argument("--resume", action="store_true",
                   help="continue the run from its latest checkpoint, exactly")
    p.add_argument("--quiet", action="store_true", help="no progress bar")


def run(args: argparse.Namespace) -> int:
    resume = "always" if args.resume else "never"
    overrides = []
    for item in args.overrides:
        if item.startswith("resume="):
            word = item.split("=", 1)[1]
            if word not in RESUME_WORDS:
                raise ConfigError(f"'{item}': resume must be auto, true or false")
            resume = RESUME_WORDS[word]
        else:
            overrides.append(item)
    from fullrank.recipes.config import load_experiment

    exp = load_experiment(args.config, overrides)
    recipes()[exp.task](exp, resume=resume, progress=not args.quiet)
    return 0
