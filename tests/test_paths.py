"""The output-path rule: new paths only, --overwrite for fullrank's own output, never ., .., an
input or a directory holding one."""

from __future__ import annotations

import pytest

from fullrank.errors import ConfigError
from fullrank.paths import check_output_dir, check_output_files


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


@pytest.mark.parametrize("out, message", [
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
])
def test_refusals(tree, out, message):
    with pytest.raises(ConfigError, match=message) as info:
        check_output_dir(out.format(t=tree), option="-o", inputs=[tree / "inputs" / "ckpt"],
                         within=[tree / "inputs" / "ckpt"], replaceable=ours, kind="a checkpoint")
    assert "\n" not in str(info.value)


def test_what_may_be_written(tree):
    kw = dict(option="-o", inputs=[tree / "inputs" / "ckpt"], replaceable=ours)
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
        check_output_files([tree / "file.txt"], option="-o", overwrite=True,
                           inputs=[tree / "file.txt"])
    with pytest.raises(ConfigError, match="which the command reads"):
        check_output_files([tree / "ours" / "x.png"], option="-o", within=[tree / "ours"])
