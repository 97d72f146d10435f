"""bench/gpu.py: its FLOP count, and every section end to end at toy sizes on the CPU."""

from __future__ import annotations

import json

import pytest

from tests.helpers import bench_module


@pytest.fixture(scope="module")
def gpu():
    return bench_module("gpu")


def test_model_flops_per_token_is_palm_count_for_gpt2_small(gpu):
    """6·N + 12·L·d·n with N the parameters less the position table (nanoGPT's estimate_mfu)."""
    s = gpu.GPT2_SMALL
    params = 124_475_904  # GPT-2 small with vocabulary 50304, tied output
    expected = 6 * (params - 1024 * 768) + 12 * 12 * 768 * 1024
    assert gpu.model_flops_per_token(s, params) == expected == 855_383_040


def test_smoke_run_writes_every_section(gpu, tmp_path):
    pytest.importorskip("transformers")
    assert gpu.main(["--smoke", "--out", str(tmp_path), "--rounds", "1"]) == 0
    res = json.loads((tmp_path / "gpu-smoke.json").read_text())
    (lm,) = res["lm"]
    assert lm["impls"]["fullrank"]["params"] == lm["impls"]["hf"]["params"]  # same model
    assert all(x["step_ms"] > 0 for x in lm["impls"].values())
    assert [(r["n_heads"], r["d_head"]) for r in res["attention"]][-1] == (2, 512)
    assert all(r["kernels"]["fullrank"]["ok"] for r in res["attention"])
    assert {r["seq"] for r in res["long"]} == {32, 64}
    md = (tmp_path / "gpu-smoke.md").read_text()
    assert "| fullrank | 136,960 |" in md and "d_head 1024 as n grows" in md
