"""Bad input through the command line: every case is exit status 2, exactly one line on stderr,
no traceback — and every file that existed before the command is still there, unchanged.

Cases: output paths that would replace the user's files (or the command's own inputs),
truncated, garbled and crafted checkpoints, bad configs, bad data and text that is not UTF-8.
"""

from __future__ import annotations

import io
import os
import shutil
import stat
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from safetensors.torch import save as safetensors_save

from fullrank.cli import main
from tests.robustness.conftest import Sandbox, assert_kept, assert_one_line_error, snapshot
from tests.robustness.damage import (
    META,
    MODEL,
    STATE,
    TOKENIZER,
    edit_meta,
    flip_byte,
    rewrite,
    safetensors_bytes,
    truncate,
)
from tests.sweeps.test_plan import toy_sweep


@dataclass(frozen=True)
class Case:
    name: str
    argv: Callable[[Sandbox], list[str]]  # prepares the sandbox (damage included), the command
    error: str  # a regular expression the error line matches
    stdin: bytes | None = None


def s(path: Path) -> str:
    return str(path)


def widen(to: Callable[[Sandbox], Path | str], *extra: str) -> Callable[[Sandbox], list[str]]:
    return lambda sb: ["widen", s(sb.run), "--d-head", "12", "-o", str(to(sb)), *extra]


def average(to: Callable[[Sandbox], Path | str], *extra: str) -> Callable[[Sandbox], list[str]]:
    return lambda sb: ["average", s(sb.run), "--last", "2", "-o", str(to(sb)), *extra]


def uneven(sb: Sandbox) -> Path:
    """The sandbox's run with checkpoints at steps 2, 4, 5 and 6 (5 off the interval)."""
    for step in (5, 6):
        shutil.copytree(sb.newest, sb.run / "checkpoints" / f"step-{step:08d}")
    return sb.run


def in_new_folder(path: Path) -> Path:
    path.mkdir()
    return path


def a_file(sb: Sandbox) -> Path:
    (sb.root / "out.txt").write_text("a file\n")
    return sb.root / "out.txt"


def a_checkpoint(sb: Sandbox) -> Path:
    shutil.copytree(sb.older, sb.root / "kept")
    return sb.root / "kept"


def with_notes(folder: Path) -> Path:
    """``folder`` with a file of the user's put into it."""
    (folder / "notes.txt").write_text("my notes\n", encoding="utf-8")
    return folder


def a_run_checkpoint(sb: Sandbox) -> Path:
    """An averaged checkpoint kept in the run directory, as ``average -o RUN/averaged-last2``
    leaves one."""
    shutil.copytree(sb.older, sb.run / "averaged-last2")
    return sb.run / "averaged-last2"


def sentences(sb: Sandbox) -> Path:
    (sb.root / "in.txt").write_text("the king\n(a) speaks\n")
    return sb.root / "in.txt"


def task_output(verb: str, ckpt: str, target: Callable[[Sandbox], Path]) -> Callable[[Sandbox], list[str]]:
    """``VERB CKPT -i in.txt -o TARGET``, ``CKPT`` the sandbox's checkpoint of that name."""

    def argv(sb: Sandbox) -> list[str]:
        return [verb, s(getattr(sb, ckpt)), "-i", s(sentences(sb)), "-o", s(target(sb))]

    return argv


def writable(folder: Path) -> bool:
    try:
        tempfile.TemporaryFile(dir=folder).close()
    except OSError:
        return False
    return True


def read_only(sb: Sandbox) -> Path:
    """A folder nothing can be written in: a sandbox folder without write permission, or, for
    root (whom permission bits do not stop), a read-only file system of the machine."""
    folder = sb.root / "locked"
    folder.mkdir(exist_ok=True)
    folder.chmod(0o555)
    if not writable(folder):
        return folder
    for fixed in (Path("/sys"), Path("/proc")):
        if fixed.is_dir() and not writable(fixed):
            return fixed
    pytest.skip("no read-only folder on this machine")


