"""Fixtures of the robustness suite: a tiny trained run and tiny checkpoints of the other tasks
(translation, parsing, classification, question answering, masked LM: untrained weights, real tokenizers;
built once per session), a sandbox per test holding copies of them, and the checks every case
makes.

Every case runs in its sandbox (the working directory included), so that a command that
wrongly deleted ``.`` or ``..`` would delete only the sandbox.
"""

from __future__ import annotations

import hashlib
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from fullrank.cli import main
from tests.e2e.lm_fixture import TEXT, tiny_experiment


@dataclass(frozen=True)
class Built:
    run: Path  # a trained language-model run: checkpoints step-2 and step-4
    mt: Path  # a translation checkpoint (untrained weights, a real BPE tokenizer)
    parse: Path  # a parsing checkpoint (untrained; word vocabulary, tree vocabulary in meta)
    classify: Path  # a 3-way classifier (untrained; WordPiece), labels in meta
    squad: Path  # a span model (untrained; WordPiece), its settings in meta
    bert: Path  # a pre-training checkpoint with its masked-LM head (untrained; WordPiece)


LABELS = ["entailment", "neutral", "contradiction"]
TREE_SYMBOLS = "(S )S (NP )NP (VP )VP XX\n"


@pytest.fixture(scope="session")
def built(tmp_path_factory) -> Built:
    root = tmp_path_factory.mktemp("built")
    assert main(["train", str(tiny_experiment(root, steps=4, save_every=2)), "--quiet"]) == 0
    import torch

    from fullrank.data.tokenizers import Tokenizer
    from fullrank.models import Encoder, EncoderConfig, EncoderDecoder, EncoderDecoderConfig
    from fullrank.training.checkpoints import write_checkpoint

    (root / "mt.txt").write_text(TEXT[:4000], encoding="utf-8")
    tok = Tokenizer.train("bpe", [root / "mt.txt"], 60)
    small: dict[str, Any] = {"d_model": 24, "n_heads": 3, "d_ff": 37, "n_layers": 1}
    torch.manual_seed(0)
    cfg = EncoderDecoderConfig(vocab_size=tok.vocab_size, max_len=64, seq_len=8, **small)
    write_checkpoint(root / "mt", EncoderDecoder(cfg), cfg, tok, {"task": "mt"})

    (root / "words.txt").write_text(TEXT[:4000].lower(), encoding="utf-8")
    (root / "symbols.txt").write_text(TREE_SYMBOLS, encoding="utf-8")
    words, trees = (Tokenizer.train("word", [root / f]) for f in ("words.txt", "symbols.txt"))
    cfg = EncoderDecoderConfig(
        vocab_size=trees.vocab_size, src_vocab_size=words.vocab_size, max_len=64, seq_len=16, **small
    )
    write_checkpoint(
        root / "parse",
        EncoderDecoder(cfg),
        cfg,
        words,
        {
            "task": "parse",
            "tree_tokenizer": trees.to_str(),
            "tree_leaves": "placeholder",
            "tree_order": "top_down",
        },
    )

    pieces = Tokenizer.train("wordpiece", [root / "mt.txt"], 200)
    for name, heads, meta in (
        ("classify", {"n_classes": len(LABELS)}, {"labels": LABELS}),
        ("squad", {"span_head": True}, {"squad": {"doc_stride": 8, "n_best": 5, "max_answer_len": 10}}),
    ):
        enc = EncoderConfig(
            vocab_size=pieces.vocab_size, seq_len=32, max_len=32, pretraining_heads=False, **heads, **small
        )
        write_checkpoint(root / name, Encoder(enc), enc, pieces, {"task": name, **meta})
    enc = EncoderConfig(vocab_size=pieces.vocab_size, seq_len=32, max_len=32, **small)
    write_checkpoint(root / "bert", Encoder(enc), enc, pieces, {"task": "bert"})
    return Built(
        run=root / "runs" / "tiny",
        mt=root / "mt",
        parse=root / "parse",
        classify=root / "classify",
        squad=root / "squad",
        bert=root / "bert",
    )


@dataclass(frozen=True)
class Sandbox:
    root: Path  # everything a case may touch (snapshotted)
    cwd: Path  # the working directory of the command
    config: Path  # the experiment file of `run` (6 steps, saves every 2)
    run: Path  # a copy of the trained run
    mt: Path  # copies of the checkpoints of the other tasks
    parse: Path
    classify: Path
    squad: Path
    bert: Path
    mine: Path  # a directory of the user's own files

    @property
    def newest(self) -> Path:
        return self.run / "checkpoints" / "step-00000004"

    @property
    def older(self) -> Path:
        return self.run / "checkpoints" / "step-00000002"


@pytest.fixture
def sandbox(built, tmp_path, monkeypatch) -> Sandbox:
    config = tiny_experiment(tmp_path, steps=6, save_every=2)
    shutil.copytree(built.run, tmp_path / "runs" / "tiny")
    for name in ("mt", "parse", "classify", "squad", "bert"):
        shutil.copytree(getattr(built, name), tmp_path / name)
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("my own notes\n", encoding="utf-8")
    (tmp_path / "mine" / "results.csv").write_text("a,b\n1,2\n", encoding="utf-8")
    (tmp_path / "cwd").mkdir()
    (tmp_path / "cwd" / "keep.txt").write_text("the working directory's file\n")
    monkeypatch.chdir(tmp_path / "cwd")
    return Sandbox(
        root=tmp_path,
        cwd=tmp_path / "cwd",
        config=config,
        run=tmp_path / "runs" / "tiny",
        mt=tmp_path / "mt",
        parse=tmp_path / "parse",
        classify=tmp_path / "classify",
        squad=tmp_path / "squad",
        bert=tmp_path / "bert",
        mine=tmp_path / "mine",
    )


def snapshot(root: Path) -> dict[str, str]:
    """SHA-256 of every file under ``root`` (links by their target), by relative path."""
    out = {}
    for path in sorted(root.rglob("*")):
        if path.is_symlink():
            out[str(path.relative_to(root))] = "link→" + str(path.readlink())
        elif path.is_file():
            out[str(path.relative_to(root))] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def assert_kept(before: dict[str, str], after: dict[str, str]) -> None:
    """Every file of ``before`` still exists with the same content."""
    lost = sorted(k for k in before if k not in after)
    changed = sorted(k for k in before if k in after and after[k] != before[k])
    assert not lost and not changed, f"lost {lost[:5]}, changed {changed[:5]}"


def assert_one_line_error(code: int | str | None, err: str, pattern: str) -> None:
    """Exit status 2, exactly one line on stderr, no traceback, the line matching ``pattern``."""
    assert code == 2, (code, err)
    assert "Traceback" not in err, err
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert re.match(r"fullrank( [a-z-]+)?: error: ", lines[0]), lines[0]
    assert re.search(pattern, lines[0]), lines[0]
