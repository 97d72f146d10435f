"""``fullrank attention CKPT --text "…" -o FILE.png``: per-head attention maps ([V17] Figs 3–5)."""

from __future__ import annotations

import argparse
from pathlib import Path

from fullrank.cli.arguments import output_path
from fullrank.errors import CheckpointError, ConfigError

VIEWS = ("encoder", "decoder", "cross")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("checkpoint", help="checkpoint directory or run directory (its latest)")
    p.add_argument(
        "--text", required=True, help="the sentence (the source, for translation; tokenized, for parsing)"
    )
    p.add_argument(
        "--target",
        default=None,
        help="translation: the target to teacher-force (default: the model's greedy "
        "translation); parsing: the sentence's bracketed tree (default: the "
        "model's greedy parse)",
    )
    p.add_argument(
        "--view",
        choices=VIEWS,
        default=None,
        help="translation and parsing: encoder self-, decoder self- or "
        "cross-attention (default: encoder; a language model has only its own self-attention)",
    )
    p.add_argument(
        "--layer",
        type=int,
        default=None,
        help="layer index (default: the last but one, as [V17]'s layer 5 of 6)",
    )
    p.add_argument("--heads", type=int, nargs="*", default=None, help="heads to draw (default all)")
    p.add_argument(
        "--query",
        type=int,
        default=None,
        help="token index for the 'from one token' view (default: every token)",
    )
    p.add_argument(
        "--max-tokens",
        type=int,
        default=40,
        help="draw the first this many tokens of each axis, so that the figure fits a "
        "screen (default 40; 0 = all, for a large figure)",
    )
    p.add_argument(
        "-o",
        "--output",
        required=True,
        type=output_path,
        help="PNG of the per-head maps; the line view goes to OUTPUT-lines.png (both new files)",
    )
    p.add_argument("--overwrite", action="store_true", help="replace existing output files")


def run(args: argparse.Namespace) -> int:
    import torch

    from fullrank.analysis.capture import capture_attention
    from fullrank.analysis.inputs import encoder_frame, lm_batch, mt_batch, parse_batch, token_strings
    from fullrank.analysis.plots import plot_attention_lines, plot_attention_maps
    from fullrank.data.treebank import read_clean_tree_line
    from fullrank.inference.translate import translate
    from fullrank.paths import check_figure_name, check_output_files
    from fullrank.training.checkpoints import load_checkpoint

    if not args.text.strip():
        raise ConfigError("--text is empty; give a sentence")
    out = Path(args.output)
    # the maps first alone: `-o .` is refused as a directory before the line view is named after it
    check_output_files([out], option="-o", overwrite=args.overwrite, inputs=[args.checkpoint])
    check_figure_name(out, option="-o")
    lines = out.with_name(out.stem + "-lines" + out.suffix)
    check_output_files([lines], option="-o", overwrite=args.overwrite, inputs=[args.checkpoint])
    ckpt = load_checkpoint(args.checkpoint)
    tok, cfg = ckpt.tokenizer, ckpt.config
    if tok is None:
        raise CheckpointError(f"{ckpt.path}: no tokenizer.json in this checkpoint")
    if args.target is not None and not args.target.strip():
        raise ConfigError("--target is empty; give the target, or leave --target out")
    if ckpt.task not in ("mt", "parse") and (args.view is not None or args.target is not None):
        option = "--view" if args.view is not None else "--target"
        raise ConfigError(
            f"{option}: {ckpt.path} is a language model, which has only its own self-attention "
            f"over --text; leave {option} out"
        )
    view = args.view or "encoder"
    if ckpt.task in ("mt", "parse"):
        if ckpt.task == "mt":
            target = args.target or translate(ckpt.model, tok, [args.text], beam=1)[0][0]
            batch, symbols = mt_batch(tok, [args.text], [target], max_len=cfg.max_len), tok
        else:
            gold = (
                None
                if args.target is None
                else [read_clean_tree_line(args.target, source="--target", line_number=1)]
            )
            batch, symbols = parse_batch(ckpt, [args.text], gold, where=["--target"])
            assert batch.tgt is not None  # a parser's batch has its target
            target = " ".join(token_strings(symbols, batch.tgt[0, 1:].tolist()))
        n_layers = cfg.n_layers if view == "encoder" else getattr(cfg, "decoder_layers")
        prefix = {
            "encoder": "encoder.{}.self_attn",
            "decoder": "decoder.{}.self_attn",
            "cross": "decoder.{}.cross_attn",
        }[view]
        src_strings = token_strings(tok, batch.tokens[0].tolist())
        assert batch.tgt is not None  # an encoder-decoder's batch has its target
        tgt_strings = token_strings(symbols, batch.tgt[0].tolist())
        queries = src_strings if view == "encoder" else tgt_strings
        keys = tgt_strings if view == "decoder" else src_strings
    else:
        batch = lm_batch(
            tok, args.text, seq_len=cfg.seq_len, n_sequences=1, eos_per_line=False, frame=encoder_frame(ckpt)
        )
        n_layers, prefix = cfg.n_layers, "layers.{}.self_attn"
        queries = keys = token_strings(tok, batch.tokens[0].tolist())
    layer = n_layers - 2 if args.layer is None and n_layers > 1 else (args.layer or 0)
    if not 0 <= layer < n_layers:
        raise ConfigError(f"--layer {layer} is out of range: this model has layers 0..{n_layers - 1}")
    bad_heads = [h for h in args.heads or [] if not 0 <= h < cfg.n_heads]
    if bad_heads:
        raise ConfigError(
            f"--heads {bad_heads[0]} is out of range: this model has heads 0..{cfg.n_heads - 1}"
        )
    if args.query is not None and not 0 <= args.query < len(queries):
        raise ConfigError(f"--query {args.query} is out of range: the text has tokens 0..{len(queries) - 1}")
    name = prefix.format(layer)
    model = ckpt.model
    with torch.no_grad(), capture_attention(model) as rec:
        if batch.tgt is not None:
            model(batch.tokens, batch.tgt, src_mask=batch.mask, tgt_mask=batch.tgt_mask)
        else:
            model(batch.tokens, mask=batch.mask)
    probs = rec.by_name()[name][0].probs[0]  # (H, T, S) of the one sentence
    title = f"{name} — {cfg.n_heads} heads of d_head {cfg.head_sizes[0]}"
    if args.max_tokens < 0:
        raise ConfigError(f"--max-tokens must be >= 0 (0 = all tokens), got {args.max_tokens}")
    max_tokens = args.max_tokens or None
    plot_attention_maps(probs, queries, keys, out, heads=args.heads, title=title, max_tokens=max_tokens)
    where = "" if args.query is None else f" from '{queries[args.query]}'"
    plot_attention_lines(
        probs,
        queries,
        keys,
        lines,
        query=args.query,
        heads=args.heads,
        title=title + where,
        max_tokens=max_tokens,
    )
    shown = f" (target: {target})" if batch.tgt is not None else ""
    print(f"{name}: maps {out}, lines {lines}{shown}")
    return 0
