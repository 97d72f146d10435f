"""The output guard: new paths only, --overwrite for fullrank's own output, never ., .., an input
or a directory holding one, nothing inside a checkpoint or a run's records, a folder that takes a
file; and atomic writes."""

from __future__ import annotations

from typing import Any

import pytest

from fullrank.errors import ConfigError
from fullrank.paths import (
    atomic_path,
    check_output_dir,
    check_output_files,
    check_output_folder,
    write_text_atomic,
)


@pytest.fixture
def tree(tmp_path, monkeypatch):
    (tmp_path / "work").mkdir()
    (tmp_path / "inputs" / "ckpt").mkdir(parents=True)
    (tmp_path / "inputs" / "ckpt" / "meta.json").write_text("{}")
    (tmp_path / "theirs").mkdir()
    (tmp_path / "theirs" / "a.txt").write_text("a")
    (tmp_path / "ours").mkdir()
    (tmp_path / "ours" / "meta.json").write_text("{}")
    (tmp_path / "empty").mkdir()
    (tmp_path / "file.txt").write_text("f")
    monkeypatch.chdir(tmp_path / "work")
    return tmp_path


def ours(path):
    return (path / "meta.json").exists()


@pytest.mark.parametrize(
    "out, message",
    [
        (".", r"-o \.: is the working directory"),
        ("..", r"-o \.\.: is the working directory"),
        ("/", r"is the working directory"),
        ("~", r"the home directory"),
        ("{t}/inputs/ckpt", r"is the input"),
        ("{t}/inputs", r"contains the input"),
        ("{t}/inputs/ckpt/sub", r"is inside .*ckpt, which the command reads"),
        ("{t}/theirs", r"already exists and is not a checkpoint; name a new directory"),
        ("{t}/ours", r"already holds a checkpoint; pass --overwrite"),
        ("{t}/file.txt", r"is a file"),
    ],
)
def test_refusals(tree, out, message):
    with pytest.raises(ConfigError, match=message) as info:
        check_output_dir(
            out.format(t=tree),
            option="-o",
            inputs=[tree / "inputs" / "ckpt"],
            within=[tree / "inputs" / "ckpt"],
            replaceable=ours,
            kind="a checkpoint",
        )
    assert "\n" not in str(info.value)


def test_what_may_be_written(tree):
    kw: dict[str, Any] = dict(option="-o", inputs=[tree / "inputs" / "ckpt"], replaceable=ours)
    assert check_output_dir(tree / "new" / "deeper", **kw) == tree / "new" / "deeper"
    assert check_output_dir(tree / "empty", **kw) == tree / "empty"
    assert check_output_dir(tree / "ours", overwrite=True, **kw) == tree / "ours"
    with pytest.raises(ConfigError, match="is not"):
        check_output_dir(tree / "theirs", overwrite=True, **kw)  # never someone else's


def test_output_files(tree):
    check_output_files([tree / "new.png"], option="-o")
    check_output_files([tree / "file.txt"], option="-o", overwrite=True)
    with pytest.raises(ConfigError, match=r"already exists; pass --overwrite"):
        check_output_files([tree / "new.png", tree / "file.txt"], option="-o")
    with pytest.raises(ConfigError, match="is a directory"):
        check_output_files([tree / "theirs"], option="-o", overwrite=True)
    with pytest.raises(ConfigError, match="is \\(or contains\\) the input"):
        check_output_files([tree / "file.txt"], option="-o", overwrite=True, inputs=[tree / "file.txt"])
    with pytest.raises(ConfigError, match="which the command reads"):
        check_output_files([tree / "ours" / "x.png"], option="-o", within=[tree / "ours"])


@pytest.fixture
def run(tmp_path, monkeypatch):
    """A run directory as `fullrank train` leaves it, with an averaged checkpoint kept in it."""
    monkeypatch.chdir(tmp_path)
    root = tmp_path / "runs" / "tiny"
    for ckpt in (root / "checkpoints" / "step-00000002", root / "averaged-last2"):
        ckpt.mkdir(parents=True)
        (ckpt / "meta.json").write_text("{}")
        (ckpt / "model.safetensors").write_bytes(b"")
    (root / "checkpoints" / "latest").write_text("step-00000002")
    for name in ("config.yaml", "metrics.jsonl"):
        (root / name).write_text("")
    return root


@pytest.mark.parametrize(
    "target, message",
    [
        ("averaged-last2/meta.json", r"is inside the checkpoint .*averaged-last2"),
        ("averaged-last2/sub/x.txt", r"is inside the checkpoint"),
        ("checkpoints/step-00000002/x.png", r"is inside the checkpoint .*step-00000002"),
        ("checkpoints/x.png", r"is the run .*tiny's own 'checkpoints'"),
        ("config.yaml", r"is the run .*tiny's own 'config\.yaml'"),
        ("parses/test.trees", r"own 'parses'"),
    ],
)
def test_nothing_is_written_inside_a_checkpoint_or_a_run_record(run, target, message):
    for overwrite in (False, True):
        with pytest.raises(ConfigError, match=message):
            check_output_files([run / target], option="-o", overwrite=overwrite)
    with pytest.raises(ConfigError, match=message):
        check_output_dir(run / target, option="-o", overwrite=True, replaceable=lambda p: True)


def test_beside_a_runs_records_is_fine(run):
    check_output_files([run / "heads.png", run / "plots" / "a.png"], option="-o")
    (run / "heads.png").write_text("x")
    check_output_files([run / "heads.png"], option="-o", overwrite=True)
    assert check_output_dir(run / "averaged-last3", option="-o") == run / "averaged-last3"
    # a folder of one's own that merely holds a config.yaml is not a run
    (run.parent / "mine").mkdir()
    (run.parent / "mine" / "config.yaml").write_text("")
    check_output_files([run.parent / "mine" / "data" / "x.txt"], option="-o")


def test_the_folder_must_take_a_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "file.txt").write_text("f")
    with pytest.raises(ConfigError, match=r"file\.txt is a file, not a folder"):
        check_output_files([tmp_path / "file.txt" / "deeper" / "x.txt"], option="-o")
    refused = []

    def mkstemp(**kw):
        refused.append(kw["dir"])
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr("fullrank.paths.tempfile.mkstemp", mkstemp)
    with pytest.raises(ConfigError, match=r"cannot write in .* \(Permission denied\); choose"):
        check_output_files([tmp_path / "new" / "x.txt"], option="-o")
    with pytest.raises(ConfigError, match=r"-o .*out: cannot write in"):
        check_output_dir(tmp_path / "out", option="-o")
    with pytest.raises(ConfigError, match=r"--cache-dir .*cache: cannot write in"):
        check_output_folder(tmp_path / "cache", option="--cache-dir")
    assert refused == [tmp_path] * 3  # the nearest folder that exists


def test_atomic_path_renames_a_complete_file_and_leaves_nothing_on_failure(tmp_path):
    target = tmp_path / "out" / "trees.txt"
    with atomic_path(target) as tmp:
        assert tmp.parent == target.parent and tmp.suffix == ".txt" and not target.exists()
        tmp.write_text("new")
    assert target.read_text() == "new"
    with pytest.raises(RuntimeError), atomic_path(target) as tmp:
        tmp.write_text("half")
        raise RuntimeError("killed")
    assert target.read_text() == "new" and sorted(p.name for p in target.parent.iterdir()) == ["trees.txt"]
    write_text_atomic(target, "newer")
    assert target.read_text() == "newer"