OUTPUT_PATHS = [
    Case("widen -o the input run", widen(lambda sb: sb.run), r"-o .*: is the input"),
    Case(
        "widen -o the input checkpoint",
        lambda sb: ["widen", s(sb.newest), "--d-head", "12", "-o", s(sb.newest)],
        r"is the input",
    ),
    Case("widen -o .", widen(lambda sb: "."), r"-o \.: is the working directory"),
    Case("widen -o ..", widen(lambda sb: ".."), r"-o \.\.: is the working directory"),
    Case("widen -o /", widen(lambda sb: "/"), r"-o /: is the working directory"),
    Case("widen -o a parent of the input", widen(lambda sb: sb.run / "checkpoints"), r"contains the input"),
    Case("widen -o the run's parent", widen(lambda sb: sb.root / "runs"), r"contains the input"),
    Case(
        "widen -o inside the input checkpoint",
        lambda sb: ["widen", s(sb.newest), "--d-head", "12", "-o", s(sb.newest / "wide")],
        r"is inside .*step-00000004, which the command reads",
    ),
    Case(
        "widen -o a directory of user files",
        widen(lambda sb: sb.mine),
        r"already exists and is not a fullrank checkpoint",
    ),
    Case(
        "widen -o user files --overwrite",
        widen(lambda sb: sb.mine, "--overwrite"),
        r"already exists and is not a fullrank checkpoint",
    ),
    Case(
        "widen -o an existing checkpoint",
        widen(a_checkpoint),
        r"already holds a fullrank checkpoint; pass --overwrite",
    ),
    Case("widen -o a file", widen(a_file), r"-o .*out\.txt: is a file"),
    Case("average -o the input run", average(lambda sb: sb.run), r"is the input"),
    Case("average -o ..", average(lambda sb: ".."), r"is the working directory"),
    Case("average -o .", average(lambda sb: "."), r"is the working directory"),
    Case("average -o user files", average(lambda sb: sb.mine), r"is not a fullrank checkpoint"),
    Case(
        "average -o one of its checkpoints",
        lambda sb: ["average", s(sb.older), s(sb.newest), "-o", s(sb.older), "--overwrite"],
        r"is the input",
    ),
    Case("average -o an existing checkpoint", average(a_checkpoint), r"pass --overwrite"),
    Case(
        "average -o the input, of unevenly spaced checkpoints",
        lambda sb: ["average", s(uneven(sb)), "--last", "4", "-o", s(sb.run)],
        r"is the input",
    ),
    Case(
        "bottleneck --out user files",
        lambda sb: ["bottleneck", "--n", "4", "--out", s(sb.mine)],
        r"--out .*mine: already exists and is not a directory of bottleneck results",
    ),
    Case(
        "bottleneck --out .",
        lambda sb: ["bottleneck", "--n", "4", "--out", "."],
        r"--out \.: is the working directory",
    ),
    Case(
        "heads -o an existing file",
        lambda sb: ["heads", s(sb.run), "--data", s(sb.root / "valid.txt"), "-o", s(sb.mine / "results.png")],
        r"-o .*results\.csv: already exists; pass --overwrite",
    ),
    Case(
        "heads -o its input data",
        lambda sb: [
            "heads",
            s(sb.run),
            "--data",
            s(sb.root / "valid.txt"),
            "-o",
            s(sb.root / "valid.txt"),
            "--overwrite",
        ],
        r"is \(or contains\) the input",
    ),
    Case(
        "heads -o .",
        lambda sb: ["heads", s(sb.run), "--data", s(sb.root / "valid.txt"), "-o", "."],
        r"-o \.: is a directory",
    ),
    Case(
        "attention -o /",
        lambda sb: ["attention", s(sb.run), "--text", "the king", "-o", "/"],
        r"-o /: is \(or contains\) the input",
    ),
    Case(
        "parse -o empty",
        lambda sb: ["parse", s(sb.parse), "-i", s(sentences(sb)), "-o", ""],
        r"argument --output/-o: is empty; name the path to write",
    ),
    Case(
        "train with an override given twice",
        lambda sb: ["train", s(sb.config), "name=twice", "train.lr=0.1", "train.lr=0.2"],
        r"override 'train\.lr' is given twice \(0\.1 and 0\.2\); give it once",
    ),
    Case(
        "average --overwrite a checkpoint holding a file of the user's",
        lambda sb: [
            "average",
            s(sb.older),
            s(sb.newest),
            "-o",
            s(with_notes(a_checkpoint(sb))),
            "--overwrite",
        ],
        r"holds notes\.txt, which is not part of a fullrank checkpoint; move it out",
    ),
    Case(
        "heads -o a directory",
        lambda sb: ["heads", s(sb.run), "--data", s(sb.root / "valid.txt"), "-o", s(sb.mine)],
        r"is a directory",
    ),
    Case(
        "heads -o inside the checkpoint",
        lambda sb: ["heads", s(sb.newest), "--data", s(sb.root / "valid.txt"), "-o", s(sb.newest / "h.png")],
        r"is inside .*which the command reads",
    ),
    Case(
        "sweep --out user files",
        lambda sb: ["sweep", s(toy_sweep(sb.root)), "--out", s(sb.mine)],
        r"--out .*mine: already exists and is not a sweep's output folder",
    ),
    Case(
        "sweep --out ..",
        lambda sb: ["sweep", s(toy_sweep(sb.root)), "--out", ".."],
        r"--out \.\.: is the working directory",
    ),
    Case(
        "sweep --out the folder of its sweep file",
        lambda sb: ["sweep", s(toy_sweep(in_new_folder(sb.root / "sw"))), "--out", s(sb.root / "sw")],
        r"contains the input",
    ),
    Case(
        "train into a directory of user files",
        lambda sb: ["train", s(sb.config), "name=mine", f"out_dir={sb.root}"],
        r"run directory .*mine: already exists and is not a fullrank run directory",
    ),
    Case(
        "train into the working directory",
        lambda sb: ["train", s(sb.config), "name=cwd", f"out_dir={sb.root}"],
        r"is the working directory",
    ),
    Case("train name=..", lambda sb: ["train", s(sb.config), "name=.."], r"plain run name"),
    Case(
        "train a finished run again",
        lambda sb: ["train", s(sb.config)],
        r"already holds a checkpoint \(step-00000004\); pass --resume",
    ),
    *(
        Case(
            f"{verb} -o its own input",
            task_output(verb, ckpt, sentences),
            r"-o .*in\.txt: is \(or contains\) the input",
        )
        for verb, ckpt in (("parse", "parse"), ("translate", "mt"))
    ),
    *(
        Case(
            f"{verb} -o an existing file",
            task_output(verb, ckpt, lambda sb: sb.mine / "notes.txt"),
            r"-o .*notes\.txt: already exists; pass --overwrite",
        )
        for verb, ckpt in (("parse", "parse"), ("translate", "mt"))
    ),
    Case(
        "parse -o into a checkpoint of the run",
        lambda sb: [
            "parse",
            s(sb.parse),
            "-i",
            s(sentences(sb)),
            "-o",
            s(a_run_checkpoint(sb) / "meta.json"),
            "--overwrite",
        ],
        r"-o .*averaged-last2/meta\.json: is inside the checkpoint .*averaged-last2",
    ),
    Case(
        "parse -o its checkpoint's metadata",
        lambda sb: [
            "parse",
            s(sb.parse),
            "-i",
            s(sentences(sb)),
            "-o",
            s(sb.parse / "meta.json"),
            "--overwrite",
        ],
        r"is \(or contains\) the input|is inside the checkpoint",
    ),
    Case(
        "translate -o another checkpoint's tokenizer",
        lambda sb: [
            "translate",
            s(sb.mt),
            "-i",
            s(sentences(sb)),
            "-o",
            s(sb.classify / "tokenizer.json"),
            "--overwrite",
        ],
        r"tokenizer\.json: is inside the checkpoint .*classify",
    ),
    Case(
        "translate -o the run's config",
        lambda sb: [
            "translate",
            s(sb.mt),
            "-i",
            s(sentences(sb)),
            "-o",
            s(sb.run / "config.yaml"),
            "--overwrite",
        ],
        r"config\.yaml: is the run .*tiny's own 'config\.yaml'",
    ),
    Case(
        "parse -o into the run's checkpoints folder",
        lambda sb: [
            "parse",
            s(sb.parse),
            "-i",
            s(sentences(sb)),
            "-o",
            s(sb.run / "checkpoints" / "trees.txt"),
        ],
        r"is the run .*'s own 'checkpoints'",
    ),
    Case(
        "parse -o a directory",
        lambda sb: ["parse", s(sb.parse), "-i", s(sentences(sb)), "-o", s(sb.mine)],
        r"mine: is a directory",
    ),
    Case(
        "parse -o under a file",
        lambda sb: ["parse", s(sb.parse), "-i", s(sentences(sb)), "-o", s(sb.mine / "notes.txt" / "t.txt")],
        r"notes\.txt is a file, not a folder",
    ),
    Case(
        "parse -o a read-only folder",
        lambda sb: ["parse", s(sb.parse), "-i", s(sentences(sb)), "-o", s(read_only(sb) / "trees.txt")],
        r"-o .*trees\.txt: cannot write in .*; choose a folder you can write to",
    ),
    Case(
        "parse -o checked before the input is read",
        lambda sb: ["parse", s(sb.parse), "-o", s(sb.mine / "notes.txt")],
        r"notes\.txt: already exists",
        stdin=b"\xff not UTF-8, never read\n",
    ),
    Case(
        "translate -o a read-only folder",
        lambda sb: ["translate", s(sb.mt), "-i", s(sentences(sb)), "-o", s(read_only(sb) / "out.txt")],
        r"cannot write in",
    ),
    Case(
        "attention -o an existing file",
        lambda sb: ["attention", s(sb.run), "--text", "KING", "-o", s(sb.mine / "notes.txt")],
        r"notes\.txt: already exists; pass --overwrite",
    ),
    Case(
        "attention -o its second file exists",
        lambda sb: (
            (sb.mine / "a-lines.png").write_bytes(b"png"),
            ["attention", s(sb.run), "--text", "KING", "-o", s(sb.mine / "a.png")],
        )[1],
        r"a-lines\.png: already exists",
    ),
    Case(
        "attention -o inside the checkpoint",
        lambda sb: ["attention", s(sb.newest), "--text", "KING", "-o", s(sb.newest / "a.png")],
        r"is inside the checkpoint|which the command reads",
    ),
    Case(
        "plot -o an existing file",
        lambda sb: ["plot", s(sb.run), "-o", s(sb.mine / "notes.txt")],
        r"already exists; pass --overwrite",
    ),
    Case(
        "plot -o the run's metrics",
        lambda sb: ["plot", s(sb.run), "-o", s(sb.run / "metrics.jsonl"), "--overwrite"],
        r"metrics\.jsonl: is \(or contains\) the input",
    ),
    Case(
        "plot -o a read-only folder",
        lambda sb: ["plot", s(sb.run), "-o", s(read_only(sb) / "c.png")],
        r"cannot write in",
    ),
    Case(
        "heads -o into the run's checkpoints folder",
        lambda sb: [
            "heads",
            s(sb.run),
            "--data",
            s(sb.root / "valid.txt"),
            "-o",
            s(sb.run / "checkpoints" / "h.png"),
        ],
        r"is the run .*'s own 'checkpoints'",
    ),
    Case(
        "average -o into the run's checkpoints",
        average(lambda sb: sb.run / "checkpoints" / "step-00000009"),
        r"step-00000009: is the run .*'s own 'checkpoints'",
    ),
    Case(
        "widen -o inside another checkpoint",
        widen(lambda sb: sb.mt / "wide"),
        r"mt/wide: is inside the checkpoint",
    ),
    Case("widen -o a read-only folder", widen(lambda sb: read_only(sb) / "wide"), r"cannot write in"),
    Case(
        "eval --cache-dir inside a checkpoint",
        lambda sb: ["eval", s(sb.run), "--data", s(sb.root / "valid.txt"), "--cache-dir", s(sb.mt / "cache")],
        r"--cache-dir .*mt/cache: is inside the checkpoint",
    ),
    Case(
        "train out_dir read-only",
        lambda sb: ["train", s(sb.config), "name=new", f"out_dir={read_only(sb)}"],
        r"run directory .*new: cannot write in",
    ),
    Case(
        "train data.cache_dir under a file",
        lambda sb: ["train", s(sb.config), "name=new", f"data.cache_dir={a_file(sb)}/cache"],
        r"data.cache_dir .*out.txt/cache: .*out.txt is a file, not a folder",
    ),
    Case(
        "train data.cache_dir inside a checkpoint",
        lambda sb: ["train", s(sb.config), "name=new", f"data.cache_dir={sb.mt}/cache"],
        r"data.cache_dir .*mt/cache: is inside the checkpoint",
    ),
    Case(
        "train out_dir inside a checkpoint",
        lambda sb: ["train", s(sb.config), "name=new", f"out_dir={sb.mt}"],
        r"run directory .*mt/new: is inside the checkpoint",
    ),
    Case(
        "sweep --out a read-only folder",
        lambda sb: ["sweep", s(toy_sweep(sb.root)), "--out", s(read_only(sb) / "sw")],
        r"cannot write in",
    ),
]


