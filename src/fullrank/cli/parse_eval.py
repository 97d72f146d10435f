"""``fullrank parse-eval HYP --ref REF``: labelled bracket scores with EVALB's rules
(:mod:`fullrank.evaluation.parse_eval`), one bracketed tree per line in each file, line ``i``
against line ``i``. An empty hypothesis line is skipped and counted (as EVALB does); lines empty
in both files are passed over.
"""

from __future__ import annotations

import argparse


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("hyp", help="parsed trees, one per line (e.g. the output of fullrank parse)")
    p.add_argument(
        "--ref",
        required=True,
        help="reference trees, one per line (function tags, traces and an unlabelled "
        "outer bracket are fine: the rules remove them)",
    )
    p.add_argument(
        "--per-sentence",
        action="store_true",
        help="also print each sentence's counts (line, words, gold, test, matched, crossing)",
    )


def run(args: argparse.Namespace) -> int:
    from fullrank.data.text import read_lines
    from fullrank.data.treebank import read_tree_line
    from fullrank.errors import DataError
    from fullrank.evaluation.parse_eval import format_report, score_trees

    hyp_lines = read_lines(args.hyp, allow_blank=True)
    ref_lines = read_lines(args.ref)
    if len(hyp_lines) != len(ref_lines):
        raise DataError(
            f"{args.hyp} has {len(hyp_lines)} lines but {args.ref} has "
            f"{len(ref_lines)}; give one tree per reference line, in order"
        )
    hyps, refs, numbers = [], [], []
    for i, (h, r) in enumerate(zip(hyp_lines, ref_lines), start=1):
        ref = read_tree_line(r, source=args.ref, line_number=i)
        hyp = read_tree_line(h, source=args.hyp, line_number=i)
        if ref is None:
            if hyp is not None:
                raise DataError(
                    f"{args.ref} line {i} is empty but {args.hyp} line {i} holds a "
                    f"tree; the files are out of step"
                )
            continue
        hyps.append(hyp)
        refs.append(ref)
        numbers.append(i)
    report = score_trees(hyps, refs, lines=numbers, where=f"{args.hyp} line")
    if args.per_sentence:
        print(f"{'line':>6}{'words':>7}{'gold':>6}{'test':>6}{'match':>7}{'cross':>7}")
        for n, s in zip(numbers, report.sentences):
            print(
                f"{n:>6}{s.length:>7}"
                + ("   skipped" if s.skipped else f"{s.gold:>6}{s.test:>6}{s.matched:>7}{s.crossing:>7}")
            )
    print(format_report(report))
    return 0
