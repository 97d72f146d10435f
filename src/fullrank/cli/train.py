"""``fullrank train CONFIG [key=value …] [--resume]``: run an experiment file."""

from __future__ import annotations

import argparse
from typing import Any, Literal

from fullrank.errors import ConfigError

Resume = Literal["never", "auto", "always"]
# what resume=VALUE may say, read as YAML like every other value: auto, or a truth value
RESUME_WORDS: dict[Any, Resume] = {
    "auto": "auto",
    True: "always",
    "always": "always",
    False: "never",
    "never": "never",
}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("config", help="experiment file, e.g. configs/lm/shakespeare_char.yaml")
    p.add_argument(
        "overrides",
        nargs="*",
        metavar="KEY=VALUE",
        help="overrides such as train.steps=500 model.d_head=64; "
        "resume=auto continues the run if it has a checkpoint",
    )
    p.add_argument(
        "--resume", action="store_true", help="continue the run from its latest checkpoint, exactly"
    )
    p.add_argument("--quiet", action="store_true", help="no progress bar")


def run(args: argparse.Namespace) -> int:
    from fullrank.recipes.config import command_line_overrides, load_experiment
    from fullrank.recipes.run import run as run_experiment

    resume: Resume = "always" if args.resume else "never"
    overrides = []
    for item, (key, value) in zip(args.overrides, command_line_overrides(args.overrides)):
        if key != "resume":
            overrides.append(item)
        elif isinstance(value, (bool, str)) and value in RESUME_WORDS:
            resume = RESUME_WORDS[value]
        else:
            raise ConfigError(f"'{item}': resume must be auto, true or false")
    exp = load_experiment(args.config, overrides)
    run_experiment(exp, resume=resume, progress=not args.quiet)
    return 0