def meta_edit(edit: Callable[[dict], object]) -> Callable[[Sandbox], list[str]]:
    def argv(sb: Sandbox) -> list[str]:
        edit_meta(sb.newest, edit)
        return ["generate", s(sb.run), "--max-new-tokens", "3"]

    return argv


def garbage_weights(sb: Sandbox) -> None:
    edit_meta(sb.newest, lambda m: m.pop("files"))
    (sb.newest / MODEL).write_bytes(b"\x00garbage" * 50)


def damaged(damage: Callable[[Sandbox], object], *command: str) -> Callable[[Sandbox], list[str]]:
    """Damage the sandbox, then run ``command`` (``RUN`` and ``CKPT`` are replaced)."""

    def argv(sb: Sandbox) -> list[str]:
        damage(sb)
        return [
            {"RUN": s(sb.run), "CKPT": s(sb.newest), "DATA": s(sb.root / "valid.txt")}.get(a, a)
            for a in command
        ]

    return argv


GENERATE = ("generate", "RUN", "--max-new-tokens", "3")


def crafted_weights(sb: Sandbox, **metadata: str) -> None:
    tensors = load_file(s(sb.newest / MODEL))
    rewrite(sb.newest, MODEL, safetensors_save(tensors, metadata={"format": "x", **metadata}))


