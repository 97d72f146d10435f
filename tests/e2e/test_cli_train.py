"""`fullrank train / eval / generate / plot` end to end, exact resume after SIGKILL, and DDP."""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from fullrank.cli import main
from tests.e2e.lm_fixture import tiny_experiment

FULLRANK = [sys.executable, "-m", "fullrank"]


def test_train_eval_generate_plot(tmp_path, capsys):
    cfg = tiny_experiment(tmp_path)
    assert main(["train", str(cfg), "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "valid: loss" in out and "sample" in out
    run = tmp_path / "runs" / "tiny"
    for name in (
        "config.yaml",
        "tokenizer.json",
        "metrics.jsonl",
        "curves.png",
        "sample.txt",
        "results.json",
        "checkpoints/latest",
        "tb",
    ):
        assert (run / name).exists(), name
    results = json.loads((run / "results.json").read_text())
    records = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert {r["split"] for r in records} == {"train", "valid"}
    assert [r["step"] for r in records if r["split"] == "train"] == [2, 4, 6, 8, 10, 12]

    assert main(["eval", str(run), "--data", str(tmp_path / "valid.txt")]) == 0
    line = capsys.readouterr().out
    assert f"perplexity {results['valid']['ppl']:.2f}" in line  # the same exact evaluation

    assert (
        main(["generate", str(run), "--prompt", "KING", "--max-new-tokens", "30", "--temperature", "0"]) == 0
    )
    text = capsys.readouterr().out
    # 30 new tokens; an undertrained model may pick special tokens, which decoding drops
    assert text.startswith("KING") and 4 < len(text.rstrip("\n")) <= 34
    assert main(["plot", str(run), "-o", str(tmp_path / "c.png")]) == 0
    assert (tmp_path / "c.png").stat().st_size > 10_000

    # a second run into the same directory without --resume is refused: nothing is overwritten
    assert main(["train", str(cfg), "--quiet"]) == 2
    assert "already holds a checkpoint" in capsys.readouterr().err
    # resume=auto on a finished run: nothing more to train, reports again, and logs nothing (no
    # new TensorBoard events file)
    events = sorted((run / "tb").iterdir())
    assert main(["train", str(cfg), "--quiet", "resume=auto"]) == 0
    assert sorted((run / "tb").iterdir()) == events


def test_bad_inputs_are_one_line_errors(tmp_path, capsys):
    cfg = tiny_experiment(tmp_path)
    assert main(["train", str(cfg), "data.train=missing.txt"]) == 2
    err = capsys.readouterr().err.strip()
    assert "missing.txt" in err and err.count("\n") == 0
    (tmp_path / "empty.txt").write_text("")
    assert main(["train", str(cfg), "data.train=empty.txt"]) == 2
    assert "empty" in capsys.readouterr().err
    (tmp_path / "short.txt").write_text("abc\n")
    assert main(["train", str(cfg), "data.train=short.txt", "name=short"]) == 2
    err = capsys.readouterr().err
    assert "shorter than one block" in err and "17" in err
    (tmp_path / "bad.txt").write_bytes(b"good line\nbad \xff\xfe line\n")
    assert main(["train", str(cfg), "data.train=bad.txt", "name=bad"]) == 2
    err = capsys.readouterr().err
    assert "bad.txt:2" in err and "UTF-8" in err
    assert main(["train", str(cfg), "--resume", "name=never_ran"]) == 2
    assert "nothing to resume" in capsys.readouterr().err
    assert main(["train", str(cfg), "train.stepz=3"]) == 2
    assert "did you mean 'steps'" in capsys.readouterr().err
    assert main(["eval", str(tmp_path / "nowhere"), "--data", str(cfg)]) == 2
    assert "no such checkpoint" in capsys.readouterr().err


def final_weights(run: Path) -> dict:
    ckpt = run / "checkpoints" / (run / "checkpoints" / "latest").read_text().strip()
    return load_file(str(ckpt / "model.safetensors"))


def test_train_freeze_holds_the_named_parameters_of_a_model_it_trains_on(tmp_path, capsys):
    cfg = tiny_experiment(tmp_path, steps=4, save_every=4)
    assert main(["train", str(cfg), "--quiet"]) == 0
    start = final_weights(tmp_path / "runs" / "tiny")
    on = [
        "name=cont",
        f"train.init_from={tmp_path / 'runs' / 'tiny'}",
        "train.freeze=[embed.*, layers.1.ffn.*]",
    ]
    assert main(["train", str(cfg), *on]) == 0
    out = capsys.readouterr().out
    assert "frozen (embed.*, layers.1.ffn.*): 5 tensors," in out and "parameters held at their start" in out
    trained = final_weights(tmp_path / "runs" / "cont")
    for name, value in trained.items():
        held = name.startswith(("embed.", "layers.1.ffn."))
        assert torch.equal(value, start[name]) == held, name
    assert main(["train", str(cfg), "name=bad", "train.freeze=[encoder.*]"]) == 2
    err = capsys.readouterr().err.strip()
    assert "train.freeze: 'encoder.*' matches no parameter" in err and err.count("\n") == 0
    assert not (tmp_path / "runs" / "bad").exists()


@pytest.mark.slow
def test_sigkill_at_a_random_step_then_resume_is_bitwise_identical(tmp_path):
    steps = 30
    straight_dir, killed_dir = tmp_path / "a", tmp_path / "b"
    straight_dir.mkdir(), killed_dir.mkdir()
    subprocess.run(
        [*FULLRANK, "train", str(tiny_experiment(straight_dir, steps=steps, save_every=3)), "--quiet"],
        check=True,
        capture_output=True,
    )
    cfg = tiny_experiment(killed_dir, steps=steps, save_every=3)
    kill_after = random.Random().randint(4, steps - 6)
    proc = subprocess.Popen(
        [*FULLRANK, "train", str(cfg), "--quiet"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    metrics = killed_dir / "runs" / "tiny" / "metrics.jsonl"
    deadline = time.time() + 120
    while time.time() < deadline:
        done = [json.loads(x)["step"] for x in metrics.read_text().splitlines()] if metrics.exists() else []
        if done and max(done) >= kill_after:
            break
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL
    subprocess.run([*FULLRANK, "train", str(cfg), "--quiet", "--resume"], check=True, capture_output=True)
    a, b = final_weights(straight_dir / "runs" / "tiny"), final_weights(killed_dir / "runs" / "tiny")
    assert a.keys() == b.keys()
    for k in a:
        assert (a[k] == b[k]).all(), f"{k} differs after resuming from a kill at step {kill_after}"


@pytest.mark.slow
@pytest.mark.distributed
def test_two_processes_match_one_with_the_same_global_batch(tmp_path):
    torchrun = shutil.which("torchrun", path=str(Path(sys.executable).parent))
    if torchrun is None:
        pytest.skip("torchrun is not installed next to this Python")
    one, two = tmp_path / "one", tmp_path / "two"
    one.mkdir(), two.mkdir()
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    # eps=1 keeps Adam's update linear in the gradient (with 1e-9 a zero gradient's rounding
    # noise, e.g. the key bias's, becomes a full ±lr step); batch 4 = 2 ranks × 2 rows
    # on the CPU (gloo) even where a GPU is present: two processes, one device each
    args = ["--quiet", "train.eps=1.0", "train.device=cpu"]
    subprocess.run(
        [*FULLRANK, "train", str(tiny_experiment(one, steps=6, dropout=0.0)), *args],
        check=True,
        capture_output=True,
        env=env,
    )
    # --standalone: torchrun picks a free port itself (a fixed one can be taken on a busy machine)
    ddp = subprocess.run(
        [
            torchrun,
            "--standalone",
            "--nproc_per_node=2",
            "-m",
            "fullrank",
            "train",
            str(tiny_experiment(two, steps=6, dropout=0.0)),
            *args,
        ],
        capture_output=True,
        text=True,
        env=env,
    )
    assert ddp.returncode == 0, ddp.stderr[-3000:]
    a, b = final_weights(one / "runs" / "tiny"), final_weights(two / "runs" / "tiny")
    for k in a:
        assert (a[k] - b[k]).abs().max() < 1e-5, k
    # the log and results.json say how the batch was shared out
    assert "data parallel: world size 2 · 2 sequences per rank × 2 ranks = global batch 4" in ddp.stdout
    shared = [
        json.loads((d / "runs" / "tiny" / "results.json").read_text())["extra"]["parallel"]
        for d in (one, two)
    ]
    assert [(p["world_size"], p["batch_per_rank"], p["global_batch"]) for p in shared] == [
        (1, 4, 4),
        (2, 2, 4),
    ]
    # the logged metrics mean the same: the train loss over both ranks' rows (the global
    # batch), the periodic validation on the same rows as one process
    logged = [
        [json.loads(x) for x in (d / "runs" / "tiny" / "metrics.jsonl").read_text().splitlines()]
        for d in (one, two)
    ]
    assert [(r["split"], r["step"]) for r in logged[0]] == [(r["split"], r["step"]) for r in logged[1]]
    for r1, r2 in zip(*logged):
        assert abs(r1["loss"] - r2["loss"]) < 1e-5, (r1, r2)


@pytest.mark.slow
@pytest.mark.distributed
def test_a_batch_that_does_not_split_across_ranks_is_one_line_from_rank_0(tmp_path):
    torchrun = shutil.which("torchrun", path=str(Path(sys.executable).parent))
    if torchrun is None:
        pytest.skip("torchrun is not installed next to this Python")
    cfg = tiny_experiment(tmp_path, steps=4, batch_size=5)
    ddp = subprocess.run(
        [
            torchrun,
            "--standalone",
            "--nproc_per_node=2",
            "-m",
            "fullrank",
            "train",
            str(cfg),
            "--quiet",
            "train.device=cpu",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert ddp.returncode != 0
    ours = [line for line in ddp.stderr.splitlines() if line.startswith("fullrank train")]
    assert ours == [
        "fullrank train: error: batch_size = 5 is not divisible by the world size 2; "
        "choose a train.batch_size that is a multiple of the number of processes"
    ]
    # no rank printed a traceback (torchrun's own report of the failed workers follows)
    frames = [line for line in ddp.stderr.splitlines() if line.strip().startswith("File ")]
    assert not [f for f in frames if "fullrank" in f], ddp.stderr
    assert not (tmp_path / "runs").exists()  # nothing was written


def test_resume_with_other_data_is_refused_and_changes_nothing(tmp_path, capsys):
    cfg = tiny_experiment(tmp_path, steps=2, save_every=2)
    assert main(["train", str(cfg), "--quiet"]) == 0
    run = tmp_path / "runs" / "tiny"
    (tmp_path / "other.txt").write_text((tmp_path / "train.txt").read_text()[::-1])
    before = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    for change in (["data.train=other.txt"], ["data.tokenizer=word"]):
        for resume in (["resume=auto"], ["--resume"]):
            capsys.readouterr()
            assert main(["train", str(cfg), "--quiet", "train.steps=4", *change, *resume]) == 2
            err = capsys.readouterr().err.strip().splitlines()
            key = change[0].split("=")[0]
            assert len(err) == 1 and f"cannot resume with {key}=" in err[0], err
            assert "config.yaml" in err[0] and "choose a new name= or out_dir=" in err[0]
            assert {p: p.read_bytes() for p in run.rglob("*") if p.is_file()} == before

    # what a resume legitimately changes: the length, the time budget, intervals, threads, caches,
    # and the folder the same data files moved to
    moved = tmp_path / "moved"
    moved.mkdir()
    for f in tmp_path.glob("*.txt"):
        (moved / f.name).write_bytes(f.read_bytes())
    longer = [
        f"data.root={moved}",
        "train.steps=4",
        "train.max_minutes=30",
        "train.log_every=1",
        "train.eval_every=3",
        "train.save_every=4",
        "train.threads=2",
        f"data.cache_dir={tmp_path / 'cache2'}",
    ]
    assert main(["train", str(cfg), "--quiet", "resume=auto", *longer]) == 0
    assert "resuming from step-00000002" in capsys.readouterr().out
    assert json.loads((run / "results.json").read_text())["steps"] == 4


def test_a_new_run_that_cannot_start_leaves_nothing_behind(tmp_path, capsys):
    cfg = tiny_experiment(tmp_path, steps=2, save_every=2)
    assert main(["train", str(cfg), "--quiet", "data.valid=missing.txt"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "missing.txt" in err[0]
    assert not (tmp_path / "runs").exists()  # neither the run's folder nor the tokenizer in it
    # nor when what stops it comes after the model is built, when its batches are made
    assert main(["train", str(cfg), "--quiet", "train.batch_size=100000000"]) == 2
    assert "fewer than batch_size" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()
    # a run that exists is left as it was
    assert main(["train", str(cfg), "--quiet"]) == 0
    run = tmp_path / "runs" / "tiny"
    before = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    assert main(["train", str(cfg), "--quiet", "name=tiny", "data.valid=missing.txt", "resume=auto"]) == 2
    assert {p: p.read_bytes() for p in run.rglob("*") if p.is_file()} == before
