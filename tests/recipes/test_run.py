"""The recipes' shared steps: the run's tokenizer follows the data section."""

from __future__ import annotations

import torch

from fullrank.recipes.config import load_experiment
from fullrank.recipes.run import prepare_tokenizer
from fullrank.training.distributed import DistInfo

ONE = DistInfo(rank=0, world=1, local_rank=0, device=torch.device("cpu"))


def test_data_lowercase_reaches_the_tokenizer(tmp_path):
    (tmp_path / "train.txt").write_text("Ein Mann fährt Rad.\nZwei Hunde spielen im Schnee.\n" * 5)
    cfg = tmp_path / "lm.yaml"
    cfg.write_text(
        f"name: lc\ntask: lm\nmodel: {{d_model: 8, n_heads: 2, d_ff: 16, n_layers: 1,"
        f" seq_len: 4}}\ndata: {{root: {tmp_path}, train: train.txt, tokenizer: bpe,"
        f" vocab_size: 60}}\n"
    )
    for lowercase, expected in ((None, "Ein Mann"), (True, "ein mann")):
        exp = load_experiment(cfg, [f"data.lowercase={'null' if lowercase is None else 'true'}"])
        run = tmp_path / f"run_{lowercase}"
        tok = prepare_tokenizer(exp.data, lambda: [tmp_path / "train.txt"], run, ONE, resuming=False)
        assert tok.decode(tok.encode("Ein Mann")) == expected
        assert (run / "tokenizer.json").is_file()
