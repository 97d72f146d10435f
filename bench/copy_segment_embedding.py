"""A BERT checkpoint pre-trained on single segments, with sentence B's segment embedding (never
trained there) set to sentence A's, as RoBERTa reads pairs: a probe of whether fine-tuning on
pairs (MNLI, SQuAD) suffers from the untrained row.

    python bench/copy_segment_embedding.py RUN OUT
    fullrank train configs/bert/squad.yaml train.init_from=OUT train.seed=0
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

from fullrank.models.encoder import Encoder
from fullrank.training.checkpoints import load_checkpoint, resolve, write_checkpoint


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run", type=Path, help="a BERT pre-training run or checkpoint")
    ap.add_argument("out", type=Path, help="the new checkpoint directory (must not exist)")
    args = ap.parse_args()
    ckpt = load_checkpoint(resolve(args.run))
    if not isinstance(ckpt.model, Encoder) or ckpt.model.embed.segments is None:
        sys.exit(f"{args.run}: not a BERT checkpoint with segment embeddings")
    segments = ckpt.model.embed.segments.weight
    with torch.no_grad():
        segments[1].copy_(segments[0])
    print(write_checkpoint(args.out, ckpt.model, ckpt.config, ckpt.tokenizer, ckpt.meta))


if __name__ == "__main__":
    main()
