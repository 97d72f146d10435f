"""`fullrank heads / widen / attention` on trained checkpoints (a tiny LM and a tiny MT model)."""

from __future__ import annotations

import csv

import pytest
import torch

from fullrank.cli import main
from fullrank.training.checkpoints import load_checkpoint
from tests.e2e.lm_fixture import tiny_experiment
from tests.e2e.test_cli_translate import write_corpus


@pytest.fixture(scope="module")
def lm_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("lm")
    assert main(["train", str(tiny_experiment(tmp, steps=6, save_every=6)), "--quiet"]) == 0
    return tmp, tmp / "runs" / "tiny"


@pytest.fixture(scope="module")
def mt_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("mt")
    write_corpus(tmp, (("train", 300, 0), ("val", 20, 1)))
    cfg = tmp / "mt.yaml"
    cfg.write_text(f"""
name: mt
task: mt
out_dir: {tmp / "runs"}
model: {{d_model: 24, n_heads: 3, d_ff: 37, n_layers: 2, max_len: 64, seq_len: 8, dropout: 0.0}}
data: {{root: {tmp}, train: train, valid: val, src_lang: en, tgt_lang: de, tokenizer: bpe,
        vocab_size: 60, max_tokens: 256, cache_dir: {tmp / "cache"}}}
train: {{steps: 6, lr: 2.0, warmup: 3, eval_every: 6, save_every: 6, threads: 1}}
decode: {{average_last: 0, splits: []}}
""")
    assert main(["train", str(cfg), "--quiet"]) == 0
    return tmp, tmp / "runs" / "mt"


def test_heads_on_a_language_model(lm_run, capsys):
    tmp, run = lm_run
    out = tmp / "heads.png"
    assert (
        main(["heads", str(run), "--data", str(tmp / "valid.txt"), "--sequences", "3", "-o", str(out)]) == 0
    )
    printed = capsys.readouterr().out
    assert "logit rank" in printed and "6 of 6 heads have d_head < n" in printed
    rows = list(csv.DictReader(open(out.with_suffix(".csv"))))
    # the header (and the picture's title) state n as the table does: mean keys per sequence
    (n,) = {round(float(r["n_keys"]), 1) for r in rows}
    assert f"measured on 3 sequences, n = {n:.1f} keys per sequence on average" in printed
    assert len(rows) == 2 * 3  # layers × heads
    assert all(float(r["logit_rank"]) <= int(r["d_head"]) for r in rows)  # rank ≤ d_head = 10
    assert out.stat().st_size > 10_000


def test_widen_round_trip_keeps_outputs(lm_run, capsys):
    tmp, run = lm_run
    assert main(["widen", str(run), "--d-head", "16", "-o", str(tmp / "wide")]) == 0
    assert "10/6 → 16/6" in capsys.readouterr().out
    old, new = load_checkpoint(run), load_checkpoint(tmp / "wide")
    assert new.config.head_sizes == (16, 6)
    x = torch.randint(0, old.config.vocab_size, (3, 16))
    torch.testing.assert_close(new.model(x), old.model(x), atol=1e-5, rtol=1e-5)
    # the widened checkpoint trains on: its stored experiment names the new head size
    assert new.meta["experiment"]["model"]["d_head"] == 16
    assert main(["widen", str(run), "--d-head", "4", "-o", str(tmp / "narrow")]) == 2


def test_attention_maps_for_lm_and_mt(lm_run, mt_run, capsys):
    tmp, run = lm_run
    out = tmp / "att.png"
    assert main(["attention", str(run), "--text", "KING RICHARD:", "--query", "3", "-o", str(out)]) == 0
    assert out.stat().st_size > 5_000 and (tmp / "att-lines.png").stat().st_size > 5_000
    # a long text: the first --max-tokens tokens, the figure within a screen
    from PIL import Image

    text = "KING RICHARD: Now is the winter of our discontent, made glorious"
    assert main(["attention", str(run), "--text", text, "--max-tokens", "30", "-o", str(out)]) == 2
    assert "att.png: already exists; pass --overwrite" in capsys.readouterr().err
    assert (
        main(["attention", str(run), "--text", text, "--max-tokens", "30", "-o", str(out), "--overwrite"])
        == 0
    )
    width, height = Image.open(out).size
    assert width <= 1800 and height <= 1250
    assert (
        main(["attention", str(run), "--text", text, "--max-tokens", "-1", "-o", str(out), "--overwrite"])
        == 2
    )
    mtmp, mrun = mt_run
    for view in ("encoder", "decoder", "cross"):
        png = mtmp / f"{view}.png"
        assert (
            main(
                [
                    "attention",
                    str(mrun),
                    "--text",
                    "the big dog sees a cat",
                    "--view",
                    view,
                    "--layer",
                    "1",
                    "-o",
                    str(png),
                ]
            )
            == 0
        )
        assert png.stat().st_size > 5_000
    assert (
        main(["attention", str(mrun), "--text", "a dog", "--layer", "7", "-o", str(png), "--overwrite"]) == 2
    )
    assert "out of range" in capsys.readouterr().err


def test_heads_on_a_translation_model(mt_run, capsys):
    tmp, run = mt_run
    assert (
        main(
            [
                "heads",
                str(run),
                "--data",
                str(tmp / "val.en"),
                "--ref",
                str(tmp / "val.de"),
                "--sequences",
                "5",
                "-o",
                str(tmp / "h.png"),
            ]
        )
        == 0
    )
    rows = list(csv.DictReader(open(tmp / "h.csv")))
    names = {r["name"] for r in rows}
    assert {"encoder.0.self_attn", "decoder.1.self_attn", "decoder.1.cross_attn"} <= names


def test_info_reads_a_trained_run_as_its_checkpoint_holds_it(lm_run, capsys):
    import json

    _, run = lm_run
    params = json.loads((run / "results.json").read_text())["params"]
    assert main(["info", str(run), "--parameters"]) == 0
    out = capsys.readouterr().out
    assert f"{params:,}" in out and "d_head 10 (d_value 6)" in out and "layers.1.ffn.fc2.weight" in out
