"""Where do a pre-trained BERT's heads look? For each checkpoint, each layer and head, averaged
over 32 validation segments of the Wikipedia corpus with BERT's 15% masking (fixed masks):

- ``self``: attention on the query's own position;
- ``dist``: mean distance ``|i - j|`` to the attended positions (a uniform head over 126 tokens
  is near 42, a head on its neighbours near 1);
- ``entropy``: of each query's attention (nats; uniform over 128 positions: 4.85);
- ``[MASK]→[MASK]``: for the queries at ``[MASK]`` tokens, the attention on ``[MASK]`` tokens —
  what a head that matches tokens like its own gives when the token is ``[MASK]``.

    python bench/bert_attention.py runs/bert/wiki_recipe/checkpoints/latest OTHER_CHECKPOINT

The validation segments and masks are those of the recipe's evaluation (``valid.txt.xz``, the
token cache under ``--cache``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data" / "wikipedia-en-2015"


def head_stats(checkpoint: Path, batch, mask_id: int, pad_id: int) -> list[tuple[int, int, dict]]:
    """``(layer, head, stats)`` of one checkpoint on one batch."""
    from fullrank.analysis.capture import capture_attention
    from fullrank.training.checkpoints import load_checkpoint
    from fullrank.training.tasks import encode

    model = load_checkpoint(checkpoint).model.eval()
    with torch.no_grad(), capture_attention(model) as rec:
        encode(model, batch.inputs)
    tokens = batch.inputs.tokens  # (B, T)
    positions = torch.arange(tokens.shape[1])
    dist = (positions[None, :] - positions[:, None]).abs().float()  # (T, T)
    real, masked = tokens != pad_id, tokens == mask_id  # (B, T)
    out = []
    for layer, record in enumerate(rec.records):
        for h in range(record.probs.shape[1]):
            p = record.probs[:, h]  # (B, T, T)
            on_masks = (p * masked[:, None, :]).sum(-1)  # (B, T)
            out.append(
                (
                    layer,
                    h,
                    {
                        "self": torch.diagonal(p, dim1=1, dim2=2)[real].mean().item(),
                        "dist": (p * dist).sum(-1)[real].mean().item(),
                        "entropy": -(p.clamp_min(1e-12).log() * p).sum(-1)[real].mean().item(),
                        "mask_to_mask": on_masks[masked].mean().item(),
                    },
                )
            )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("checkpoints", nargs="+", type=Path)
    ap.add_argument("--cache", type=Path, default=ROOT / ".cache" / "fullrank")
    a = ap.parse_args()
    from fullrank.data.bert_pretraining import PretrainingBatches, make_segments, masking_rule
    from fullrank.data.document_cache import cached_documents
    from fullrank.training.checkpoints import load_checkpoint

    torch.set_num_threads(1)
    tok = load_checkpoint(a.checkpoints[0]).tokenizer
    if tok is None:
        sys.exit(f"{a.checkpoints[0]}: the checkpoint has no tokenizer")
    assert (
        tok.cls_id is not None and tok.sep_id is not None and tok.mask_id is not None
    )  # a wordpiece tokenizer's
    docs = cached_documents(DATA / "valid.txt.xz", "wikiextractor", tok, a.cache, skip_short=True)
    valid = PretrainingBatches(
        make_segments(docs, max_seq_len=128, seed=0),
        masking_rule(tok, mlm_prob=0.15, max_predictions=20),
        batch_size=32,
        seed=0,
        masking="static",
        cls_id=tok.cls_id,
        sep_id=tok.sep_id,
        pad_id=tok.pad_id,
    )
    batch = next(iter(valid.eval_batches(32)))
    print("| checkpoint | layer | head | self | dist | entropy | [MASK]→[MASK] |")
    print("|---|---|---|---|---|---|---|")
    for ckpt in a.checkpoints:
        for layer, h, s in head_stats(ckpt, batch, tok.mask_id, tok.pad_id):
            print(
                f"| {ckpt} | {layer} | {h} | {s['self']:.2f} | {s['dist']:.1f} | "
                f"{s['entropy']:.2f} | {s['mask_to_mask']:.2f} |"
            )


if __name__ == "__main__":
    main()
