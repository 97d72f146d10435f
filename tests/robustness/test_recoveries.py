"""Damage that fullrank recovers from by design: resuming past an unreadable newest checkpoint,
old checkpoints without checksums, ``--overwrite`` of a fullrank checkpoint, and a diverged
run whose last good checkpoint stays ``latest``."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from fullrank.cli import main
from fullrank.training.checkpoints import latest_checkpoint, load_checkpoint
from tests.robustness.conftest import assert_kept, snapshot
from tests.robustness.damage import META, MODEL, edit_meta, truncate


def test_resume_passes_over_a_truncated_checkpoint_and_removes_temporaries(sandbox, capsys):
    checkpoints = sandbox.run / "checkpoints"
    truncate(sandbox.newest / MODEL)
    (checkpoints / ".step-00000006.tmp-4242").mkdir()  # a save killed half-way
    (checkpoints / ".latest.tmp-4242").write_text("step-0000")
    assert main(["train", str(sandbox.config), "--resume", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "warning: step-00000004 cannot be resumed from: " in out
    assert "resuming from step-00000002, the newest readable checkpoint" in out
    assert "removed 2 temporary file(s) left by a save that was killed" in out
    assert not list(checkpoints.glob(".*"))
    # the run went on from step 2; step 4 was written again, whole
    last = latest_checkpoint(checkpoints)
    assert last is not None and last.name == "step-00000006"
    assert main(["verify", str(sandbox.run)]) == 0
    assert capsys.readouterr().out.count(": ok — ") == 4  # three checkpoints and latest


def test_resume_drops_a_metrics_record_torn_by_a_kill(sandbox, capsys):
    with open(sandbox.run / "metrics.jsonl", "a") as f:
        f.write('{"step": 5, "split": "tr')
    assert main(["train", str(sandbox.config), "--resume", "--quiet"]) == 0
    records = [json.loads(x) for x in (sandbox.run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if r["split"] == "train"] == [2, 4, 6]
    assert main(["plot", str(sandbox.run), "-o", str(sandbox.root / "curves.png")]) == 0


def test_train_resume_from_names_the_checkpoint(sandbox, capsys):
    assert (
        main(["train", str(sandbox.config), "--quiet", "train.steps=4", f"train.resume_from={sandbox.older}"])
        == 0
    )
    meta = json.loads((sandbox.newest / META).read_text())
    assert meta["loop"]["step"] == 4 and meta["train"]["resume_from"] == str(sandbox.older)


def test_a_checkpoint_without_checksums_loads_and_verify_says_so(sandbox, capsys):
    edit_meta(sandbox.newest, lambda m: m.pop("files"))
    assert main(["generate", str(sandbox.run), "--max-new-tokens", "3"]) == 0
    assert main(["verify", str(sandbox.newest)]) == 0
    assert "ok — no checksums recorded" in capsys.readouterr().out


@pytest.mark.parametrize(
    "recorded", [True, False], ids=["files recorded", "written before files were recorded"]
)
def test_overwrite_replaces_a_fullrank_checkpoint_and_nothing_else(sandbox, capsys, recorded):
    target = sandbox.root / "averaged"
    shutil.copytree(sandbox.older, target)
    if not recorded:
        edit_meta(target, lambda m: m.pop("files"), seal=False)
    before = {k: v for k, v in snapshot(sandbox.root).items() if not k.startswith("averaged/")}
    assert main(["average", str(sandbox.run), "--last", "2", "-o", str(target), "--overwrite"]) == 0
    assert_kept(before, snapshot(sandbox.root))
    assert load_checkpoint(target).meta["averaged"] == [str(sandbox.older), str(sandbox.newest)]
    assert main(["verify", str(target)]) == 0


def test_a_diverged_run_keeps_its_last_good_checkpoint_as_latest(sandbox, capsys):
    assert (
        main(
            [
                "train",
                str(sandbox.config),
                "name=diverged",
                "--quiet",
                "train.lr=1e30",
                "train.schedule=constant",
                "train.warmup=0",
                "train.save_every=1",
            ]
        )
        == 2
    )
    checkpoints = sandbox.root / "runs" / "diverged" / "checkpoints"
    good = latest_checkpoint(checkpoints)
    assert good is not None and good.name == "step-00000001"
    assert sorted(p.name for p in checkpoints.iterdir()) == ["latest", "step-00000001"]
    assert all(torch.isfinite(p).all() for p in load_checkpoint(good).model.parameters())
