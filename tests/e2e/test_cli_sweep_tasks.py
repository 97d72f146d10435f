"""`fullrank sweep` beyond language models: a parsing sweep counts its models before training and
scores its seeds alone and as an ensemble; a BERT sweep pre-trains, then fine-tunes each seed from
the pre-trained checkpoint (and from random weights), and tabulates each task in its own
figures."""

from __future__ import annotations

import json

import pytest

from fullrank.cli import main
from fullrank.sweeps.plan import load_sweep, plan
from fullrank.training.checkpoints import resolve
from tests.e2e.bert_fixture import write_configs
from tests.e2e.test_cli_parse import CONFIG, write_treebank

PARSE_SWEEP = """
name: parse_seeds
base: parse.yaml
seeds: [0, 1]
ensemble: true
set: {train.steps: 6, train.save_every: 3, decode.average_last: 2, decode.splits: [test]}
"""


@pytest.mark.slow
def test_a_parse_sweep_scores_each_seed_and_their_ensemble(tmp_path, capsys):
    write_treebank(tmp_path)
    (tmp_path / "parse.yaml").write_text(CONFIG.format(out=tmp_path / "runs", root=tmp_path))
    (tmp_path / "sweep.yaml").write_text(PARSE_SWEEP)
    out = tmp_path / "out"
    # counted before training, without a checkpoint: both vocabularies built as the run does
    the_plan = plan(load_sweep(tmp_path / "sweep.yaml"), out)
    assert not out.exists()
    assert main(["sweep", str(tmp_path / "sweep.yaml"), "--out", str(out), "--jobs", "2", "--quiet"]) == 0
    printed = capsys.readouterr().out
    runs = [out / p.name for p in the_plan.points]
    for p, run in zip(the_plan.points, runs):
        results = json.loads((run / "results.json").read_text())
        assert results["params"] == p.params
        assert results["extra"]["parse"]["test.avg2"]["all"]["f1"] >= 0
    ensemble = out / "ensembles" / "base-k2"
    record = json.loads((ensemble / "results.json").read_text())
    assert record["members"] == [p.name for p in the_plan.points]
    f1 = record["extra"]["parse"]["test.avg2"]["all"]["f1"]
    # the ensemble is `fullrank parse` of the runs' averaged models
    assert (
        main(
            [
                "parse",
                *(str(r / "averaged-last2") for r in runs),
                "-i",
                str(runs[0] / "data" / "test.words"),
                "-o",
                str(tmp_path / "both.trees"),
                "--beam",
                "4",
                "--alpha",
                "0.3",
                "--batch-size",
                "7",
            ]
        )
        == 0
    )
    assert (tmp_path / "both.trees").read_text() == (ensemble / "test.trees").read_text()
    md = (out / "summary.md").read_text()
    assert "## parse" in md and "| test F1 |" in md and "ensemble of 2: test F1" in md
    assert f"{f1:.4g}" in md and "ensemble of 2 (avg2) test: F1" in printed


@pytest.mark.slow
def test_a_bert_sweep_pretrains_then_fine_tunes_from_the_checkpoints(tmp_path, capsys):
    cfgs = write_configs(tmp_path, steps=4)
    (tmp_path / "sweep.yaml").write_text(f"""
name: bert_tables
base: {cfgs["bert"].name}
seeds: [0, 1]
axes:
  heads: [{{model.n_heads: 3}}, {{model.n_heads: 2, model.d_head: 12}}]
set: {{train.eval_every: 2, train.save_every: 2}}
arms:
  pre: {{seeds: [0]}}
  cls: {{base: {cfgs["classify"].name}, init_from: pre}}
  cls_scratch: {{base: {cfgs["classify"].name}, init_from: pre, train.init_weights: false, seeds: [0]}}
  qa: {{base: {cfgs["squad"].name}, init_from: pre, seeds: [0]}}
""")
    out = tmp_path / "out"
    assert main(["sweep", str(tmp_path / "sweep.yaml"), "--out", str(out), "--dry-run"]) == 0
    dry = capsys.readouterr().out
    assert "after" in dry and "pre-n_heads3" in dry and "classify" in dry
    the_plan = plan(load_sweep(tmp_path / "sweep.yaml"), out)
    assert main(["sweep", str(tmp_path / "sweep.yaml"), "--out", str(out), "--jobs", "2", "--quiet"]) == 0
    printed = capsys.readouterr().out
    assert "10 trained now, 0 finished before, 0 failed" in printed
    by = {p.name: p for p in the_plan.points}
    for name, p in by.items():
        results = json.loads((out / name / "results.json").read_text())
        assert results["params"] == p.params, name  # counted before any checkpoint existed
        if p.arm != "pre":
            assert p.after == name.split("-", 1)[1].rsplit("-s", 1)[0].join(["pre-", "-s0"])
            ckpt = out / name / "checkpoints" / "latest"
            step = ckpt.read_text().strip()
            info = json.loads((out / name / "checkpoints" / step / "meta.json").read_text())
            assert info["init_from"] == str(resolve(out / p.after))  # its latest checkpoint
            assert info["init_weights"] == (p.arm != "cls_scratch")
    md = (out / "summary.md").read_text()
    for heading, figure in (
        ("## bert", "validation MLM accuracy"),
        ("## classify", "validation accuracy"),
        ("## squad", "test F1"),
    ):
        assert heading in md and figure in md, (heading, md)
    assert "again accuracy" in md  # the evaluation-only set of the classification config
