"""How much of a pre-trained BERT's masked-LM accuracy is copying: on the Wikipedia validation
articles (BERT's 15% masking, 80/10/10, fixed masks of seed 0, the recipe's validation), how often
the model's likeliest piece at a masked position is a piece visible elsewhere in the same
segment, and its accuracy where the right piece is visible and where it is not.

    python bench/mlm_copying.py runs/bert/wiki_recipe runs/bert/wiki_mask40 --batches 20

Columns: MLM accuracy; the share of predictions whose right piece is visible in the segment
(the chance a copy can be right); the share of predictions that copy a visible piece; the
share that copy one wrongly; accuracy where the right piece is visible and where it is not.
Each over every masked position, then over the positions whose right piece is a content word
(a whole word of four or more letters, such as ``paris`` or ``century``, not ``the`` or ``##s``).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

DATA = Path("../shared/data/wikipedia-en-2015")
HEADER = (
    "| run | MLM acc % | right piece visible % | copies a visible piece % | copies wrongly % "
    "| acc where visible % | acc where not % |\n|---|---|---|---|---|---|---|"
)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("runs", nargs="+", help="pre-training run or checkpoint directories")
    p.add_argument("--batches", type=int, default=20, help="validation batches of 32")
    p.add_argument("--cache", default=".cache/fullrank", help="the token cache (data.cache_dir)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--results", type=Path, help="also write the table here (markdown)")
    a = p.parse_args()

    from fullrank.data.bert_pretraining import make_segments
    from fullrank.data.document_cache import cached_documents
    from fullrank.models import EncoderConfig
    from fullrank.recipes.bert import validation_batches
    from fullrank.training.checkpoints import load_checkpoint

    torch.set_num_threads(a.threads)
    print(HEADER)
    rows = [HEADER]
    for run in a.runs:
        ckpt = load_checkpoint(run)
        model, tok, seq_len = ckpt.model.eval(), ckpt.tokenizer, ckpt.config.seq_len
        assert tok is not None and tok.cls_id is not None and tok.sep_id is not None
        docs = cached_documents(DATA / "valid.txt.xz", "wikiextractor", tok, a.cache, skip_short=True)
        assert isinstance(ckpt.config, EncoderConfig)
        # the validation batches every run scores: BERT's 15% masking, fixed by the data
        valid = validation_batches(
            make_segments(docs, max_seq_len=seq_len, seed=0), tok, ckpt.config, 32, "valid"
        )
        vocab = [tok.id_to_token(i) or "" for i in range(tok.vocab_size)]
        content = torch.tensor([len(v) >= 4 and v.isalpha() for v in vocab])  # (V,)
        counts = {"all": [0] * 6, "content words": [0] * 6}
        special = torch.tensor([tok.pad_id, tok.cls_id, tok.sep_id, tok.mask_id])
        for k, batch in enumerate(valid.eval_batches()):
            if k == a.batches:
                break
            tokens = batch.inputs.tokens  # (B, T), masked
            b, t = tokens.shape
            with torch.no_grad():
                h = model(tokens, segments=batch.inputs.segments, mask=batch.inputs.mask)  # (B, T, D)
                guess = getattr(model, "mlm_logits")(h.reshape(b * t, -1)[batch.mlm_index]).argmax(-1)  # (N,)
            chosen = torch.zeros(b * t, dtype=torch.bool)
            chosen[batch.mlm_index] = True
            seen = ~chosen.view(b, t) & ~torch.isin(tokens, special)  # (B, T): visible pieces
            row = torch.div(batch.mlm_index, t, rounding_mode="floor")  # (N,)
            in_row = (tokens[row] == batch.mlm_labels[:, None]) & seen[row]  # (N, T)
            guess_in_row = (tokens[row] == guess[:, None]) & seen[row]
            is_right = guess == batch.mlm_labels
            is_visible = in_row.any(1)
            is_copy = guess_in_row.any(1)
            for name, keep in (
                ("all", torch.ones_like(is_right)),
                ("content words", content[batch.mlm_labels]),
            ):
                c = counts[name]
                for j, x in enumerate(
                    (keep, is_right, is_visible, is_copy, is_copy & ~is_right, is_right & is_visible)
                ):
                    c[j] += int((x & keep).sum())
        pct = lambda x, d: 100.0 * x / max(d, 1)  # noqa: E731  # a local shorthand
        for name, (n, right, visible, copies, wrong_copies, right_visible) in counts.items():
            line = (
                f"| {run}: {name} ({n:,}) | {pct(right, n):.2f} | {pct(visible, n):.1f} | "
                f"{pct(copies, n):.1f} | {pct(wrong_copies, n):.1f} | {pct(right_visible, visible):.1f} | "
                f"{pct(right - right_visible, n - visible):.1f} |"
            )
            rows.append(line)
            print(line, flush=True)
    if a.results:
        a.results.write_text("\n".join(rows) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
