"""bench/scaling.py: its cost model, and a sweep end to end at toy sizes."""

from __future__ import annotations

import json

import pytest

from tests.helpers import bench_module


@pytest.fixture(scope="module")
def scaling():
    return bench_module("scaling")


def test_cost_model_grows_as_theory_says(scaling):
    """Attention O(n²·h·d_head), projections O(n·d·h·d_head) (plus the feed-forward and vocabulary,
    linear in n): doubling n doubles the projections and quadruples attention."""
    base = scaling.BASE
    f1, f2 = scaling.flops({**base, "seq": 512}), scaling.flops({**base, "seq": 1024})
    assert f2["attention"] == 4 * f1["attention"] and f2["projections"] == 2 * f1["projections"]
    h1, h2 = scaling.flops({**base, "heads": 8}), scaling.flops({**base, "heads": 16})
    assert h2["attention"] == 2 * h1["attention"]
    # 12·L·n²·h·d_head: forward q·kᵀ and p·v, 2 FLOPs per multiply-add, backward twice the forward
    assert h1["attention"] == 12 * base["layers"] * base["seq"] ** 2 * 8 * base["d_head"]


@pytest.mark.slow
def test_a_toy_sweep_writes_table_json_and_plot(scaling, tmp_path):
    assert (
        scaling.main(
            [
                "--lengths",
                "32",
                "64",
                "--heads",
                "2",
                "4",
                "--steps",
                "1",
                "--threads",
                "1",
                "--out",
                str(tmp_path),
            ]
        )
        == 0
    )
    res = json.loads((tmp_path / "scaling.json").read_text())
    assert [r["seq"] for r in res["by_n"]] == [32, 64] and [r["heads"] for r in res["by_heads"]] == [2, 4]
    assert all(r["step_ms"] > 0 and r["step_rss_mb"] >= 0 for r in res["by_n"] + res["by_heads"])
    assert (tmp_path / "scaling.md").read_text().count("\n| n |") == 2
    assert (tmp_path / "scaling.png").stat().st_size > 10_000
