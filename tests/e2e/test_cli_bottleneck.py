"""``fullrank bottleneck`` and ``fullrank advise`` through the real entry point."""

from __future__ import annotations

import csv
import math

import pytest

from fullrank.cli import main


def test_rank_experiment_writes_csv_and_png(tmp_path, capsys):
    n = 6
    assert (
        main(
            [
                "bottleneck",
                "--n",
                str(n),
                "--d-model",
                "8",
                "--seeds",
                "1",
                "--d-heads",
                "1,2,4,5,6,8",
                "--restarts",
                "1",
                "--max-iter",
                "150",
                "--out",
                str(tmp_path),
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "d_head" in out and "exact" in out and "bounded" in out
    rows = list(csv.DictReader((tmp_path / "rank_experiment.csv").open()))
    assert [int(r["d_head"]) for r in rows] == [1, 2, 4, 5, 6, 8]
    for r in rows:
        best = float(r["best_max_abs"])
        if int(r["d_head"]) >= n - 1:  # zero from n − 1 (Theorem 1's construction from n)
            assert best < 1e-12 and not math.isnan(float(r["construction_max_abs"]))
        else:
            assert best > 1e-4 and math.isnan(float(r["construction_max_abs"]))
    assert (tmp_path / "rank_experiment.png").read_bytes()[:4] == b"\x89PNG"


def test_theorem1_prints_construction_and_counterexample(capsys):
    assert main(["bottleneck", "--theorem", "1"]) == 0
    out = capsys.readouterr().out
    assert "Counterexample" in out and "0.25 away" in out and "at most 0;" in out


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # torch.func.jacfwd uses torch.jit
def test_theorem2_table_small(capsys):
    assert (
        main(
            [
                "bottleneck",
                "--theorem",
                "2",
                "--configs",
                "4:2:4",
                "--n",
                "3",
                "--train-samples",
                "24",
                "--restarts",
                "2",
                "--max-iter",
                "30",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "shown" in out and "not shown" not in out and "4 × 1" in out and "4 × 2" in out


@pytest.mark.slow
def test_multihead_small(tmp_path, capsys):
    assert (
        main(
            [
                "bottleneck",
                "--multihead",
                "--d-model",
                "8",
                "--n",
                "4",
                "--heads",
                "4,3",
                "--restarts",
                "1",
                "--max-iter",
                "200",
                "--out",
                str(tmp_path),
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "cannot fit" in out and "h ∤ d_model" in out
    rows = list(csv.DictReader((tmp_path / "multihead.csv").open()))
    assert [r["n_heads"] for r in rows] == ["4", "3"]
    assert rows[0]["standard_fits"] == "False"  # 4 heads of 2 < n = 4
    assert (tmp_path / "multihead.png").read_bytes()[:4] == b"\x89PNG"


def test_bad_arguments_are_one_line_exit_2(capsys):
    assert main(["bottleneck", "--d-heads", "1,x"]) == 2
    assert main(["bottleneck", "--theorem", "2", "--configs", "8:4"]) == 2
    assert (
        main(["advise", "--d-model", "512", "--seq-len", "128", "--layers", "12", "--param-budget", "110Q"])
        == 2
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 3 and all(line.startswith("fullrank ") for line in err)
    assert "110Q" in err[2]


def test_advise_prints_rows(capsys):
    assert (
        main(["advise", "--d-model", "512", "--seq-len", "128", "--layers", "12", "--param-budget", "110M"])
        == 0
    )
    out = capsys.readouterr().out
    assert out.count("standard") >= 6 and out.count("fixed") >= 6
    assert "yes" in out and "d_ff" in out and "FLOPs/token" in out
