"""Ways to damage or craft a checkpoint, as a disk, an editor or an attacker would."""

from __future__ import annotations

import hashlib
import json
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fullrank.training.integrity import META_DIGEST, meta_digest

MODEL, STATE, META, TOKENIZER = ("model.safetensors", "optimizer.safetensors", "meta.json", "tokenizer.json")


def truncate(path: Path, keep: float = 0.5) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])


def flip_byte(path: Path, from_end: int = 3) -> None:
    """Flip one bit of a byte near the end (inside the last tensor): the file still parses."""
    data = bytearray(path.read_bytes())
    data[-from_end] ^= 0x40
    path.write_bytes(bytes(data))


def write_meta(ckpt: Path, meta: dict[str, Any], *, seal: bool = True) -> None:
    """Write ``meta.json``; with ``seal`` its recorded SHA-256 of itself is made to match, as a
    crafted checkpoint would (what is checked next is the content), without it the file is as
    an editor leaves it."""
    if seal and META_DIGEST in meta:
        meta[META_DIGEST] = meta_digest(meta)
    (ckpt / META).write_text(json.dumps(meta))


def edit_meta(ckpt: Path, edit: Callable[[dict[str, Any]], Any], *, seal: bool = True) -> None:
    meta = json.loads((ckpt / META).read_text())
    edit(meta)
    write_meta(ckpt, meta, seal=seal)


def rewrite(ckpt: Path, name: str, data: bytes) -> None:
    """Replace file ``name`` and record its checksum, as a crafted checkpoint would."""
    (ckpt / name).write_bytes(data)
    edit_meta(
        ckpt,
        lambda m: m["files"].update({name: {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}}),
    )


def safetensors_bytes(header: dict[str, Any], payload: bytes = b"") -> bytes:
    """A safetensors file with this header (as crafted: sizes and offsets need not agree)."""
    text = json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + payload


def poison(ckpt: Path, name: str = MODEL, value: float = float("nan")) -> str:
    """Put ``value`` (NaN, an infinity) into the first floating-point tensor of file ``name``
    and record the new checksum, as a run that diverged before saving would leave it; returns
    the tensor's name."""
    from safetensors import safe_open
    from safetensors.torch import save

    with safe_open(str(ckpt / name), framework="pt") as f:
        metadata = f.metadata()
        tensors = {k: f.get_tensor(k) for k in f.keys()}
    key = next(k for k in sorted(tensors) if tensors[k].is_floating_point())
    tensors[key].view(-1)[0] = value
    rewrite(ckpt, name, save(tensors, metadata=metadata))
    return key
