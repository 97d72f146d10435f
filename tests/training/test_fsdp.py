"""FSDP2 (``train.parallel=fsdp``) on two CPU processes (gloo): the same training as one process
to 1e-5, each rank holding about half the parameter and optimizer bytes, checkpoints that load in
one process, and an exact resume."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from safetensors.torch import load_file

from fullrank.training.checkpoints import latest_checkpoint, load_checkpoint

REPO = Path(__file__).resolve().parents[2]
WORKER = ["-m", "tests.training.fsdp_worker"]


def launch(out: Path, *args: str, processes: int = 1) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    if processes == 1:
        cmd = [sys.executable, *WORKER, str(out), *args]
    else:
        torchrun = shutil.which("torchrun", path=str(Path(sys.executable).parent))
        if torchrun is None:
            pytest.skip("torchrun is not installed next to this Python")
        cmd = [torchrun, "--standalone", f"--nproc_per_node={processes}", *WORKER, str(out), *args]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO)
    assert done.returncode == 0, done.stderr[-3000:]


def weights(run: Path) -> dict:
    latest = latest_checkpoint(run / "checkpoints")
    assert latest is not None
    return load_file(str(latest / "model.safetensors"))


@pytest.mark.slow
@pytest.mark.distributed
def test_fsdp_on_two_processes_matches_one_and_halves_the_bytes(tmp_path):
    one, fsdp, resumed = tmp_path / "one", tmp_path / "fsdp", tmp_path / "resumed"
    launch(one, "6", "ddp")
    launch(fsdp, "6", "fsdp", processes=2)
    a, b = weights(one), weights(fsdp)
    assert a.keys() == b.keys()
    for k in a:
        assert (a[k] - b[k]).abs().max() < 1e-5, k

    # each rank holds about half of the parameters and of the optimizer's moments
    full = json.loads((one / "bytes-rank0.json").read_text())
    for rank in (0, 1):
        part = json.loads((fsdp / f"bytes-rank{rank}.json").read_text())
        for kind in ("params", "optimizer"):
            assert 0.4 < part[kind] / full[kind] < 0.6, (rank, kind, part[kind], full[kind])
    # the validation the ranks ran together equals the single process's
    v_one = json.loads((one / "bytes-rank0.json").read_text())["valid"]
    v_fsdp = json.loads((fsdp / "bytes-rank0.json").read_text())["valid"]
    assert v_fsdp["loss"] == pytest.approx(v_one["loss"], abs=1e-5)

    # the checkpoint is whole: it loads in this single process, optimizer state included
    ckpt = load_checkpoint(fsdp)
    assert ckpt.meta["loop"]["step"] == 6 and ckpt.meta["optimizer"]["param_groups"]
    for k, t in ckpt.model.state_dict().items():
        assert (t - a[k]).abs().max() < 1e-5, k

    # stopped after step 3 and resumed on two processes: the same weights as straight through
    launch(resumed, "6", "fsdp", "3", processes=2)
    stopped = latest_checkpoint(resumed / "checkpoints")
    assert stopped is not None and stopped.name == "step-00000003"
    launch(resumed, "6", "fsdp", "--resume", processes=2)
    c = weights(resumed)
    for k in b:
        assert (b[k] == c[k]).all(), f"{k} differs after an FSDP resume"