def every_checkpoint(damage: Callable[[Path], object]) -> Callable[[Sandbox], object]:
    return lambda sb: [damage(c) for c in (sb.older, sb.newest)]


def shapes_of_another_model(sb: Sandbox) -> None:
    for ckpt in (sb.older, sb.newest):
        tensors = load_file(s(ckpt / STATE))
        key = next(k for k in sorted(tensors) if k.endswith("exp_avg") and tensors[k].dim() == 2)
        tensors[key] = torch.zeros(tensors[key].shape[0] + 1, tensors[key].shape[1])
        rewrite(ckpt, STATE, safetensors_save(tensors))


def link_out(sb: Sandbox) -> None:
    shutil.copytree(sb.newest, sb.root / "elsewhere")
    (sb.newest / MODEL).unlink()
    (sb.newest / MODEL).symlink_to(sb.root / "elsewhere" / MODEL)


def step_dir_link_out(sb: Sandbox) -> None:
    shutil.copytree(sb.newest, sb.root / "elsewhere")
    (sb.run / "checkpoints" / "step-00000006").symlink_to(sb.root / "elsewhere")
    (sb.run / "checkpoints" / "latest").write_text("step-00000006")


CHECKPOINTS = [
    Case(
        "truncated weights",
        damaged(lambda sb: truncate(sb.newest / MODEL), *GENERATE),
        r"model\.safetensors: [\d,]+ bytes where [\d,]+ were written",
    ),
    Case(
        "a flipped bit in the tensor data",
        damaged(lambda sb: flip_byte(sb.newest / MODEL), *GENERATE),
        r"model\.safetensors: SHA-256 does not match",
    ),
    Case(
        "garbage weights without checksums",
        damaged(garbage_weights, *GENERATE),
        r"not a readable safetensors file",
    ),
    Case(
        "truncated meta.json",
        damaged(lambda sb: truncate(sb.newest / META), *GENERATE),
        r"meta\.json: not valid JSON",
    ),
    Case(
        "meta.json not UTF-8",
        damaged(lambda sb: (sb.newest / META).write_bytes(b"{\xff}"), *GENERATE),
        r"meta\.json: not UTF-8",
    ),
    Case(
        "meta.json a list",
        damaged(lambda sb: (sb.newest / META).write_text("[1]"), *GENERATE),
        r"holds a JSON list, not an object",
    ),
    Case(
        "meta.json of another program",
        damaged(lambda sb: (sb.newest / META).write_text('{"format": "other"}'), *GENERATE),
        r"format 'other' is not 'fullrank-checkpoint-v1'",
    ),
    Case(
        "vocab_size 10^12",
        meta_edit(lambda m: m["model"].update(vocab_size=10**12)),
        r"its model config does not describe model\.safetensors \(tensor '.*' has shape",
    ),
    Case(
        "d_model 2^40",
        meta_edit(lambda m: m["model"].update(d_model=2**40, d_head=8)),
        r"its model config does not describe model\.safetensors \(tensor '.*' has shape",
    ),
    Case(
        "a list where the model config belongs",
        meta_edit(lambda m: m.update(model=[])),
        r"model = \[\]: should be a valid dictionary",
    ),
    Case(
        "a string for d_model",
        meta_edit(lambda m: m["model"].update(d_model="24")),
        r"d_model = '24': should be a valid integer",
    ),
    Case(
        "an unknown model family",
        meta_edit(lambda m: m["model"].update(family="rnn")),
        r"unknown model family 'rnn'",
    ),
    Case(
        "negative dropout",
        meta_edit(lambda m: m["model"].update(dropout=-1)),
        r"dropout = -1: should be greater than or equal to 0",
    ),
    Case(
        "a list for data",
        meta_edit(lambda m: m.update(data=["x"])),
        r"data = \['x'\]: should be a valid dictionary",
    ),
    Case(
        "a checksum that is not hex",
        meta_edit(lambda m: m["files"][MODEL].update(sha256="zz")),
        r"files\.model\.safetensors\.sha256",
    ),
    Case(
        "a recorded file that is missing",
        damaged(
            lambda sb: (
                (sb.newest / TOKENIZER).unlink()
                if (sb.newest / TOKENIZER).exists()
                else (sb.newest / MODEL).unlink()
            ),
            *GENERATE,
        ),
        r"missing \(meta\.json records it\)",
    ),
    Case(
        "a file that was not written with it",
        damaged(lambda sb: (sb.newest / "extra.bin").write_bytes(b"x"), "verify", "CKPT"),
        r"1 of 1 checks failed",
    ),
    Case(
        "aliases metadata not JSON",
        damaged(lambda sb: crafted_weights(sb, aliases="{"), *GENERATE),
        r"'aliases' metadata is not valid JSON",
    ),
    Case(
        "aliases metadata not a mapping",
        damaged(lambda sb: crafted_weights(sb, aliases="[1]"), *GENERATE),
        r"'aliases' metadata is not a mapping",
    ),
    Case(
        "a header claiming 4 TB",
        damaged(
            lambda sb: rewrite(
                sb.newest,
                MODEL,
                safetensors_bytes(
                    {
                        "embed.token.weight": {
                            "dtype": "F32",
                            "shape": [10**12],
                            "data_offsets": [0, 4 * 10**12],
                        }
                    }
                ),
            ),
            *GENERATE,
        ),
        r"model\.safetensors: not a readable safetensors file",
    ),
    Case(
        "latest pointing out of the run",
        damaged(lambda sb: (sb.run / "checkpoints" / "latest").write_text("../../mt"), *GENERATE),
        r"latest: names '\.\./\.\./mt', not a step-N checkpoint inside",
    ),
    Case(
        "latest an absolute path",
        damaged(lambda sb: (sb.run / "checkpoints" / "latest").write_text(s(sb.mt)), *GENERATE),
        r"not a step-N checkpoint inside",
    ),
    Case(
        "latest not UTF-8",
        damaged(lambda sb: (sb.run / "checkpoints" / "latest").write_bytes(b"step-\xfe"), *GENERATE),
        r"latest: not a UTF-8 checkpoint name",
    ),
    Case(
        "a step directory linked out of the run",
        damaged(step_dir_link_out, *GENERATE),
        r"not a step-N checkpoint inside",
    ),
    Case(
        "weights linked out of the checkpoint",
        damaged(link_out, *GENERATE),
        r"leads outside its checkpoint directory",
    ),
    Case(
        "optimizer state of other shapes",
        damaged(shapes_of_another_model, "train", "CONFIG", "--resume", "--quiet"),
        r"optimizer tensor 'optim\.\d+\.exp_avg' has shape",
    ),
    Case(
        "every checkpoint truncated, --resume",
        damaged(every_checkpoint(lambda c: truncate(c / MODEL)), "train", "CONFIG", "--resume"),
        r"no checkpoint can be resumed from \(the newest: step-00000004 cannot",
    ),
    Case(
        "a negative loop position",
        damaged(
            every_checkpoint(lambda c: edit_meta(c, lambda m: m["loop"].update(step=-3))),
            "train",
            "CONFIG",
            "--resume",
        ),
        r"loop\.step = -3: should be greater than or equal to 0",
    ),
    Case(
        "a data position counted in units of no batches",
        damaged(
            every_checkpoint(lambda c: edit_meta(c, lambda m: m["loop"].update(units=0))),
            "train",
            "CONFIG",
            "--resume",
        ),
        r"loop\.units = 0: should be greater than 0",
    ),
    Case(
        "a malformed random-number state",
        damaged(
            every_checkpoint(
                lambda c: rewrite(
                    c, STATE, safetensors_save({**load_file(s(c / STATE)), "rng.torch": torch.zeros(3)})
                )
            ),
            "train",
            "CONFIG",
            "--resume",
            "--quiet",
        ),
        r"'rng\.torch' is missing or malformed",
    ),
    Case(
        "an optimizer group of another size",
        damaged(
            every_checkpoint(
                lambda c: edit_meta(c, lambda m: m["optimizer"]["param_groups"][0]["params"].pop())
            ),
            "train",
            "CONFIG",
            "--resume",
            "--quiet",
        ),
        r"parameter groups of sizes",
    ),
    Case(
        "a resume that would hold other parameters",
        lambda sb: ["train", s(sb.config), "--resume", "train.freeze=[embed.*]"],
        r"train\.freeze = \[\] in the run that .* belongs to, which this resume would change",
    ),
    Case(
        "train.freeze naming no parameter",
        lambda sb: ["train", s(sb.config), "name=frozen", "train.freeze=[encoder.layers.*]"],
        r"train\.freeze: 'encoder\.layers\.\*' matches no parameter of this model",
    ),
    Case(
        "train.resume_from a missing path",
        lambda sb: ["train", s(sb.config), "--resume", f"train.resume_from={sb.root / 'nope'}"],
        r"no such checkpoint or run directory",
    ),
    Case(
        "train.resume_from an inference checkpoint",
        lambda sb: ["train", s(sb.config), f"train.resume_from={sb.mt}", "name=fresh"],
        r"not a training checkpoint",
    ),
    Case(
        "verify a damaged run",
        damaged(lambda sb: flip_byte(sb.older / MODEL), "verify", "RUN"),
        r"1 of 3 checks failed",
    ),
    Case(
        "verify a missing path",
        lambda sb: ["verify", s(sb.root / "nope")],
        r"no such checkpoint or run directory",
    ),
    Case("verify a directory without checkpoints", lambda sb: ["verify", s(sb.mine)], r"no checkpoints here"),
    Case(
        "eval a translation checkpoint",
        lambda sb: ["eval", s(sb.mt), "--data", s(sb.root / "valid.txt")],
        r"needs a language-model",
    ),
    Case(
        "translate with a language model",
        lambda sb: ["translate", s(sb.run)],
        r"needs a translation checkpoint",
        stdin=b"a\n",
    ),
    Case(
        "average checkpoints of two architectures",
        lambda sb: ["average", s(sb.newest), s(sb.mt), "-o", s(sb.root / "avg")],
        r"is not in every checkpoint",
    ),
]


