"""Where a SQuAD window's paragraph tokens look: per layer of each checkpoint, the share of
their attention that goes to the question (beside the question's share of the window's tokens,
which attention spread evenly would give it), to the token itself, and, for paragraph pieces
that the question also holds, to those same pieces in the question. On the windows of the test
part (every 4th article of the dev file, as ``configs/bert/squad.yaml`` splits it), at the
stride of that config; pre-trained and fine-tuned checkpoints alike.

    python bench/squad_attention.py runs/bert/wiki_recipe runs/bert/squad_true runs/bert/squad_false

Columns per layer: ``to question`` / ``even share`` (mean over paragraph tokens of the
attention on question tokens, and of the question's share of the keys), ``to itself``, and
``to its piece in the question`` (over the paragraph tokens whose piece occurs in the question:
the attention on those occurrences, beside their share of the keys).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

DATA = Path("../shared/data/squad-v1.1/dev-v1.1.json")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("runs", nargs="+", help="run or checkpoint directories of BERT encoders")
    p.add_argument("--data", type=Path, default=DATA, help="the SQuAD v1.1 file (default: %(default)s)")
    p.add_argument("--windows", type=int, default=512, help="test windows to measure on")
    p.add_argument("--doc-stride", type=int, default=64)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--results", type=Path, help="also write the table here (markdown)")
    a = p.parse_args()

    from fullrank.analysis.capture import capture_attention
    from fullrank.data.batch import encoder_inputs
    from fullrank.data.finetuning import make_windows, read_squad, split_articles
    from fullrank.training.checkpoints import load_checkpoint

    torch.set_num_threads(a.threads)
    _, test = split_articles(read_squad(a.data), 4)
    lines = [
        "| run | layer | to question % | even share % | to itself % | to its piece in the question % "
        "| even share % |",
        "|---|---|---|---|---|---|---|",
    ]
    print("\n".join(lines), flush=True)
    for run in a.runs:
        ckpt = load_checkpoint(run)
        model, tok = ckpt.model.eval(), ckpt.tokenizer
        assert tok is not None and tok.cls_id is not None and tok.sep_id is not None
        windows = make_windows(
            test, tok, max_seq_len=ckpt.config.seq_len, doc_stride=a.doc_stride, training=False
        )
        sums: dict[str, torch.Tensor] = {}
        for i in range(0, min(a.windows, len(windows)), 64):
            j = min(i + 64, a.windows, len(windows))
            inp = encoder_inputs(windows.rows[i:j], windows.segments[i:j], tok.pad_id)
            tokens, real = inp.tokens, inp.mask
            special = (tokens == tok.cls_id) | (tokens == tok.sep_id)
            para = inp.segments.bool() & real & ~special  # (B, T)
            ques = ~inp.segments.bool() & real & ~special
            same = (tokens[:, :, None] == tokens[:, None, :]) & ques[:, None, :]  # (B, T, S)
            matched = para & same.any(-1)
            with torch.no_grad(), capture_attention(model) as rec:
                model(tokens, segments=inp.segments, mask=real)
            n_keys = real.sum(1, keepdim=True).float()  # (B, 1)
            for name, calls in rec.by_name().items():
                probs = calls[0].probs.mean(1)  # (B, T, S), the heads' mean
                row = torch.stack(
                    [
                        (probs * ques[:, None, :]).sum(-1)[para].sum(),
                        (ques.sum(1, keepdim=True) / n_keys).expand_as(para)[para].sum(),
                        probs.diagonal(dim1=1, dim2=2)[para].sum(),
                        para.sum().float(),
                        (probs * same).sum(-1)[matched].sum(),
                        (same.sum(-1) / n_keys)[matched].sum(),
                        matched.sum().float(),
                    ]
                )
                sums[name] = sums.get(name, torch.zeros(7)) + row
        for layer, name in enumerate(sorted(sums, key=lambda n: int(n.split(".")[1]))):
            s = sums[name]
            cells = [
                100 * s[0] / s[3],
                100 * s[1] / s[3],
                100 * s[2] / s[3],
                100 * s[4] / s[6],
                100 * s[5] / s[6],
            ]
            line = f"| {Path(run).name} | {layer} | " + " | ".join(f"{float(c):.1f}" for c in cells) + " |"
            lines.append(line)
            print(line, flush=True)
    if a.results:
        a.results.write_text("\n".join(lines) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
