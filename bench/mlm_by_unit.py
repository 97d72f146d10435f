"""Masked-LM accuracy of pre-trained BERT checkpoints on the Wikipedia validation articles, with
masks drawn by each unit — single word pieces (BERT), whole words, spans of whole words — so
that models pre-trained with one unit are scored on every unit. Each unit's masks are fixed
(seed 0); every checkpoint sees the same predictions.

    python bench/mlm_by_unit.py runs/bert/wiki_recipe runs/bert/wiki_recipe_word --batches 60
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import torch

DATA = Path("../shared/data/wikipedia-en-2015")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("runs", nargs="+", help="pre-training run or checkpoint directories")
    p.add_argument("--batches", type=int, default=60, help="validation batches of 32 per unit")
    p.add_argument("--cache", default=".cache/fullrank", help="the token cache (data.cache_dir)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--results", type=Path, help="also write the table here (markdown)")
    a = p.parse_args()

    from fullrank.data.bert_pretraining import PretrainingBatches, make_segments, masking_rule
    from fullrank.data.document_cache import cached_documents
    from fullrank.training.checkpoints import load_checkpoint
    from fullrank.training.tasks import MaskedLMWithNSP

    torch.set_num_threads(a.threads)
    rows = []
    for run in a.runs:
        ckpt = load_checkpoint(run)
        tok, seq_len = ckpt.tokenizer, ckpt.config.seq_len
        assert tok is not None and tok.cls_id is not None and tok.sep_id is not None
        docs = cached_documents(DATA / "valid.txt.xz", "wikiextractor", tok, a.cache, skip_short=True)
        segments = make_segments(docs, max_seq_len=seq_len, seed=0)
        scores = []
        for unit in ("token", "word", "span"):
            rule = masking_rule(tok, max_predictions=math.ceil(0.15 * seq_len), unit=unit)
            valid = PretrainingBatches(
                segments,
                rule,
                cls_id=tok.cls_id,
                sep_id=tok.sep_id,
                pad_id=tok.pad_id,
                batch_size=32,
                masking="static",
            )
            with torch.no_grad():
                v = MaskedLMWithNSP().evaluate(
                    ckpt.model.eval(), valid.eval_batches(), torch.device("cpu"), a.batches
                )
            scores.append(f"{v['mlm_acc']:.2f} ({v['mlm_ppl']:.0f})")
        rows.append(f"| {run} | " + " | ".join(scores) + " |")
        print(rows[-1], flush=True)
    table = "| checkpoint | token masks: MLM acc % (ppl) | whole words | spans |\n|---|---|---|---|\n"
    table += "\n".join(rows) + "\n"
    print("\n" + table, end="")
    if a.results:
        a.results.write_text(f"{a.batches} validation batches of 32 a unit, masks fixed (seed 0)\n\n" + table)


if __name__ == "__main__":
    main()
