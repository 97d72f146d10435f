"""A tiny character-level experiment (a few seconds of training) for end-to-end tests."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TEXT = (REPO / "data" / "tinyshakespeare" / "valid.txt").read_text(encoding="utf-8")


def tiny_experiment(
    tmp_path: Path,
    *,
    steps: int = 12,
    save_every: int = 4,
    dropout: float = 0.1,
    batch_size: int = 4,
    extra: str = "",
) -> Path:
    """Write a corpus and an experiment file under ``tmp_path``; return the file."""
    (tmp_path / "train.txt").write_text(TEXT[:20000], encoding="utf-8")
    (tmp_path / "valid.txt").write_text(TEXT[20000:24000], encoding="utf-8")
    cfg = tmp_path / "tiny.yaml"
    cfg.write_text(
        f"""
name: tiny
task: lm
out_dir: {tmp_path / "runs"}
model: {{d_model: 24, n_heads: 3, d_head: 10, d_value: 6, d_ff: 37, n_layers: 2, seq_len: 16,
         dropout: {dropout}}}
data: {{root: {tmp_path}, train: train.txt, valid: valid.txt, tokenizer: char,
        cache_dir: {tmp_path / "cache"}}}
train: {{steps: {steps}, batch_size: {batch_size}, optimizer: adamw, lr: 0.003, schedule: cosine,
         warmup: 3, eval_every: 6, eval_batches: 4, save_every: {save_every}, log_every: 2,
         threads: 1, weight_decay: 0.01}}
sample: {{max_new_tokens: 40}}
{extra}
""",
        encoding="utf-8",
    )
    return cfg
