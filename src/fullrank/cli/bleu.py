"""``fullrank bleu HYPOTHESES --ref REFERENCES``: sacreBLEU, chrF and tokenized lowercased BLEU."""

from __future__ import annotations

import argparse

from fullrank.data.text import read_lines
from fullrank.evaluation.bleu import score

HELP = "Score detokenized translations against raw references (sacrebleu), with signatures."


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("hypotheses", help="file of translations, one per line")
    p.add_argument("--ref", required=True, help="file of references, line-aligned")


def run(args: argparse.Namespace) -> int:
    for line in score(read_lines(args.hypotheses, allow_blank=True), read_lines(args.ref)).lines():
        print(line)
    return 0
