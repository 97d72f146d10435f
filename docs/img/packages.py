"""Draw docs/img/packages.png: fullrank's packages and who imports whom, read from the code.

    python docs/img/packages.py

Each box is a top-level part of ``src/fullrank``; an arrow ``A → B`` means some module of A
imports B (``errors``, which every part imports, is left out), found by the same walk over the
code as ``tests/test_layering.py``, which keeps the arrows pointing down or sideways.
"""

from __future__ import annotations

import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from tests.test_layering import PACKAGE, imported_parts, part_of  # noqa: E402

OUT = Path(__file__).with_suffix(".png")

# (x, y) of each part, rows by rank; the model's code on the left, the engine on the right
PLACES = {
    "cli": (2.6, 6),
    "recipes": (1.6, 5),
    "analysis": (3.6, 5),
    "interop": (4.9, 5),
    "training": (0.9, 4),
    "inference": (4.5, 4),
    "models": (0.9, 3),
    "data": (2.3, 3),
    "evaluation": (3.3, 3.6),
    "blocks": (0.9, 2),
    "fast": (4.5, 2),
    "layers": (0.9, 1),
}
MODEL = {"layers", "blocks", "models"}
NOTES = {
    "layers": "attend(), SDPA, plain KV cache",
    "blocks": "encoder and decoder blocks",
    "models": "the three model families",
    "fast": "the speed engine: fast.cpu(model)",
    "training": "one loop; no model class",
    "inference": "searches, translate, parse",
    "data": "tokenizers, corpora, batches",
    "evaluation": "BLEU, EVALB, SQuAD",
    "recipes": "experiment file → run",
    "analysis": "[B20] theorems, ranks, plots",
    "cli": "the fullrank command",
    "interop": "Hugging Face in and out",
}


def edges() -> set[tuple[str, str]]:
    """``(A, B)`` for every part A with a module that imports part B."""
    return {
        (part_of(path), dst)
        for path in PACKAGE.rglob("*.py")
        for dst in imported_parts(path)
        if dst != part_of(path) and part_of(path) in PLACES and dst in PLACES
    }


def main() -> None:
    fig, ax = plt.subplots(figsize=(9, 6.2))
    w, h = 1.15, 0.42
    for name, (x, y) in PLACES.items():
        color = "#cfe0f3" if name in MODEL else "#f6d3a8" if name == "fast" else "#e6e6e6"
        ax.add_patch(
            FancyBboxPatch(
                (x - w / 2, y - h / 2), w, h, boxstyle="round,pad=0.02", fc=color, ec="#444444", lw=1
            )
        )
        ax.text(x, y + 0.06, name, ha="center", va="center", fontsize=11, weight="bold")
        ax.text(x, y - 0.12, NOTES[name], ha="center", va="center", fontsize=6.5)
    for src, dst in sorted(edges()):
        (x0, y0), (x1, y1) = PLACES[src], PLACES[dst]
        engine = "fast" in (src, dst)
        ax.add_patch(
            FancyArrowPatch(
                (x0, y0 - h / 2 if y0 > y1 else y0),
                (x1, y1 + h / 2 if y0 > y1 else y1),
                arrowstyle="-|>",
                mutation_scale=9,
                color="#c06000" if engine else "#666666",
                lw=1.2 if engine else 0.7,
                alpha=0.9,
                connectionstyle="arc3,rad=0.08",
                shrinkA=2,
                shrinkB=2,
            )
        )
    ax.text(
        0.3,
        0.45,
        "blue: the papers' model code (imports nothing of fast)    orange: the speed "
        "engine and who enters it    every part also imports errors",
        fontsize=7,
    )
    ax.set_xlim(0.2, 5.6)
    ax.set_ylim(0.3, 6.5)
    ax.axis("off")
    fig.tight_layout()
    fig.savefig(OUT, dpi=130)
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
