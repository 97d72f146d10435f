"""``fullrank train CONFIG [key=value …] [--resume]``: run an experiment file."""

from __future__ import annotations

import argparse
import importlib

from fullrank.errors import ConfigError

# the recipe of each task: (module under fullrank.recipes, function), imported when it runs
RECIPES = {"lm": ("lm", "run_lm"), "mt": ("mt", "run_mt"), "bert": ("bert", "run_bert"),
           "classify": ("classify", "run_classify"), "squad": ("squad", "run_squad"),
           "parse": ("parse", "run_parse")}
RESUME_WORDS = {"auto": "auto", "true": "always", "always": "always", "false": "never",
                "never": "never"}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("config", help="experiment file, e.g. configs/lm/shakespeare_char.yaml")
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE",
                   help="overrides such as train.steps=500 model.d_head=64; "
                        "resume=auto continues the run if it has a checkpoint")
    p.add_argument("--resume", action="store_true",
                   help="continue the run from its latest checkpoint, exactly")
    p.add_argument("--quiet", action="store_true", help="no progress bar")


def run(args: argparse.Namespace) -> int:
    from fullrank.recipes.config import load_experiment

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
    exp = load_experiment(args.config, overrides)
    module, function = RECIPES[exp.task]
    recipe = getattr(importlib.import_module(f"fullrank.recipes.{module}"), function)
    recipe(exp, resume=resume, progress=not args.quiet)
    return 0