def config_text(sb: Sandbox, text: bytes) -> list[str]:
    (sb.root / "bad.yaml").write_bytes(text)
    return ["train", s(sb.root / "bad.yaml")]


def config_override(*items: str) -> Callable[[Sandbox], list[str]]:
    return lambda sb: ["train", s(sb.config), "name=new", *items, "--quiet"]


CONFIGS = [
    Case("train.lr=nan", config_override("train.lr=.nan"), r"train\.lr = nan: should be a finite"),
    Case("train.lr=inf", config_override("train.lr=.inf"), r"train\.lr = inf: should be a finite"),
    Case(
        "train.min_lr<0",
        config_override("train.min_lr=-0.001"),
        r"train\.min_lr = -0\.001: should be greater than or equal to 0",
    ),
    Case("train.eps=-1", config_override("train.eps=-1"), r"train\.eps = -1: should be greater"),
    Case(
        "train.weight_decay=-0.1", config_override("train.weight_decay=-0.1"), r"train\.weight_decay = -0\.1"
    ),
    Case("train.clip_grad=0", config_override("train.clip_grad=0"), r"train\.clip_grad = 0"),
    Case(
        "train.eval_batches=0",
        config_override("train.eval_batches=0"),
        r"train\.eval_batches = 0: should be greater than 0",
    ),
    Case("train.betas=[0.9,1.5]", config_override("train.betas=[0.9,1.5]"), r"train\.betas\.1"),
    Case("train.steps=true", config_override("train.steps=true"), r"should be a valid integer"),
    Case(
        "train.batch_size=2.5",
        config_override("train.batch_size=2.5"),
        r"train\.batch_size = 2\.5: should be a valid integer",
    ),
    Case("model.dropout=1.5", config_override("model.dropout=1.5"), r"model\.dropout = 1\.5"),
    Case("model.d_model=0", config_override("model.d_model=0"), r"model\.d_model = 0"),
    Case("an unknown key", config_override("train.learning_rate=1"), r"unknown key 'train\.learning_rate'"),
    Case("an unknown task", config_override("task=translation"), r"task 'translation' is not one"),
    Case("an override without =", config_override("train.steps"), r"must look like section"),
    Case("an unknown option", config_override("--steps=3"), r"unrecognized arguments: --steps=3"),
    Case("a missing argument", lambda sb: ["widen", s(sb.run)], r"arguments are required"),
    Case(
        "a repeated key",
        lambda sb: config_text(sb, b"name: a\nname: b\n"),
        r"bad\.yaml:2: key 'name' appears twice",
    ),
    Case(
        "a config that is not UTF-8",
        lambda sb: config_text(sb, b"name: caf\xe9\n"),
        r"bad\.yaml:1: not valid UTF-8 \(byte 0xe9",
    ),
    Case(
        "a config that is a list",
        lambda sb: config_text(sb, b"- a\n- b\n"),
        r"expected a mapping of sections",
    ),
    Case("an empty config", lambda sb: config_text(sb, b""), r"bad\.yaml: the file is empty"),
    Case("invalid YAML", lambda sb: config_text(sb, b"name: [\n"), r"not valid YAML"),
    Case("a missing config", lambda sb: ["train", s(sb.root / "none.yaml")], r"no such config file"),
    Case(
        "extends that loops",
        lambda sb: config_text(sb, b"extends: bad.yaml\nname: x\n"),
        r"'extends' loops back",
    ),
    Case(
        "sample.prompt not UTF-8",
        config_override(os.fsdecode(b"sample.prompt=caf\xe9")),
        r"not valid UTF-8 \(byte 0xe9 at character 4\)",
    ),
    Case("train.batch_size=0", config_override("train.batch_size=0"), r"train\.batch_size = 0"),
    Case(
        "a learning rate that makes the loss NaN",
        config_override("train.lr=1e30", "train.schedule=constant", "train.warmup=0", "train.save_every=1"),
        r"step 2: the training loss is not a finite number; stopped without saving",
    ),
    Case(
        "info on a bad config",
        lambda sb: ["info", config_text(sb, b"name: x\nname: y\n")[1]],
        r"appears twice",
    ),
]


