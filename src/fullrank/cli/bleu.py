"""``fullrank bleu HYPOTHESES --ref REFERENCES [--lang L]``: sacreBLEU, chrF, and tokenized
lowercased BLEU (``13a``, and Multi30k's Moses pipeline)."""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from fullrank.data.text import read_lines
from fullrank.evaluation.bleu import score

HELP = "Score detokenized translations against raw references (sacrebleu), with signatures."


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("hypotheses", help="file of translations, one per line")
    p.add_argument("--ref", required=True, help="file of references, line-aligned")
    p.add_argument("--lang", help="target language (ISO code, e.g. de) for the Moses tokenizer; "
                                  "default: the reference file's suffix (test.de → de), else en")


def target_language(ref: str, lang: str | None) -> str | None:
    """``lang``, or the two-letter language code that ends the reference's file name, or
    ``None``."""
    if lang:
        return lang
    suffix = Path(ref).suffix.lstrip(".")
    return suffix if re.fullmatch(r"[a-z]{2}", suffix) else None


def run(args: argparse.Namespace) -> int:
    lang = target_language(args.ref, args.lang)
    if lang is None:
        lang = "en"
        print(f"note: {args.ref} does not end in a language code; the Moses tokenizer uses its "
              f"English rules (pass --lang to choose)", file=sys.stderr)
    hyps = read_lines(args.hypotheses, allow_blank=True)
    for line in score(hyps, read_lines(args.ref), lang=lang).lines():
        print(line)
    return 0
