"""``fullrank heads CKPT --data FILE``: per-head rank, effective rank and entropy on real text."""

from __future__ import annotations

import argparse
import csv
import dataclasses
import functools
from pathlib import Path

from fullrank.cli.arguments import output_path
from fullrank.errors import CheckpointError, ConfigError, DataError


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("checkpoint", help="checkpoint directory or run directory (its latest)")
    p.add_argument(
        "--data",
        required=True,
        help="text file (language model, BERT) or source sentences (translation; tokenized, for parsing)",
    )
    p.add_argument(
        "--ref",
        default=None,
        help="translation: target sentences to teacher-force (default: the model's "
        "own greedy translations); parsing: the sentences' bracketed trees, "
        "one per line (default: the model's own greedy parses)",
    )
    p.add_argument(
        "--sequences",
        type=int,
        default=8,
        help="blocks of seq_len tokens (LM) or sentences (translation, parsing) to measure on",
    )
    p.add_argument(
        "-o",
        "--output",
        default=None,
        type=output_path,
        help="heatmap PNG (default: heads.png in the checkpoint's run, or beside a "
        "checkpoint of no run); a CSV with the same name is written too",
    )
    p.add_argument("--overwrite", action="store_true", help="replace existing output files")


def run(args: argparse.Namespace) -> int:
    from fullrank.analysis.head_stats import head_report, head_table, mean_keys
    from fullrank.analysis.inputs import encoder_frame, lm_batch, mt_batch, parse_batch
    from fullrank.analysis.plots import plot_head_heatmap
    from fullrank.data.text import read_lines, read_text
    from fullrank.data.treebank import read_clean_tree_line
    from fullrank.inference.translate import translate
    from fullrank.output import console as make_console
    from fullrank.paths import atomic_path, check_figure_name, check_output_files
    from fullrank.training.checkpoints import load_checkpoint, resolve

    if args.sequences < 1:
        raise ConfigError(f"--sequences must be at least 1, got {args.sequences}")
    ckpt_dir = resolve(args.checkpoint)
    # by default beside the checkpoint: in its run's folder when it is one of a run's checkpoints
    home = ckpt_dir.parent.parent if ckpt_dir.parent.name == "checkpoints" else ckpt_dir.parent
    out = Path(args.output) if args.output else home / "heads.png"
    inputs = [p for p in (args.data, args.ref, args.checkpoint) if p]
    guard = functools.partial(
        check_output_files, option="-o", overwrite=args.overwrite, inputs=inputs, within=[ckpt_dir]
    )
    guard([out])  # first alone: `-o .` is refused as a directory before a table is named after it
    check_figure_name(out, option="-o")
    guard([out.with_suffix(".csv")])
    ckpt = load_checkpoint(ckpt_dir)
    tok = ckpt.tokenizer
    if tok is None:
        raise CheckpointError(f"{ckpt.path}: no tokenizer.json in this checkpoint")
    cfg = ckpt.config
    if ckpt.task == "mt":
        lines = read_lines(args.data)
        numbers = [i for i, s in enumerate(lines) if s.strip()][: args.sequences]
        sources = [lines[i] for i in numbers]
        if args.ref:
            refs = aligned_refs(args.ref, lines, "translation")
            targets = [refs[i] for i in numbers]
            empty = next((i for i in numbers if not refs[i].strip()), None)
            if empty is not None:
                raise DataError(f"{args.ref}:{empty + 1}: empty translation of a sentence; give one")
        else:
            targets = [o[0] for o in translate(ckpt.model, tok, sources, beam=1)]
        batch = mt_batch(tok, sources, targets, max_len=cfg.max_len)
        stats = head_report(ckpt.model, batch.tokens, mask=batch.mask, tgt=batch.tgt, tgt_mask=batch.tgt_mask)
    elif ckpt.task == "parse":
        lines = read_lines(args.data)
        numbers = [i for i, s in enumerate(lines, 1) if s.strip()][: args.sequences]
        sentences = [lines[i - 1] for i in numbers]
        gold, where = None, [f"{args.data} line {i}" for i in numbers]
        if args.ref:
            refs = aligned_refs(args.ref, lines, "tree")
            gold = [read_clean_tree_line(refs[i - 1], source=args.ref, line_number=i) for i in numbers]
            where = [f"{args.ref} line {i}" for i in numbers]
        batch, _ = parse_batch(ckpt, sentences, gold, where=where)
        stats = head_report(ckpt.model, batch.tokens, mask=batch.mask, tgt=batch.tgt, tgt_mask=batch.tgt_mask)
    else:
        eos_per_line = ckpt.eos_per_line
        batch = lm_batch(
            tok,
            read_text(args.data),
            seq_len=cfg.seq_len,
            n_sequences=args.sequences,
            eos_per_line=eos_per_line,
            frame=encoder_frame(ckpt),
        )
        stats = head_report(ckpt.model, batch.tokens, mask=batch.mask)
    console = make_console()
    dh, dv = cfg.head_sizes
    console.print(
        f"{ckpt.path}: {cfg.n_heads} heads × d_head {dh} (d_value {dv}), measured on "
        f"{batch.tokens.shape[0]} sequences, {mean_keys(stats)}"
    )
    console.print(head_table(stats))
    plot_head_heatmap(stats, out)
    with atomic_path(out.with_suffix(".csv")) as tmp, open(tmp, "w", newline="", encoding="utf-8") as f:
        rows = [dataclasses.asdict(s) for s in stats]
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    n_bottleneck = sum(s.bottleneck for s in stats)
    console.print(
        f"{n_bottleneck} of {len(stats)} heads have d_head < n (logit rank capped "
        f"below the sequence length, [B20] Theorem 1)\nheatmap: {out}\ntable: "
        f"{out.with_suffix('.csv')}"
    )
    return 0


def aligned_refs(path: str, lines: list[str], what: str) -> list[str]:
    """The lines of ``--ref`` file ``path``, one ``what`` per line of ``--data`` (``lines``);
    one line naming both counts otherwise."""
    from fullrank.data.text import read_lines
    from fullrank.errors import DataError

    refs = read_lines(path)
    if len(refs) != len(lines):
        raise DataError(
            f"--ref has {len(refs)} lines and --data {len(lines)}; give one {what} per sentence, "
            f"in the same order"
        )
    return refs
