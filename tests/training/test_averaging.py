"""Checkpoint averaging: the elementwise mean, tied weights averaged once, loadable."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from fullrank.errors import CheckpointError
from fullrank.models import DecoderLM, DecoderLMConfig, EncoderDecoder, EncoderDecoderConfig
from fullrank.training.averaging import average_checkpoints, last_checkpoints, uneven_spacing
from fullrank.training.checkpoints import load_checkpoint, save_training_checkpoint, write_checkpoint

CFG = EncoderDecoderConfig(
    vocab_size=19, d_model=12, n_heads=3, d_head=5, d_ff=20, n_layers=1, max_len=16, seq_len=8
)


def saved(tmp_path, i: int) -> tuple[EncoderDecoder, Path]:
    torch.manual_seed(i)
    model = EncoderDecoder(CFG)
    path = write_checkpoint(
        tmp_path / "run" / "checkpoints" / f"step-{i:08d}", model, CFG, None, {"task": "mt"}
    )
    return model, path


def test_average_of_three_with_three_way_tied_embeddings(tmp_path):
    models, paths = zip(*(saved(tmp_path, i) for i in (1, 2, 3)))
    out = average_checkpoints(list(paths), tmp_path / "avg")
    avg = load_checkpoint(out).model
    assert isinstance(avg, EncoderDecoder)
    for name, p in avg.named_parameters():
        expected = sum(dict(m.named_parameters())[name] for m in models) / 3
        torch.testing.assert_close(p, expected, msg=name)
    # the shared matrix is still one tensor, equal to the mean of the three shared matrices
    assert avg.src_embed.token.weight is avg.tgt_embed.token.weight
    mean = sum(m.tgt_embed.token.weight for m in models) / 3
    torch.testing.assert_close(avg.tgt_embed.token.weight, mean)
    assert load_checkpoint(out).meta["averaged"][0].endswith("step-00000001")


def test_last_k_and_architecture_mismatch(tmp_path):
    for i in (1, 2, 3, 4):
        saved(tmp_path, i)
    assert [p.name for p in last_checkpoints(tmp_path / "run", 2)] == ["step-00000003", "step-00000004"]
    with pytest.raises(CheckpointError, match="fewer than --last 9"):
        last_checkpoints(tmp_path / "run", 9)
    lm_cfg = DecoderLMConfig(vocab_size=19, d_model=12, n_heads=3, d_ff=20, n_layers=1, seq_len=8)
    other = write_checkpoint(tmp_path / "lm", DecoderLM(lm_cfg), lm_cfg, None, {"task": "lm"})
    with pytest.raises(CheckpointError, match="not in every checkpoint"):
        average_checkpoints([tmp_path / "run" / "checkpoints" / "step-00000001", other], tmp_path / "bad")


def test_uneven_spacing_is_noted_but_a_short_last_gap_is_not():
    def note(*steps):
        return uneven_spacing([Path(f"run/checkpoints/step-{s:08d}") for s in steps])

    # evenly spaced, the run's final step after the last interval: what a run keeps
    assert note(14800, 15200, 15600, 16000, 16055) is None
    assert note(400, 800) is None and note(400) is None
    # a checkpoint from a session's stop among them
    assert "15200, 15600, 15772, 16000, 16055" in note(15200, 15600, 15772, 16000, 16055)


def test_too_few_checkpoints_say_how_many_and_which_setting_gives_more(tmp_path):
    model = EncoderDecoder(CFG)
    opt = torch.optim.Adam(model.parameters())
    root = tmp_path / "run" / "checkpoints"
    for step in (400, 800, 1200):
        save_training_checkpoint(
            root, step, model, CFG, None, opt, {"train": {"keep_last": 3}}, keep_last=3, every=400
        )
    with pytest.raises(CheckpointError) as e:
        last_checkpoints(tmp_path / "run", 5)
    assert str(e.value) == (
        f"{tmp_path / 'run'}: 3 checkpoints (steps 400, 800, 1200), fewer than --last 5; average "
        f"those with --last 3, or keep more (train.keep_last, 3 in this run)"
    )
    with pytest.raises(
        CheckpointError, match="fewer than decode.average_last 4; average those with decode.average_last 3"
    ):
        last_checkpoints(tmp_path / "run", 4, setting="decode.average_last")
    # all that were saved are kept: the run saved too seldom
    save_training_checkpoint(
        root, 1600, model, CFG, None, opt, {"train": {"keep_last": 8}}, keep_last=8, every=400
    )
    with pytest.raises(
        CheckpointError,
        match=r"4 checkpoints \(steps 400, 800, 1200, 1600\), "
        r"fewer than --last 5; average those with --last 4, "
        r"or save more often \(train.save_every, every 400 "
        r"steps in this run\)$",
    ):
        last_checkpoints(tmp_path / "run", 5)
    with pytest.raises(CheckpointError, match="no checkpoints, fewer than --last 2"):
        last_checkpoints(tmp_path / "empty", 2)
