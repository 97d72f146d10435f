"""MNLI fine-tuning through Hugging Face alone: an independent check of fullrank's MNLI numbers.

A fullrank pre-trained encoder, written with ``fullrank export`` (the Wikipedia recipe's becomes
``RobertaPreLayerNormForMaskedLM``), is fine-tuned by ``transformers``' ``…ForSequenceClassification``
(a new classification head: dense and tanh on the first token, then the 3 classes) with the
tokenizer export wrote, on ``configs/bert/mnli.yaml``'s data (the 8,999 training pairs of
``mnli/glue_pretrain/train.json``, accuracy on the 1,000 of ``dev.json``) and schedule (1,350
steps of 32, lr 3e-4, 135 warm-up steps) — with none of fullrank's code
(:mod:`hf_finetune`). ``--scratch`` starts from ``transformers``' random initialisation.

    fullrank export runs/bert/wiki_recipe -o runs/hf/wiki_recipe
    python bench/mnli_hf.py runs/hf/wiki_recipe ../shared/data/mnli/glue_pretrain --seed 0 [--scratch]
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from hf_finetune import arguments, fine_tune, model_and_tokenizer, report

LABELS = ("entailment", "neutral", "contradiction")


def pairs(tok, path: Path, max_len: int) -> dict[str, torch.Tensor]:
    """The pairs of one ``glue_pretrain`` file, tokenized as BERT frames a pair, with labels."""
    rows = list(json.loads(path.read_text(encoding="utf-8")).values())
    enc = tok(
        [r["text_a"] for r in rows],
        [r["text_b"] for r in rows],
        truncation="longest_first",
        max_length=max_len,
        padding="max_length",
        return_tensors="pt",
    )
    return {**enc, "labels": torch.tensor([LABELS.index(r["label"]) for r in rows])}


def main() -> int:
    a = arguments(__doc__.splitlines()[0], steps=1350, warmup=135).parse_args()
    began = time.perf_counter()
    model, tok = model_and_tokenizer(a, "ForSequenceClassification", num_labels=len(LABELS))
    train, dev = pairs(tok, a.data / "train.json", a.max_len), pairs(tok, a.data / "dev.json", a.max_len)
    print(
        f"{type(model).__name__} ({'random weights' if a.scratch else 'pre-trained'}), seed {a.seed}: "
        f"{len(train['labels']):,} training pairs, {len(dev['labels']):,} dev pairs",
        flush=True,
    )
    keys = ("input_ids", "token_type_ids", "attention_mask", "labels")
    losses = fine_tune(model, train, keys, a)
    with torch.no_grad():
        guesses = torch.cat(
            [
                model(**{k: dev[k][i : i + 100] for k in keys[:3]}).logits.argmax(-1)
                for i in range(0, len(dev["labels"]), 100)
            ]
        )
    report(a, losses, began, accuracy=100 * (guesses == dev["labels"]).float().mean().item())
    return 0


if __name__ == "__main__":
    sys.exit(main())
