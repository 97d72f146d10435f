"""`fullrank grid`: a folder of experiment files → trained rows → one table; finished rows are
re-read, not retrained."""

from __future__ import annotations

import csv

import pytest

from fullrank.cli import main
from tests.e2e.test_cli_translate import write_corpus


def test_grid_trains_chosen_rows_and_tabulates(tmp_path, capsys):
    write_corpus(tmp_path, (("train", 300, 0), ("val", 20, 1)))
    grid = tmp_path / "grid"
    grid.mkdir()
    (grid / "base.yaml").write_text(f"""
name: g_base
task: mt
out_dir: {tmp_path / 'runs'}
model: {{d_model: 24, n_heads: 2, d_ff: 32, n_layers: 1, n_decoder_layers: 1, max_len: 64,
         seq_len: 8, dropout: 0.0}}
data: {{root: {tmp_path}, train: train, valid: val, src_lang: en, tgt_lang: de,
        tokenizer: bpe, vocab_size: 60, max_tokens: 256, max_sentence_len: 20,
        cache_dir: {tmp_path / 'cache'}}}
train: {{steps: 50, lr: 2.0, schedule: noam, warmup: 4, eval_every: 50, save_every: 50,
         log_every: 50, threads: 1}}
decode: {{beam: 2, average_last: 0, splits: [valid]}}
""")
    (grid / "A_h1.yaml").write_text("extends: base.yaml\nname: g_A_h1\nmodel: {n_heads: 1}\n")
    (grid / "A_h4.yaml").write_text("extends: base.yaml\nname: g_A_h4\nmodel: {n_heads: 4}\n")
    out = tmp_path / "table"

    # a KEY=VALUE after --rows is an override, not a row
    assert main(["grid", str(grid), "--rows", "A", "train.steps=4", "--out", str(out),
                 "--quiet"]) == 0
    with open(out / "table.csv", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert [r["row"] for r in rows] == ["A_h1", "A_h4"]
    assert [r["h"] for r in rows] == ["1", "4"] and [r["d_k"] for r in rows] == ["24", "6"]
    assert all(r["steps"] == "4" and float(r["dev_PPL"]) > 1 and r["dev_BLEU"] != "" for r in rows)
    assert rows[0]["paper_row"] == "A_h1" and rows[0]["paper_BLEU"] != ""
    assert "A_h1" in (out / "table.md").read_text()

    # finished rows are re-read: the same figures, no new checkpoint
    ckpts = sorted((tmp_path / "runs" / "g_A_h1" / "checkpoints").iterdir())
    capsys.readouterr()
    assert main(["grid", str(grid), "train.steps=4", "--rows", "A_h1", "base", "--out", str(out),
                 "--quiet"]) == 0
    with open(out / "table.csv", encoding="utf-8") as f:
        again = list(csv.DictReader(f))
    # every finished row of the folder is listed, chosen or not, in the paper's order
    assert [r["row"] for r in again] == ["base", "A_h1", "A_h4"] and again[1:] == rows
    assert sorted((tmp_path / "runs" / "g_A_h1" / "checkpoints").iterdir()) == ckpts

    assert main(["grid", str(grid), "--rows", "Z"]) == 2
    assert "no row 'Z'" in capsys.readouterr().err


def test_console_shows_only_the_settings_that_vary():
    from fullrank.cli.grid import console_columns
    from fullrank.recipes.grid import COLUMNS

    base = dict.fromkeys(COLUMNS, 1)
    lines = [{**base, "row": "A_h1", "h": 1, "d_k": 256}, {**base, "row": "A_h4", "h": 4, "d_k": 64}]
    assert console_columns(lines) == ["row", "h", "d_k", "params_M", "dev_PPL", "dev_BLEU",
                                      "paper_PPL", "paper_BLEU"]


def test_rows_come_in_the_papers_order(tmp_path):
    from fullrank.recipes.grid import grid_rows

    for name in ("big", "A_h16", "custom10", "A_h4", "base", "custom2", "B_dk8"):
        (tmp_path / f"{name}.yaml").write_text("")
    assert list(grid_rows(tmp_path)) == ["base", "A_h4", "A_h16", "B_dk8", "big", "custom2",
                                         "custom10"]


def test_rows_not_chosen_that_the_overrides_do_not_fit_are_left_out(tmp_path):
    from fullrank.errors import ConfigError
    from fullrank.recipes.grid import run_grid

    common = (f"task: mt\nout_dir: {tmp_path}\n"
              "data: {root: ., train: train, valid: val, src_lang: en, tgt_lang: de}\n")
    (tmp_path / "A_h1.yaml").write_text(common + "name: a\nmodel: {d_model: 8, n_heads: 1}\n")
    (tmp_path / "A_h4.yaml").write_text(common + "name: b\nmodel: {d_model: 9, n_heads: 3}\n")
    ran = []
    # n_heads 2 fits d_model 8 but not 9: the row not chosen is left out, the chosen one runs
    run_grid(tmp_path, ["A_h1"], ["model.n_heads=2"], ran.append, tmp_path / "out")
    assert [exp.name for exp in ran] == ["a"]
    with pytest.raises(ConfigError):  # a chosen row's own error is reported
        run_grid(tmp_path, ["A_h4"], ["model.n_heads=2"], ran.append, tmp_path / "out")