def data_file(name: str, content: bytes) -> Callable[[Sandbox], list[str]]:
    def argv(sb: Sandbox) -> list[str]:
        (sb.root / name).write_bytes(content)
        return ["train", s(sb.config), "name=new", f"data.train={name}"]

    return argv


DATA = [
    Case("a missing training file", config_override("data.train=none.txt"), r"none\.txt: no such"),
    Case(
        "bleu of a missing file, a reference without a language suffix",
        lambda sb: ["bleu", s(sb.mine / "none.hyp"), "--ref", s(sb.mine / "none.ref")],
        r"none\.hyp: no such file",
    ),
    Case("an empty training file", data_file("empty.txt", b""), r"the file is empty"),
    Case("a whitespace training file", data_file("blank.txt", b" \n\n"), r"only whitespace"),
    Case(
        "a training file not UTF-8",
        data_file("latin.txt", b"ok\ncaf\xe9\n"),
        r"latin\.txt:2: not valid UTF-8 \(byte 0xe9 at column 4\)",
    ),
    Case("a training file too short", data_file("short.txt", b"abc\n"), r"shorter than one block"),
    Case("a directory as training file", config_override("data.train=."), r"is a directory"),
    Case(
        "eval --data not UTF-8",
        lambda sb: (
            (sb.root / "bad.txt").write_bytes(b"\xffabc"),
            ["eval", s(sb.run), "--data", s(sb.root / "bad.txt")],
        )[1],
        r"bad\.txt:1: not valid UTF-8",
    ),
    Case(
        "generate --prompt not UTF-8",
        lambda sb: ["generate", s(sb.run), "--prompt", os.fsdecode(b"KING\xff")],
        r"--prompt: not valid UTF-8 \(byte 0xff at character 5\)",
    ),
    Case(
        "attention --text not UTF-8",
        lambda sb: ["attention", s(sb.run), "--text", os.fsdecode(b"\xc3("), "-o", s(sb.root / "a.png")],
        r"--text: not valid UTF-8",
    ),
    Case(
        "translate stdin not UTF-8",
        lambda sb: ["translate", s(sb.mt)],
        r"<stdin>:2: not valid UTF-8 \(byte 0xff at column 3\)",
        stdin=b"a cat\nab\xff\n",
    ),
    Case(
        "translate --input not UTF-8",
        lambda sb: (
            (sb.root / "src.txt").write_bytes(b"\xfe\n"),
            ["translate", s(sb.mt), "--input", s(sb.root / "src.txt")],
        )[1],
        r"src\.txt:1: not valid",
    ),
    Case("translate --beam 0", lambda sb: ["translate", s(sb.mt), "--beam", "0"], r"--beam"),
    Case(
        "translate --max-len-a inf",
        lambda sb: ["translate", s(sb.mt), "--max-len-a", "inf"],
        r"argument --max-len-a: must be a finite number, got inf",
    ),
    Case(
        "translate --alpha nan",
        lambda sb: ["translate", s(sb.mt), "--alpha", "nan"],
        r"argument --alpha: must be a finite number, got nan",
    ),
    Case(
        "translate --alpha too large for the length penalty",
        lambda sb: ["translate", s(sb.mt), "-i", s(sentences(sb)), "--alpha", "1e308"],
        r"--alpha must be a number from -10 to 10 .*got 1e\+308",
    ),
    Case(
        "parse --alpha too large for the length penalty",
        lambda sb: ["parse", s(sb.parse), "-i", s(sentences(sb)), "--alpha", "1e308"],
        r"--alpha must be a number from -10 to 10",
    ),
    Case(
        "translate --max-len-a too large for a length",
        lambda sb: ["translate", s(sb.mt), "-i", s(sentences(sb)), "--max-len-a", "1e300"],
        r"--max-len-a must be a number from 0 to 1000",
    ),
    Case(
        "generate --seed beyond every generator",
        lambda sb: ["generate", s(sb.run), "--seed", "99999999999999999999999"],
        r"argument --seed: must be an integer from 0 to 4294967295",
    ),
    Case(
        "train.seed beyond every generator",
        lambda sb: ["train", s(sb.config), "train.seed=99999999999999999999999"],
        r"train\.seed = 99999999999999999999999: should be less than 4294967296",
    ),
    Case(
        "plot -o without a figure format",
        lambda sb: ["plot", s(sb.run), "-o", s(sb.root / "curves")],
        r"-o .*curves: has no file extension; end it in .*\.png",
    ),
    Case(
        "heads -o a table's name",
        lambda sb: ["heads", s(sb.run), "--data", s(sb.root / "valid.txt"), "-o", s(sb.root / "h.csv")],
        r"'\.csv' is not a figure format",
    ),
    Case(
        "attention -o without a figure format",
        lambda sb: ["attention", s(sb.run), "--text", "KING", "-o", s(sb.root / "maps")],
        r"has no file extension",
    ),
    Case(
        "plot a file, not a run",
        lambda sb: ["plot", s(sb.root / "valid.txt")],
        r"valid\.txt: not a run directory",
    ),
    Case(
        "heads --ref with another number of lines than --data (translation)",
        lambda sb: (
            (sb.root / "two.txt").write_text("a b\nc d\n"),
            (sb.root / "three.txt").write_text("a\nb\nc\n"),
            [
                "heads",
                s(sb.mt),
                "--data",
                s(sb.root / "two.txt"),
                "--ref",
                s(sb.root / "three.txt"),
                "-o",
                s(sb.root / "h.png"),
            ],
        )[-1],
        r"--ref has 3 lines and --data 2",
    ),
    Case(
        "widen to heads that do not fit in memory",
        lambda sb: ["widen", s(sb.run), "--d-head", "99999999999", "-o", s(sb.root / "wide")],
        r"out of memory \(.*\); the sizes asked for do not fit this machine",
    ),
    Case(
        "average the same checkpoint twice",
        lambda sb: ["average", s(sb.older), s(sb.older), "-o", s(sb.root / "avg")],
        r"step-00000002: named twice; an average counts each checkpoint once",
    ),
    Case(
        "attention --view on a language model",
        lambda sb: ["attention", s(sb.run), "--text", "KING", "--view", "cross", "-o", s(sb.root / "a.png")],
        r"--view: .* is a language model, which has only its own self-attention",
    ),
    Case(
        "attention --target empty",
        lambda sb: ["attention", s(sb.mt), "--text", "a b", "--target", " ", "-o", s(sb.root / "a.png")],
        r"--target is empty",
    ),
    Case(
        "advise --vocab-size 0",
        lambda sb: [
            "advise",
            "--d-model",
            "64",
            "--seq-len",
            "16",
            "--layers",
            "2",
            "--param-budget",
            "1M",
            "--vocab-size",
            "0",
        ],
        r"argument --vocab-size: must be at least 1, got 0",
    ),
    Case(
        "info --vocab-size 0",
        lambda sb: ["info", s(sb.config), "--vocab-size", "0"],
        r"argument --vocab-size: must be at least 1, got 0",
    ),
    Case(
        "train a directory",
        lambda sb: ["train", s(sb.root)],
        r"is a directory; name the config file",
    ),
    Case(
        "info a folder that holds no checkpoint",
        lambda sb: ["info", s(sb.root)],
        r"no complete checkpoint found \(expected meta\.json and model\.safetensors",
    ),
    Case(
        "info a checkpoint with a flipped byte",
        damaged(lambda sb: flip_byte(sb.newest / MODEL), "info", "CKPT"),
        r"model\.safetensors: .*SHA-256",
    ),
    Case(
        "generate --temperature nan",
        lambda sb: ["generate", s(sb.run), "--temperature", "nan"],
        r"argument --temperature: must be a finite number",
    ),
    Case(
        "attention --heads out of range",
        lambda sb: ["attention", s(sb.run), "--text", "KING", "--heads", "7", "-o", s(sb.root / "a.png")],
        r"--heads 7 is out of range: this model has heads 0\.\.2",
    ),
    Case(
        "attention --query out of range",
        lambda sb: ["attention", s(sb.run), "--text", "KING", "--query", "99", "-o", s(sb.root / "a.png")],
        r"--query 99 is out of range",
    ),
    Case(
        "heads --sequences 0",
        lambda sb: ["heads", s(sb.run), "--data", s(sb.root / "valid.txt"), "--sequences", "0"],
        r"--sequences must be at least 1",
    ),
    Case(
        "a torn metrics line",
        lambda sb: (
            open(sb.run / "metrics.jsonl", "a").write('{"step": 6, "spl'),
            ["plot", s(sb.run), "-o", s(sb.root / "c.png")],
        )[1],
        r"metrics\.jsonl:\d+: not a metrics record",
    ),
]


