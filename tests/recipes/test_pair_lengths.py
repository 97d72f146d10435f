"""A translation or parsing pair longer than the model's positional table (``model.max_len``) is
refused at setup, in one line naming the split, the line, the length and the fix — not after
training, when the validation reaches it."""

from __future__ import annotations

import numpy as np
import pytest

from fullrank.cli import main
from fullrank.data.translation import EncodedPairs
from fullrank.errors import DataError
from fullrank.recipes.mt import check_pair_lengths
from tests.e2e.test_cli_parse import CONFIG as PARSE_CONFIG
from tests.e2e.test_cli_parse import write_treebank
from tests.e2e.test_cli_translate import small_config, write_corpus


def pairs(*lengths: tuple[int, int]) -> EncodedPairs:
    return EncodedPairs(
        src=[np.zeros(s, dtype=np.int32) for s, _ in lengths],
        tgt=[np.zeros(t, dtype=np.int32) for _, t in lengths],
        n_dropped=1,
        kept=np.arange(1, len(lengths) + 1),  # the split's first pair was dropped
    )


def test_the_check_refuses_exactly_what_the_positional_table_cannot_hold():
    def where(i: int, side: int) -> str:
        return f"{'src' if side == 0 else 'tgt'} line {i + 1}"

    # a side of max_len − 1 tokens takes max_len positions with its EOS or BOS: it fits
    check_pair_lengths("valid", pairs((3, 4), (63, 63)), 64, 128, where)
    with pytest.raises(DataError, match=r"data.valid: tgt line 3 has a target sentence of 64 tokens, 65"):
        check_pair_lengths("valid", pairs((3, 4), (10, 64)), 64, 128, where)
    with pytest.raises(DataError, match=r"data.train: src line 2 has a source sentence of 70 tokens"):
        check_pair_lengths("train", pairs((70, 2)), 64, 128, where)
    # data.max_sentence_len keeps every pair within the table: nothing to look at
    check_pair_lengths("train", pairs((70, 2)), 64, 63, where)


def long_line(tmp_path, split: str, side: str) -> None:
    """Append a pair to ``split`` whose ``side`` (``en`` source, ``de`` target) is ~85 tokens."""
    for lang in ("en", "de"):
        with open(tmp_path / f"{split}.{lang}", "a") as f:
            f.write(("the big dog sees a red car " * 12 if lang == side else "x") + "\n")


@pytest.mark.parametrize(
    ("split", "side", "expected"),
    [
        ("val", "de", "data.valid: {root}/val.de line 6 has a target sentence of "),
        ("val", "en", "data.valid: {root}/val.en line 6 has a source sentence of "),
        ("train", "de", "data.train: {root}/train.de line 51 has a target sentence of "),
    ],
)
def test_a_translation_pair_too_long_for_the_model_fails_before_training(
    tmp_path, capsys, split, side, expected
):
    write_corpus(tmp_path, (("train", 50, 0), ("val", 5, 1), ("test", 5, 2)))
    long_line(tmp_path, split, side)
    # the validation set is not decoded: only the teacher-forced validation reads it
    cfg = small_config(tmp_path, rest="decode: {splits: [test]}")
    assert main(["train", str(cfg), "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and expected.format(root=tmp_path) in err[0], err
    assert "more than model.max_len=64; raise model.max_len, or lower data.max_sentence_len" in err[0]
    run = tmp_path / "runs" / "tiny_mt"
    assert not (run / "checkpoints").exists() and not (run / "metrics.jsonl").exists()


def test_bpe_dropout_that_may_sample_past_max_len_fails_before_training(tmp_path, capsys):
    write_corpus(tmp_path, (("train", 50, 0), ("val", 5, 1)))
    cfg = small_config(tmp_path, test=False, data=", bpe_dropout: 0.1, max_sentence_len: 100")
    assert main(["train", str(cfg), "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "data.max_sentence_len=100 tokens, 101 positions" in err[0], err
    assert "model.max_len=64; lower data.max_sentence_len to at most 63" in err[0]
    assert not (tmp_path / "runs" / "tiny_mt" / "checkpoints").exists()


def test_a_tree_too_long_for_the_model_fails_before_training(tmp_path, capsys):
    write_treebank(tmp_path)
    # 40 words (41 positions with EOS: the sentence fits max_len=48) in a tree of 20 NPs, whose
    # linearization is far longer than 48 tokens
    nps = " ".join("(NP (DT the) (NN dog))" for _ in range(20))
    with open(tmp_path / "wsj_0009.mrg", "a") as f:
        f.write(f"( (S {nps}) )\n")
    cfg = tmp_path / "parse.yaml"
    cfg.write_text(
        PARSE_CONFIG.format(out=tmp_path / "runs", root=tmp_path).replace(
            "max_sentence_len: 40", "max_sentence_len: 200"
        )
    )
    assert main(["train", str(cfg), "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    expected = f"data.valid: the tree of {tmp_path / 'wsj_0009.mrg'} line 31 has a linearized tree of "
    assert len(err) == 1 and expected in err[0], err
    assert "more than model.max_len=48" in err[0]
    run = tmp_path / "runs" / "tiny_parse"
    assert not (run / "checkpoints").exists() and not (run / "metrics.jsonl").exists()
