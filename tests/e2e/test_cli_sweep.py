"""`fullrank sweep` end to end: a toy sweep runs, is killed mid-way, runs again and trains only
the missing points; its summary is the mean ± std of the points' own results; submitit's local
executor runs points as jobs; `fullrank grid` is the same mechanism."""

from __future__ import annotations

import csv
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fullrank.cli import main
from tests.e2e.lm_fixture import tiny_experiment

FULLRANK = [sys.executable, "-m", "fullrank"]
TOY = """
name: toy
base: tiny.yaml
seeds: [0, 1]
axes:
  model.n_heads: [2]
arms:
  fixed: {model.d_head: 5, model.d_value: null}
  standard: {model.d_head: null, model.d_value: null}
match: {target: fixed, solve_for: model.d_ff, tolerance: 0.05}
"""
POINTS = ["fixed-n_heads2-s0", "fixed-n_heads2-s1", "standard-n_heads2-s0", "standard-n_heads2-s1"]


def toy(tmp_path: Path, text: str = TOY) -> Path:
    tiny_experiment(tmp_path, steps=6, save_every=2, extra="")
    (tmp_path / "sweep.yaml").write_text(text, encoding="utf-8")
    return tmp_path / "sweep.yaml"


@pytest.mark.slow
def test_killed_sweep_reruns_only_the_missing_points_and_aggregates_them(tmp_path):
    sweep, out = toy(tmp_path), tmp_path / "out"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    # its own process group, so that the kill takes the running point with it
    proc = subprocess.Popen(
        [*FULLRANK, "sweep", str(sweep), "--out", str(out), "--quiet"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
        start_new_session=True,
    )
    deadline = time.time() + 300
    while time.time() < deadline and not (out / POINTS[1] / "checkpoints" / "latest").exists():
        time.sleep(0.1)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    first = out / POINTS[0] / "results.json"
    assert first.is_file() and not (out / POINTS[1] / "results.json").exists()
    before = first.stat().st_mtime_ns
    ckpts = sorted(p.name for p in (out / POINTS[0] / "checkpoints").iterdir())

    again = subprocess.run(
        [*FULLRANK, "sweep", str(sweep), "--out", str(out), "--quiet"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert again.returncode == 0, again.stderr[-2000:]
    assert "3 trained now, 1 finished before, 0 failed" in again.stdout
    assert first.stat().st_mtime_ns == before  # the finished point was not touched
    assert sorted(p.name for p in (out / POINTS[0] / "checkpoints").iterdir()) == ckpts
    assert "resuming from" in (out / POINTS[1] / "train.log").read_text()  # it continued

    results = {p: json.loads((out / p / "results.json").read_text()) for p in POINTS}
    with open(out / "summary.csv", encoding="utf-8") as f:
        rows = {r["point"]: r for r in csv.DictReader(f)}
    for group in ("fixed-n_heads2", "standard-n_heads2"):
        ppl = [results[f"{group}-s{s}"]["valid"]["ppl"] for s in (0, 1)]
        assert float(rows[group]["valid_ppl_mean"]) == pytest.approx(statistics.fmean(ppl), rel=1e-12)
        assert float(rows[group]["valid_ppl_std"]) == pytest.approx(statistics.stdev(ppl), rel=1e-12)
        assert rows[group]["n"] == "2" and int(rows[group]["params"]) == results[f"{group}-s0"]["params"]
    md = (out / "summary.md").read_text()
    mean, std = statistics.fmean(ppl), statistics.stdev(ppl)
    assert f"{mean:.2f} ± {std:.2f} (2)" in md
    for png in ("valid_ppl_vs_params.png", "valid_ppl_vs_d_head.png"):
        assert (out / png).stat().st_size > 10_000

    # --report re-aggregates without training; a third run trains nothing
    assert main(["sweep", str(sweep), "--out", str(out), "--report"]) == 0
    assert (out / "summary.md").read_text() == md


@pytest.mark.slow
def test_a_failed_point_is_reported_and_the_others_go_on(tmp_path, capsys):
    text = TOY.replace("seeds: [0, 1]", "seeds: [0]").replace(
        "  standard:", "  broken: {data.valid: missing.txt}\n  standard:"
    )
    text = text.replace("match: {", "match: {arms: [standard], ")
    sweep = toy(tmp_path, text)
    assert main(["sweep", str(sweep), "--out", str(tmp_path / "out"), "--jobs", "2", "--quiet"]) == 1
    out = capsys.readouterr().out
    assert "failed broken-n_heads2-s0 (exit 2: fullrank train: error:" in out and "missing.txt" in out
    assert "2 trained now, 0 finished before, 1 failed" in out
    assert (tmp_path / "out" / "fixed-n_heads2-s0" / "results.json").is_file()


@pytest.mark.slow
def test_submitit_local_executor_runs_each_point_as_a_job(tmp_path, capsys):
    sweep = toy(tmp_path, TOY.replace("seeds: [0, 1]", "seeds: [3]"))
    assert (
        main(
            [
                "sweep",
                str(sweep),
                "--out",
                str(tmp_path / "out"),
                "--executor",
                "submitit-local",
                "--submitit",
                "timeout_min=10",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "submitted 2 points through submitit (local)" in out
    assert "2 trained now" in out
    for p in ("fixed-n_heads2-s3", "standard-n_heads2-s3"):
        assert json.loads((tmp_path / "out" / p / "results.json").read_text())["steps"] == 6
    assert any((tmp_path / "out" / ".submitit").iterdir())


def test_commands_are_plain_fullrank_train_lines(tmp_path, capsys):
    sweep = toy(tmp_path)
    assert main(["sweep", str(sweep), "--out", str(tmp_path / "out"), "--commands"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 4 and all(x.startswith("fullrank train ") for x in lines)
    assert "name=standard-n_heads2-s1" in lines[3] and "resume=auto" in lines[3]
    assert (tmp_path / "out" / "sweep.json").is_file()  # the tokenizer the lines name is there


@pytest.mark.slow
def test_grid_is_a_sweep_of_table3_rows(tmp_path, capsys, monkeypatch):
    from tests.e2e.test_cli_translate import write_corpus

    write_corpus(tmp_path, (("train", 300, 0), ("val", 20, 1)))
    (tmp_path / "base.yaml").write_text(f"""
name: g_base
task: mt
model: {{d_model: 24, n_heads: 2, d_ff: 32, n_layers: 1, n_decoder_layers: 1, max_len: 64,
         seq_len: 8, dropout: 0.0}}
data: {{root: {tmp_path}, train: train, valid: val, src_lang: en, tgt_lang: de,
        tokenizer: bpe, vocab_size: 60, max_tokens: 256, max_sentence_len: 20,
        cache_dir: {tmp_path / "cache"}}}
train: {{steps: 50, lr: 2.0, schedule: noam, warmup: 4, eval_every: 50, save_every: 50,
         log_every: 50, threads: 1}}
decode: {{beam: 2, average_last: 0, splits: [valid]}}
""")
    (tmp_path / "grid.yaml").write_text("""
name: grid
base: base.yaml
arms:
  base: {}
  A_h1: {model.n_heads: 1}
  A_h4: {model.n_heads: 4}
reference:
  A_h1: {paper_BLEU: 24.9}
""")
    out = tmp_path / "table"
    # a KEY=VALUE after --rows is an override, not a row
    assert (
        main(
            [
                "grid",
                str(tmp_path / "grid.yaml"),
                "--rows",
                "A",
                "train.steps=4",
                "--out",
                str(out),
                "--quiet",
            ]
        )
        == 0
    )
    with open(out / "summary.csv", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert [r["point"] for r in rows] == ["A_h1", "A_h4"]
    assert [r["d_head"] for r in rows] == ["24", "6"] and rows[0]["paper_BLEU"] == "24.9"
    assert all(float(r["valid_ppl_mean"]) > 1 and r["valid_bleu_mean"] != "" for r in rows)
    assert main(["grid", str(tmp_path), "--rows", "A"]) == 2
    assert "takes a sweep file" in capsys.readouterr().err
    assert main(["grid", str(tmp_path / "grid.yaml"), "--rows", "Z", "--out", str(out)]) == 2
    assert "no arm 'Z'" in capsys.readouterr().err
    assert main(["sweep", str(tmp_path / "grid.yaml"), "--out", str(out), "--arms", "A", "train.lr=0.1"]) == 2
    assert "'train.lr=0.1' is an override; put KEY=VALUE overrides before --arms" in capsys.readouterr().err


def _files(root: Path) -> dict[str, bytes | None]:
    """Every path under ``root`` with a file's bytes (``None`` for a folder)."""
    return {str(p.relative_to(root)): p.read_bytes() if p.is_file() else None for p in root.rglob("*")}


def _other_folder(tmp_path: Path) -> list[str]:
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "thesis.tex").write_text("keep me")
    return ["--out", str(tmp_path / "other")]


def _run_checkpoints(tmp_path: Path) -> list[str]:
    run = tmp_path / "runs" / "tiny"
    (run / "checkpoints").mkdir(parents=True)
    (run / "config.yaml").write_text("name: tiny\n")
    return ["--out", str(run / "checkpoints")]


def _another_sweep(tmp_path: Path) -> list[str]:
    from fullrank.sweeps.plan import FORMAT, MANIFEST

    (tmp_path / "swtiny").mkdir()
    record = {"format": FORMAT, "sweep": "swtiny", "points": {}}
    (tmp_path / "swtiny" / MANIFEST).write_text(json.dumps(record))
    return ["--out", str(tmp_path / "swtiny")]


def _other_settings(tmp_path: Path) -> list[str]:
    from fullrank.sweeps.plan import claim_output, load_sweep, plan

    out = tmp_path / "out"
    the_plan = plan(load_sweep(tmp_path / "sweep.yaml"), out)
    claim_output(the_plan, out)
    (out / POINTS[0]).mkdir()  # a point trained with the sweep's own settings
    return ["--out", str(out), "train.lr=0.01"]


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        (_other_folder, "already exists and is not a sweep's output folder"),
        (_run_checkpoints, "is the run"),
        (_another_sweep, "holds sweep 'swtiny', not 'toy'"),
        (_other_settings, "was trained with other settings (train.lr="),
    ],
)
def test_dry_run_refuses_what_the_run_refuses(tmp_path, capsys, make, expected):
    sweep = toy(tmp_path)
    args = make(tmp_path)
    before = _files(tmp_path)
    assert main(["sweep", str(sweep), "--dry-run", *args]) == 2
    dry = capsys.readouterr().err.strip().splitlines()
    assert len(dry) == 1 and expected in dry[0], dry
    assert _files(tmp_path) == before  # the dry run created and wrote nothing
    assert main(["sweep", str(sweep), *args]) == 2
    assert capsys.readouterr().err.strip().splitlines() == dry  # the run refuses with the same line
    assert _files(tmp_path) == before


def test_dry_run_passes_on_the_sweeps_own_folder(tmp_path, capsys):
    sweep = toy(tmp_path)
    args = _other_settings(tmp_path)[:-1]  # the same settings as the points trained there
    before = _files(tmp_path)
    assert main(["sweep", str(sweep), "--dry-run", *args]) == 0
    assert "fixed-n_heads2" in capsys.readouterr().out
    assert _files(tmp_path) == before


def test_dry_run_checks_each_points_train_freeze_against_its_model(tmp_path, capsys):
    sweep = toy(tmp_path)
    before = _files(tmp_path)
    assert main(["sweep", str(sweep), "--dry-run", "train.freeze=[embed.*, layers.1.*]"]) == 0
    capsys.readouterr()
    assert main(["sweep", str(sweep), "--dry-run", "train.freeze=[layers.2.*]"]) == 2
    err = capsys.readouterr().err.strip()
    assert "point fixed-n_heads2-s0: train.freeze: 'layers.2.*' matches no parameter" in err
    assert err.count("\n") == 0 and _files(tmp_path) == before