def sweep_text(text: bytes) -> Callable[[Sandbox], Path]:
    def write(sb: Sandbox) -> Path:
        toy_sweep(sb.root)
        (sb.root / "bad_sweep.yaml").write_bytes(text)
        return sb.root / "bad_sweep.yaml"

    return write


def nothing_left(sb: Sandbox, out: Path) -> list[str]:
    """``out`` must not exist after the command (checked when the case is prepared and by
    ``test_slurm_without_slurm_leaves_nothing_behind``)."""
    if shutil.which("sbatch"):
        pytest.skip("SLURM is installed here")
    assert not out.exists()
    return ["sweep", s(toy_sweep(sb.root)), "--executor", "slurm", "--out", s(out)]


def without_a_gpu(sb: Sandbox) -> list[str]:
    """A sweep asking for CUDA where PyTorch sees no GPU (skipped on a machine with one)."""
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    return ["sweep", s(toy_sweep(sb.root)), "--out", s(sb.root / "sw_cuda"), "train.device=cuda"]


SWEEPS = [
    Case(
        "a sweep file with a repeated key",
        lambda sb: ["sweep", s(sweep_text(b"name: a\nbase: tiny.yaml\nname: b\n")(sb)), "--dry-run"],
        r"bad_sweep\.yaml:3: key 'name' appears twice in this mapping \(first on line 1\)",
    ),
    Case(
        "a sweep file with a repeated arm",
        lambda sb: [
            "sweep",
            s(sweep_text(b"name: a\nbase: tiny.yaml\narms:\n  x: {}\n  x: {}\n")(sb)),
            "--dry-run",
        ],
        r"bad_sweep\.yaml:5: key 'x' appears twice",
    ),
    Case(
        "a sweep file in Latin-1",
        lambda sb: [
            "sweep",
            s(sweep_text("name: caf\u00e9\nbase: tiny.yaml\n".encode("latin-1"))(sb)),
            "--dry-run",
        ],
        r"bad_sweep\.yaml:1: not valid UTF-8 \(byte 0xe9 at column 10\)",
    ),
    Case(
        "a sweep file that is empty",
        lambda sb: ["sweep", s(sweep_text(b"")(sb)), "--dry-run"],
        r"bad_sweep\.yaml: the file is empty",
    ),
    Case(
        "sweep --dry-run train.steps=-5",
        lambda sb: ["sweep", s(toy_sweep(sb.root)), "--dry-run", "train.steps=-5"],
        r"point fixed .*train\.steps = -5: should be greater than 0",
    ),
    Case(
        "sweep --dry-run model.dropout=2",
        lambda sb: ["sweep", s(toy_sweep(sb.root)), "--dry-run", "model.dropout=2"],
        r"model\.dropout = 2",
    ),
    Case(
        "sweep --dry-run with a bad value in the file",
        lambda sb: [
            "sweep",
            s(sweep_text(b"name: a\nbase: tiny.yaml\nset: {train.lr: -1}\n")(sb)),
            "--dry-run",
        ],
        r"point base .*train\.lr = -1",
    ),
    Case(
        "sweep override of an axis",
        lambda sb: ["sweep", s(toy_sweep(sb.root)), "--dry-run", "model.n_heads=3"],
        r"override 'model\.n_heads': .*sets it point by point \(an axis\)",
    ),
    Case(
        "sweep override of the seed",
        lambda sb: ["sweep", s(toy_sweep(sb.root)), "train.seed=3"],
        r"point by point \(its seeds\)",
    ),
    Case(
        "sweep override of the matched key",
        lambda sb: ["sweep", s(toy_sweep(sb.root)), "model.d_ff=64"],
        r"\(match\.solve_for\)",
    ),
    Case(
        "sweep override of an unknown key",
        lambda sb: ["sweep", s(toy_sweep(sb.root)), "train.stepz=3"],
        r"unknown key 'train\.stepz'",
    ),
    Case(
        "sweep --executor slurm without SLURM",
        lambda sb: nothing_left(sb, sb.root / "sw"),
        r"--executor slurm: no SLURM here \(sbatch is not on the PATH\)|--executor slurm "
        r"needs submitit",
    ),
    Case(
        "sweep train.device=cuda without a GPU",
        without_a_gpu,
        r"train\.device=cuda: this machine has no GPU that PyTorch can use .*; "
        r"use train\.device=cpu, or auto",
    ),
]


