"""A tiny BERT pipeline (pre-training, classification, SQuAD) on text shipped with the tests."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
LINES = [
    x.strip()
    for x in (REPO / "data" / "tinyshakespeare" / "valid.txt").read_text(encoding="utf-8").splitlines()
    if len(x.split()) >= 4
]
MODEL = "{d_model: 24, n_heads: 3, d_head: 10, d_ff: 37, n_layers: 2, seq_len: 48, max_len: 48}"
TRAIN = (
    "optimizer: adamw, lr: 0.003, schedule: linear, warmup: 2, weight_decay: 0.01, log_every: 2, threads: 1"
)


def write_corpus(tmp: Path) -> None:
    """Documents of six lines (blank lines between), a classification set and a SQuAD file."""
    blocks = ["\n".join(line + "." for line in LINES[i : i + 6]) for i in range(0, 600, 6)]
    (tmp / "docs.txt").write_text("\n\n".join(blocks[:80]) + "\n", encoding="utf-8")
    (tmp / "docs_valid.txt").write_text("\n\n".join(blocks[80:]) + "\n", encoding="utf-8")
    rng = np.random.default_rng(0)
    rows = []
    for i in range(160):  # "same" when the second text repeats the first one's opening words
        a = LINES[i]
        same = i % 2 == 0
        b = " ".join(a.split()[:3]) if same else " ".join(LINES[i + 300].split()[:3])
        rows.append({"text_a": a, "text_b": b, "label": "same" if same else "other"})
    for name, part in (("pairs_train.jsonl", rows[:128]), ("pairs_valid.jsonl", rows[128:])):
        (tmp / name).write_text("".join(json.dumps(r) + "\n" for r in part), encoding="utf-8")
    articles = []
    for art in range(8):
        paragraphs = []
        for p in range(2):
            words = " ".join(LINES[art * 20 + p * 10 : art * 20 + p * 10 + 4]).split()
            context = " ".join(words)
            qas = []
            for k in range(3):
                i = int(rng.integers(1, len(words) - 2))
                start = len(" ".join(words[:i])) + 1
                qas.append(
                    {
                        "id": f"{art}.{p}.{k}",
                        "question": f"what comes after {words[i - 1]}?",
                        "answers": [{"text": words[i], "answer_start": start}],
                    }
                )
            paragraphs.append({"context": context, "qas": qas})
        articles.append({"title": str(art), "paragraphs": paragraphs})
    (tmp / "squad.json").write_text(json.dumps({"version": "1.1", "data": articles}), encoding="utf-8")


def write_configs(tmp: Path, steps: int = 8) -> dict[str, Path]:
    write_corpus(tmp)
    out = tmp / "runs"
    cfgs = {
        "bert": f"""name: pre
task: bert
out_dir: {out}
model: {MODEL}
data: {{root: {tmp}, train: docs.txt, valid: docs_valid.txt, corpus_format: blocks,
        short_documents: skip, vocab_size: 300, max_predictions: 6}}
train: {{steps: {steps}, batch_size: 8, eval_every: 4, eval_batches: 2, save_every: 4, {TRAIN}}}
""",
        "classify": f"""name: cls
task: classify
out_dir: {out}
data: {{root: {tmp}, train: pairs_train.jsonl, valid: pairs_valid.jsonl,
        eval_sets: {{again: pairs_valid.jsonl}}}}
train: {{init_from: {out / "pre"}, steps: {steps}, batch_size: 8, eval_every: 4, save_every: 4,
         {TRAIN}}}
""",
        "squad": f"""name: qa
task: squad
out_dir: {out}
data: {{root: {tmp}, train: squad.json, test_every: 4, doc_stride: 8}}
train: {{init_from: {out / "pre"}, steps: {steps}, batch_size: 8, eval_every: 4, save_every: 4,
         {TRAIN}}}
""",
    }
    paths = {}
    for name, text in cfgs.items():
        paths[name] = tmp / f"{name}.yaml"
        paths[name].write_text(text, encoding="utf-8")
    return paths
