"""``fullrank bleu HYPOTHESES --ref REFERENCES [--lang L] [--baseline OTHER]``: sacreBLEU, chrF,
and tokenized lowercased BLEU (``13a``, and Multi30k's Moses pipeline); with ``--baseline``, a
paired bootstrap test of the difference to another system's translations."""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

RESAMPLES, MAX_RESAMPLES = 1000, 1_000_000


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("hypotheses", help="file of translations, one per line")
    p.add_argument("--ref", required=True, help="file of references, line-aligned")
    p.add_argument(
        "--lang",
        help="target language (ISO code, e.g. de) for the Moses tokenizer; "
        "default: the reference file's suffix (test.de → de), else en",
    )
    p.add_argument(
        "--baseline",
        help="another system's translations of the same sources: also "
        "test whether the difference is chance (paired bootstrap)",
    )
    p.add_argument(
        "--resamples",
        type=int,
        default=RESAMPLES,
        help=f"bootstrap resamples for --baseline (default {RESAMPLES})",
    )


def target_language(ref: str, lang: str | None) -> str | None:
    """``lang``, or the two-letter language code that ends the reference's file name, or
    ``None``."""
    if lang:
        return lang
    suffix = Path(ref).suffix.lstrip(".")
    return suffix if re.fullmatch(r"[a-z]{2}", suffix) else None


def run(args: argparse.Namespace) -> int:
    from fullrank.data.text import read_lines
    from fullrank.errors import ConfigError, DataError
    from fullrank.evaluation.bleu import paired_bootstrap, score

    if args.resamples != RESAMPLES and not args.baseline:
        raise ConfigError("--resamples counts the bootstrap resamples of --baseline; give --baseline too")
    if not 1 <= args.resamples <= MAX_RESAMPLES:
        raise ConfigError(
            f"--resamples must be from 1 to {MAX_RESAMPLES:,} (1000 is usual), got {args.resamples}"
        )
    hyps, refs = read_lines(args.hypotheses, allow_blank=True), read_lines(args.ref)
    baseline = read_lines(args.baseline, allow_blank=True) if args.baseline else None
    if baseline is not None and len(baseline) != len(hyps):  # checked before anything is printed
        raise DataError(
            f"--baseline {args.baseline} has {len(baseline)} lines and {args.hypotheses} {len(hyps)}; "
            f"they must translate the same sources, line by line"
        )
    lang = target_language(args.ref, args.lang)
    if lang is None:
        lang = "en"
        print(
            f"note: {args.ref} does not end in a language code; the Moses tokenizer uses its "
            f"English rules (pass --lang to choose)",
            file=sys.stderr,
        )
    for line in score(hyps, refs, lang=lang).lines():
        print(line)
    if baseline is not None:
        results = paired_bootstrap(hyps, baseline, refs, resamples=args.resamples)
        print(
            f"\npaired bootstrap against {args.baseline} ({args.resamples} resamples; "
            f"* p < 0.05: unlikely to be chance):"
        )
        for r in results:
            print("  " + r.line())
    return 0
