"""A floor for MNLI fine-tuning: logistic regression on bag-of-words features of the same training
pairs (``mnli/glue_pretrain/train.json``), scored on its ``dev.json``. Features: each hypothesis
word, and whether it appears in the premise (words seen in at least 2 training pairs).

    python bench/mnli_bow.py [--data ../shared/data]
"""

from __future__ import annotations

import argparse
import collections
import json
import re
from pathlib import Path

import torch

LABELS = {"entailment": 0, "neutral": 1, "contradiction": 2}


def pairs(path: Path) -> list[tuple[str, str, int]]:
    rows = json.loads(path.read_text(encoding="utf-8")).values()
    return [(r["text_a"], r["text_b"], LABELS[r["label"]]) for r in rows]


def words(text: str) -> list[str]:
    return re.findall(r"\w+|[^\w\s]", text.lower())


def features(premise: str, hypothesis: str) -> set[str]:
    seen, hyp = set(words(premise)), words(hypothesis)
    return {f"h:{w}" for w in hyp} | {f"{'o' if w in seen else 'n'}:{w}" for w in hyp}


def matrix(data: list[tuple[str, str, int]], vocab: dict[str, int]) -> torch.Tensor:
    x = torch.zeros(len(data), len(vocab))
    for r, (a, b, _) in enumerate(data):
        cols = [vocab[f] for f in features(a, b) if f in vocab]
        x[r, cols] = 1.0
    return x


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=Path(__file__).resolve().parents[2] / "shared" / "data")
    args = ap.parse_args()
    root = args.data / "mnli" / "glue_pretrain"
    train, dev = pairs(root / "train.json"), pairs(root / "dev.json")
    counts = collections.Counter(f for a, b, _ in train for f in features(a, b))
    vocab = {f: i for i, f in enumerate(f for f, c in counts.items() if c >= 2)}
    xt, xd = matrix(train, vocab), matrix(dev, vocab)
    yt, yd = torch.tensor([y for *_, y in train]), torch.tensor([y for *_, y in dev])
    torch.manual_seed(0)
    w = torch.zeros(len(vocab), 3, requires_grad=True)
    b = torch.zeros(3, requires_grad=True)
    opt = torch.optim.Adam([w, b], lr=0.01)
    for _ in range(200):  # full-batch steps
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(xt @ w + b, yt) + 1e-4 * (w**2).sum()
        loss.backward()
        opt.step()
    acc = ((xd @ w + b).argmax(1) == yd).float().mean().item()
    print(f"{len(vocab):,} features · train loss {loss.item():.3f} · dev accuracy {100 * acc:.1f}%")


if __name__ == "__main__":
    main()
