"""``fullrank widen CKPT --d-head 128 -o OUT``: the same function with wider heads."""

from __future__ import annotations

import argparse
import copy
from typing import TYPE_CHECKING

from fullrank.cli.arguments import output_path
from fullrank.paths import check_output_dir

if TYPE_CHECKING:
    from torch import nn

    from fullrank.models import ModelConfig


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("checkpoint", help="checkpoint directory or run directory (its latest)")
    p.add_argument("--d-head", type=int, required=True, help="new query/key size per head")
    p.add_argument(
        "--d-value",
        type=int,
        default=None,
        help="new value size per head (default: follows d_head if it did)",
    )
    p.add_argument(
        "--zero-init",
        action="store_true",
        help="zero every new weight (they then receive no gradient; default: new "
        "query and value rows are random, new key rows and output columns zero)",
    )
    p.add_argument(
        "-o",
        "--output",
        required=True,
        type=output_path,
        help="directory of the new checkpoint (a new one, or with --overwrite an existing checkpoint)",
    )
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="replace the checkpoint at --output (only a fullrank checkpoint is replaced)",
    )


def run(args: argparse.Namespace) -> int:
    from fullrank.analysis.widen import widen
    from fullrank.models import config_to_dict
    from fullrank.training.checkpoints import (
        checkpoint_files,
        is_checkpoint_dir,
        load_checkpoint,
        resolve,
        write_checkpoint,
    )

    source = resolve(args.checkpoint)
    check_output_dir(
        args.output,
        option="-o",
        overwrite=args.overwrite,
        inputs=[args.checkpoint, source],
        within=[source],
        replaceable=is_checkpoint_dir,
        own=checkpoint_files,
        kind="a fullrank checkpoint",
    )
    ckpt = load_checkpoint(source)
    model = widen(ckpt.model, args.d_head, args.d_value, zero_init=args.zero_init)
    config: ModelConfig = getattr(model, "config")
    meta = dict(ckpt.meta)
    if "experiment" in meta:  # keep the stored experiment consistent with the new model
        meta["experiment"] = copy.deepcopy(meta["experiment"])
        model_fields = config_to_dict(config)
        model_fields.pop("family")
        meta["experiment"]["model"] = model_fields
    meta["widened_from"] = str(ckpt.path)
    out = write_checkpoint(args.output, model, config, ckpt.tokenizer, meta, replace=args.overwrite)
    check = _max_difference(ckpt.model, model)
    old, new = ckpt.config.head_sizes, config.head_sizes
    print(
        f"widened heads d_head/d_value {old[0]}/{old[1]} → {new[0]}/{new[1]}: "
        f"{ckpt.config.num_params():,} → {config.num_params():,} parameters; "
        f"max |output difference| on a random batch {check:.2e}; written to {out}"
    )
    return 0


def _max_difference(old: nn.Module, new: nn.Module) -> float:
    """Largest output difference of the two models on one random batch."""
    import torch

    cfg: ModelConfig = getattr(old, "config")
    gen = torch.Generator().manual_seed(0)
    x = torch.randint(0, cfg.vocab_size, (2, min(cfg.seq_len, 16)), generator=gen)
    with torch.no_grad():
        if hasattr(old, "encode"):
            return float((old(x, x) - new(x, x)).abs().max())
        return float((old(x) - new(x)).abs().max())
