"""Checkpoints: round trip, atomicity, pruning, and one-line errors for bad files."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
import torch
from safetensors.torch import load_file
from safetensors.torch import save as save

from fullrank.errors import CheckpointError
from fullrank.models import DecoderLM, DecoderLMConfig, EncoderDecoder, EncoderDecoderConfig
from fullrank.training.checkpoints import (
    META_FILE,
    MODEL_FILE,
    check_readable,
    latest_checkpoint,
    load_checkpoint,
    load_training_state,
    load_weights,
    newest_readable,
    read_meta,
    resolve,
    save_training_checkpoint,
    save_weights,
    step_dirs,
    write_checkpoint,
)
from fullrank.training.config import TrainConfig
from fullrank.training.optim import make_optimizer
from tests.robustness.damage import write_meta


def tiny_lm(**kw) -> tuple[DecoderLM, DecoderLMConfig]:
    cfg = DecoderLMConfig(
        **{**dict(vocab_size=13, d_model=16, n_heads=2, d_head=5, d_ff=24, n_layers=2, seq_len=8), **kw}
    )
    return DecoderLM(cfg), cfg


def test_weights_round_trip_with_tied_embeddings(tmp_path):
    model = EncoderDecoder(
        EncoderDecoderConfig(vocab_size=17, d_model=12, n_heads=3, d_ff=20, n_layers=1, max_len=16, seq_len=8)
    )
    save_weights(model, tmp_path / MODEL_FILE)
    other = EncoderDecoder(model.config)
    load_weights(other, tmp_path / MODEL_FILE)
    for (n, a), (_, b) in zip(model.state_dict().items(), other.state_dict().items()):
        assert torch.equal(a, b), n
    # tied: still one tensor after loading
    assert other.src_embed.token.weight is other.tgt_embed.token.weight


def test_training_state_round_trip_restores_optimizer_and_rng(tmp_path):
    model, cfg = tiny_lm()
    opt = make_optimizer(model, TrainConfig())
    model(torch.randint(0, 13, (2, 8))).sum().backward()
    opt.step()
    torch.manual_seed(123)
    path = save_training_checkpoint(tmp_path, 1, model, cfg, None, opt, {"loop": {}}, keep_last=3)
    expected_rand = torch.rand(3)
    model2, _ = tiny_lm()
    opt2 = make_optimizer(model2, TrainConfig())
    torch.manual_seed(999)
    load_training_state(path, model2, opt2)
    assert torch.equal(torch.rand(3), expected_rand)
    s1, s2 = opt.state_dict(), opt2.state_dict()
    for pid in s1["state"]:
        for k in s1["state"][pid]:
            assert torch.equal(s1["state"][pid][k], s2["state"][pid][k])


def test_latest_pointer_pruning_and_stale_temporaries(tmp_path):
    model, cfg = tiny_lm()
    opt = make_optimizer(model, TrainConfig())
    (tmp_path / ".step-00000009.tmp-1234").mkdir()  # a save killed half-way
    (tmp_path / ".latest.tmp-1234").write_text("step-")
    for step in range(1, 6):
        save_training_checkpoint(tmp_path, step, model, cfg, None, opt, {}, keep_last=2)
    assert [p.name for p in step_dirs(tmp_path)] == ["step-00000004", "step-00000005"]
    latest = latest_checkpoint(tmp_path)
    assert latest is not None and latest.name == "step-00000005"
    assert not list(tmp_path.glob(".*"))
    (tmp_path / "latest").write_text("step-00000004")
    assert resolve(tmp_path / "latest").name == "step-00000004"  # the pointer file itself
    (tmp_path / "latest").write_text("step-00000099")  # stale pointer: fall back to newest
    latest = latest_checkpoint(tmp_path)
    assert latest is not None and latest.name == "step-00000005"


def test_truncated_file_is_one_line_naming_it(tmp_path):
    model, cfg = tiny_lm()
    path = write_checkpoint(tmp_path / "ckpt", model, cfg, None, {"task": "lm"})
    data = (path / MODEL_FILE).read_bytes()
    (path / MODEL_FILE).write_bytes(data[: len(data) // 2])
    with pytest.raises(
        CheckpointError,
        match=rf"model\.safetensors: {len(data) // 2:,} bytes "
        rf"where {len(data):,} were written",
    ) as info:
        load_checkpoint(path)
    assert "\n" not in str(info.value)
    # a checkpoint without checksums (as written before they were recorded): the format check
    drop_checksums(path)
    with pytest.raises(
        CheckpointError,
        match=r"model\.safetensors: not a readable safetensors "
        r"file .*truncated or corrupt",
    ):
        load_checkpoint(path)
    (path / MODEL_FILE).write_bytes(b"garbage" * 10)
    with pytest.raises(CheckpointError, match="truncated or corrupt"):
        load_checkpoint(path)


@pytest.mark.parametrize(
    "edit",
    [
        lambda m: m["model"].update(n_heads=2 * m["model"]["n_heads"]),  # the same weights, other heads
        lambda m: m.update(task="mt"),
        lambda m: m.pop("files"),  # no checksums: would switch every file's check off
        lambda m: m["files"][MODEL_FILE].update(sha256="0" * 64),
    ],
)
def test_an_edited_meta_json_is_refused_and_verify_says_so(tmp_path, edit):
    model, cfg = tiny_lm()
    path = write_checkpoint(tmp_path / "ckpt", model, cfg, None, {"task": "lm"})
    meta = json.loads((path / META_FILE).read_text())
    edit(meta)
    write_meta(path, meta, seal=False)  # as an editor leaves it
    message = r"meta\.json: its content does not match the SHA-256 recorded in it"
    with pytest.raises(CheckpointError, match=message) as info:
        load_checkpoint(path)
    assert "\n" not in str(info.value)
    with pytest.raises(CheckpointError, match=message):
        check_readable(path)


def test_meta_json_is_checked_by_content_not_by_its_bytes(tmp_path):
    model, cfg = tiny_lm()
    path = write_checkpoint(tmp_path / "ckpt", model, cfg, None, {"task": "lm", "note": "ünïcode"})
    meta = json.loads((path / META_FILE).read_text())
    (path / META_FILE).write_text(json.dumps(dict(reversed(meta.items())), indent=3, ensure_ascii=False))
    assert check_readable(path) == "meta.json and 1 file match their SHA-256"
    load_checkpoint(path)


def drop_checksums(ckpt):
    """Make ``ckpt`` as written before checksums were recorded."""
    meta = json.loads((ckpt / META_FILE).read_text())
    del meta["files"], meta["meta_sha256"]
    write_meta(ckpt, meta)


def rewrite(ckpt, name, data: bytes) -> None:
    """Replace file ``name`` of ``ckpt`` and record its new checksum, as a crafted checkpoint
    would: what is checked next is the content itself."""
    (ckpt / name).write_bytes(data)
    meta = json.loads((ckpt / META_FILE).read_text())
    meta["files"][name] = {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    write_meta(ckpt, meta)


def test_a_flipped_byte_in_the_tensor_data_is_caught_by_its_checksum(tmp_path):
    model, cfg = tiny_lm()
    path = write_checkpoint(tmp_path / "ckpt", model, cfg, None, {"task": "lm"})
    data = bytearray((path / MODEL_FILE).read_bytes())
    data[-3] ^= 0x40  # inside the last tensor: the file still parses, the weights are wrong
    (path / MODEL_FILE).write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match=r"model\.safetensors: SHA-256 does not match"):
        load_checkpoint(path)
    assert "3 files match" not in check_readable_or_error(path)
    drop_checksums(path)  # an old checkpoint loads as before (no checksum to compare with)
    assert load_checkpoint(path).config == cfg


def check_readable_or_error(path) -> str:
    try:
        return check_readable(path)
    except CheckpointError as e:
        return str(e)


def test_checksums_are_recorded_and_verified(tmp_path):
    model, cfg = tiny_lm()
    opt = make_optimizer(model, TrainConfig())
    ckpt = save_training_checkpoint(tmp_path, 1, model, cfg, None, opt, {"loop": {}}, keep_last=2)
    meta = json.loads((ckpt / META_FILE).read_text())
    assert set(meta["files"]) == {MODEL_FILE, "optimizer.safetensors"}
    for name, d in meta["files"].items():
        assert d["sha256"] == hashlib.sha256((ckpt / name).read_bytes()).hexdigest()
    assert check_readable(ckpt) == "meta.json and 2 files match their SHA-256"
    (ckpt / "notes.txt").write_text("added later")
    with pytest.raises(CheckpointError, match=r"notes\.txt: not recorded in .*meta\.json"):
        check_readable(ckpt)


@pytest.mark.parametrize(
    "edit, message",
    [
        (
            lambda m: m["model"].update(vocab_size=10**12),
            r"its model config does not describe model\.safetensors \(tensor '.*' has shape",
        ),
        (lambda m: m.update(model=[1, 2]), r"model = \[1, 2\]: should be a valid dictionary"),
        (lambda m: m["model"].update(d_model="wide"), r"d_model = 'wide': should be a valid integer"),
        (lambda m: m["model"].update(dropout=float("nan")), r"invalid model config"),
        (lambda m: m.update(task=["lm"]), r"task = \['lm'\]: should be 'lm', 'mt'"),
        (lambda m: m.update(data=[]), r"data = \[\]: should be a valid dictionary"),
        (lambda m: m.update(format="other"), r"format 'other' is not 'fullrank-checkpoint-v1'"),
        (lambda m: m["files"].update({"../x": m["files"][MODEL_FILE]}), r"files\.\.\./x"),
    ],
)
def test_metadata_is_validated_before_any_model_is_built(tmp_path, edit, message):
    model, cfg = tiny_lm()
    path = write_checkpoint(tmp_path / "ckpt", model, cfg, None, {"task": "lm"})
    meta = json.loads((path / META_FILE).read_text())
    edit(meta)
    write_meta(path, meta)
    with pytest.raises(CheckpointError, match=message) as info:
        load_checkpoint(path)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    "data, message",
    [
        (b"\xff\xfe{}", r"meta\.json: not UTF-8 \(byte 0xff at offset 0\)"),
        (b'{"format": ', r"meta\.json: not valid JSON"),
        (b"[]", r"meta\.json: holds a JSON list, not an object"),
    ],
)
def test_undecodable_metadata_is_one_line(tmp_path, data, message):
    model, cfg = tiny_lm()
    path = write_checkpoint(tmp_path / "ckpt", model, cfg, None, {"task": "lm"})
    (path / META_FILE).write_bytes(data)
    with pytest.raises(CheckpointError, match=message):
        load_checkpoint(path)


def test_weights_metadata_aliases_must_be_a_json_mapping(tmp_path):
    model, cfg = tiny_lm()
    path = write_checkpoint(tmp_path / "ckpt", model, cfg, None, {"task": "lm"})
    tensors = load_file(str(path / MODEL_FILE))
    for aliases, message in (("{", "is not valid JSON"), ('["a"]', "is not a mapping")):
        rewrite(path, MODEL_FILE, save(tensors, metadata={"format": "x", "aliases": aliases}))
        with pytest.raises(CheckpointError, match=rf"'aliases' metadata {message}"):
            load_checkpoint(path)


def test_paths_that_leave_the_run_directory_are_refused(tmp_path):
    model, cfg = tiny_lm()
    opt = make_optimizer(model, TrainConfig())
    root = tmp_path / "run" / "checkpoints"
    save_training_checkpoint(root, 1, model, cfg, None, opt, {"loop": {}}, keep_last=2)
    outside = write_checkpoint(tmp_path / "elsewhere" / "step-00000009", model, cfg, None, {})
    for pointer in ("../../elsewhere/step-00000009", str(outside), "step-1/../../x"):
        (root / "latest").write_text(pointer)
        with pytest.raises(
            CheckpointError,
            match=r"latest: names .*not a step-N checkpoint "
            r"inside",
        ):
            load_checkpoint(tmp_path / "run")
    (root / "latest").write_bytes(b"step-\xff")
    with pytest.raises(CheckpointError, match=r"latest: not a UTF-8 checkpoint name"):
        load_checkpoint(tmp_path / "run")
    (root / "latest").write_text("step-00000002")
    (root / "step-00000002").symlink_to(outside)  # a step directory that is a link out
    with pytest.raises(CheckpointError, match="not a step-N checkpoint inside"):
        load_checkpoint(tmp_path / "run")
    (root / "latest").write_text("step-00000001")
    (root / "step-00000001" / MODEL_FILE).unlink()  # a weights file that is a link out
    (root / "step-00000001" / MODEL_FILE).symlink_to(outside / MODEL_FILE)
    with pytest.raises(CheckpointError, match="leads outside its checkpoint directory"):
        load_checkpoint(tmp_path / "run")


def test_optimizer_state_of_other_shapes_is_one_line(tmp_path):
    model, cfg = tiny_lm()
    opt = make_optimizer(model, TrainConfig())
    model(torch.randint(0, 13, (2, 8))).sum().backward()
    opt.step()
    ckpt = save_training_checkpoint(tmp_path, 1, model, cfg, None, opt, {"loop": {}}, keep_last=2)
    tensors = load_file(str(ckpt / "optimizer.safetensors"))
    key = next(k for k in tensors if k.endswith(".exp_avg") and tensors[k].dim() == 2)
    tensors[key] = tensors[key][:, :-1].contiguous()
    rewrite(ckpt, "optimizer.safetensors", save(tensors))
    fresh, _ = tiny_lm()
    with pytest.raises(
        CheckpointError,
        match=rf"optimizer tensor '{key}' has shape .* but its "
        rf"parameter has",
    ):
        load_training_state(ckpt, fresh, make_optimizer(fresh, TrainConfig()))


def test_an_existing_directory_is_replaced_only_if_it_is_a_checkpoint(tmp_path):
    model, cfg = tiny_lm()
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    for replace in (False, True):
        with pytest.raises(CheckpointError, match="already exists"):
            write_checkpoint(tmp_path / "mine", model, cfg, None, {}, replace=replace)
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep me"
    first = write_checkpoint(tmp_path / "ckpt", model, cfg, None, {"n": 1})
    with pytest.raises(CheckpointError, match="already exists"):
        write_checkpoint(first, model, cfg, None, {"n": 2})
    write_checkpoint(first, model, cfg, None, {"n": 2}, replace=True)
    assert read_meta(first)["n"] == 2 and not list(tmp_path.glob(".*"))


def test_a_checkpoint_made_from_another_writes_its_own_format_model_and_files(tmp_path):
    model, cfg = tiny_lm()
    first = write_checkpoint(tmp_path / "a", model, cfg, None, {"task": "lm"})
    stale = {**read_meta(first), "model": {"d_model": 1}, "optimizer": {"steps": 9}, "format": 0}
    stale["loop"] = {"step": 9}
    second = read_meta(write_checkpoint(tmp_path / "b", model, cfg, None, stale))
    assert second["model"] == read_meta(first)["model"] and second["format"] == read_meta(first)["format"]
    assert "optimizer" not in second and "loop" not in second and second["task"] == "lm"
    assert set(second["files"]) == {MODEL_FILE}
    load_checkpoint(tmp_path / "b")  # the checksums are the new files'


def test_resume_passes_over_unreadable_checkpoints(tmp_path):
    model, cfg = tiny_lm()
    opt = make_optimizer(model, TrainConfig())
    for step in (1, 2, 3):
        save_training_checkpoint(tmp_path, step, model, cfg, None, opt, {"loop": {}}, keep_last=3)
    newest = tmp_path / "step-00000003"
    (newest / MODEL_FILE).write_bytes((newest / MODEL_FILE).read_bytes()[:100])
    found, notes = newest_readable(tmp_path)
    assert found == tmp_path / "step-00000002"
    assert len(notes) == 1 and notes[0].startswith("step-00000003 cannot be resumed from: ")
    (tmp_path / "step-00000002" / META_FILE).write_text("{")
    (tmp_path / "step-00000001" / "optimizer.safetensors").unlink()
    with pytest.raises(CheckpointError, match="no checkpoint can be resumed from"):
        newest_readable(tmp_path)


def test_other_architecture_names_the_first_mismatched_tensor(tmp_path):
    model, cfg = tiny_lm(d_head=5)
    save_weights(model, tmp_path / MODEL_FILE)
    other, _ = tiny_lm(d_head=7)
    with pytest.raises(
        CheckpointError,
        match=r"tensor 'layers\.0\.self_attn\.qkv_proj\.weight' has shape "
        r"\(30, 16\) but the model expects \(42, 16\)",
    ):
        load_weights(other, tmp_path / MODEL_FILE)
    deeper, _ = tiny_lm(n_layers=3)
    with pytest.raises(CheckpointError, match=r"tensor 'layers\.2\..*' is missing"):
        load_weights(deeper, tmp_path / MODEL_FILE)


def test_missing_and_non_checkpoint_paths(tmp_path):
    with pytest.raises(CheckpointError, match="no such checkpoint"):
        load_checkpoint(tmp_path / "nope")
    with pytest.raises(CheckpointError, match="no complete checkpoint found"):
        load_checkpoint(tmp_path)


def test_load_checkpoint_builds_the_model(tmp_path):
    model, cfg = tiny_lm()
    write_checkpoint(tmp_path / "run" / "checkpoints" / "step-00000001", model, cfg, None, {"task": "lm"})
    ckpt = load_checkpoint(tmp_path / "run")  # a run directory resolves to its latest
    assert ckpt.config == cfg and not ckpt.model.training
    x = torch.randint(0, 13, (1, 8))
    torch.testing.assert_close(ckpt.model(x), model.eval()(x))


def test_a_checkpoint_off_the_interval_is_kept_only_while_it_is_the_newest(tmp_path):
    # Saves every 4 steps; a session stopped at step 10 (off the interval) and resumed.
    model, cfg = tiny_lm()
    opt = make_optimizer(model, TrainConfig())

    def save(step):
        save_training_checkpoint(tmp_path, step, model, cfg, None, opt, {}, keep_last=3, every=4)
        return [p.name[-2:] for p in step_dirs(tmp_path)]

    assert [save(s) for s in (4, 8)][-1] == ["04", "08"]
    assert save(10) == ["04", "08", "10"]  # the stop's checkpoint, newest: kept, counted
    assert save(12) == ["04", "08", "12"]  # superseded: dropped, takes no place
    assert save(13) == ["08", "12", "13"]  # a run's final step, off the interval
    assert save(16) == ["08", "12", "16"]
    # without an interval every checkpoint counts, as before
    save_training_checkpoint(tmp_path, 17, model, cfg, None, opt, {}, keep_last=3)
    assert [p.name[-2:] for p in step_dirs(tmp_path)] == ["12", "16", "17"]


def test_resuming_with_another_interval_drops_no_checkpoint_of_the_old_one(tmp_path):
    # saved every 4 steps, resumed saving every 5: 08 and 12 were on their own interval
    model, cfg = tiny_lm()
    opt = make_optimizer(model, TrainConfig())
    for step in (4, 8, 12):
        save_training_checkpoint(tmp_path, step, model, cfg, None, opt, {}, keep_last=3, every=4)
    save_training_checkpoint(tmp_path, 15, model, cfg, None, opt, {}, keep_last=3, every=5)
    assert [p.name[-2:] for p in step_dirs(tmp_path)] == ["08", "12", "15"]


KILL_WHILE_SAVING = textwrap.dedent("""
    import sys, torch
    from pathlib import Path
    from fullrank.models import DecoderLM, DecoderLMConfig
    from fullrank.training.checkpoints import save_training_checkpoint
    from fullrank.training.config import TrainConfig
    from fullrank.training.optim import make_optimizer
    cfg = DecoderLMConfig(vocab_size=5000, d_model=256, n_heads=4, d_ff=512, n_layers=2, seq_len=8)
    model = DecoderLM(cfg)
    opt = make_optimizer(model, TrainConfig())
    model(torch.randint(0, 5000, (1, 8))).sum().backward()
    opt.step()
    root = Path(sys.argv[1])
    step = 0
    while True:
        step += 1
        save_training_checkpoint(root, step, model, cfg, None, opt, {"loop": {}}, keep_last=2)
        print(step, flush=True)
""")


@pytest.mark.slow
def test_sigkill_during_saves_always_leaves_a_loadable_checkpoint(tmp_path):
    script = tmp_path / "saver.py"
    script.write_text(KILL_WHILE_SAVING)
    for attempt in range(3):
        root = tmp_path / f"root{attempt}"
        proc = subprocess.Popen([sys.executable, str(script), str(root)], stdout=subprocess.PIPE, text=True)
        assert proc.stdout is not None
        for _ in range(2 + attempt):
            proc.stdout.readline()  # at least one complete save
        time.sleep(0.05 * attempt)  # land somewhere inside a later save
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        ckpt = load_checkpoint(root)
        assert ckpt.meta["step"] >= 1