def _argv_with_config(case: Case, sb: Sandbox) -> list[str]:
    return [s(sb.config) if a == "CONFIG" else a for a in case.argv(sb)]


ALL = OUTPUT_PATHS + CHECKPOINTS + CONFIGS + DATA + SWEEPS


def check_case(case: Case, sandbox: Sandbox, capsys, monkeypatch) -> None:
    """Run ``case`` in ``sandbox``: one line, exit status 2, every file kept."""
    argv = _argv_with_config(case, sandbox)
    if case.stdin is not None:
        monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(case.stdin)))
    before = snapshot(sandbox.root)
    code: int | str | None
    try:
        code = main(argv)
    except SystemExit as e:  # argparse's usage errors
        code = e.code
    assert_one_line_error(code, capsys.readouterr().err, case.error)
    assert_kept(before, snapshot(sandbox.root))


@pytest.mark.parametrize("case", ALL, ids=[c.name for c in ALL])
def test_one_line_error_and_nothing_lost(case, sandbox, capsys, monkeypatch):
    check_case(case, sandbox, capsys, monkeypatch)


def test_slurm_without_slurm_leaves_nothing_behind(sandbox, capsys, monkeypatch):
    if shutil.which("sbatch"):
        pytest.skip("SLURM is installed here")
    case = next(c for c in SWEEPS if c.name == "sweep --executor slurm without SLURM")
    check_case(case, sandbox, capsys, monkeypatch)
    assert not (sandbox.root / "sw").exists()


def test_a_pipe_or_device_is_never_replaced_by_a_file(sandbox, capsys):
    """``-o`` naming a FIFO (or a device such as /dev/null) is refused, with --overwrite too:
    the atomic rename would put a regular file in its place."""
    fifo = sandbox.mine / "pipe"
    os.mkfifo(fifo)
    for extra in ([], ["--overwrite"]):
        code = main(["parse", s(sandbox.parse), "-i", s(sentences(sandbox)), "-o", s(fifo), *extra])
        assert_one_line_error(code, capsys.readouterr().err, r"pipe: is a device, pipe or socket, not a file")
        assert stat.S_ISFIFO(fifo.lstat().st_mode)


def test_heads_writes_beside_a_checkpoint_of_no_run(sandbox, capsys):
    """Without -o, ``heads`` writes into the run of a run's checkpoint, and beside a checkpoint
    that belongs to no run — never into a folder above it."""
    loose = sandbox.root / "a" / "b" / "model"
    shutil.copytree(sandbox.newest, loose)
    assert main(["heads", s(loose), "--data", s(sandbox.root / "valid.txt"), "--sequences", "1"]) == 0
    assert (loose.parent / "heads.png").is_file() and (loose.parent / "heads.csv").is_file()
    assert not (sandbox.root / "a" / "heads.png").exists()
    capsys.readouterr()


def test_average_notes_unevenly_spaced_checkpoints_once_it_has_averaged(sandbox, capsys):
    out = sandbox.root / "avg"
    assert main(["average", s(uneven(sandbox)), "--last", "4", "-o", s(out)]) == 0
    err = capsys.readouterr().err
    assert err.startswith("note: the checkpoints are unevenly spaced (steps 2, 4, 5, 6)"), err
    assert (out / "model.safetensors").is_file()
