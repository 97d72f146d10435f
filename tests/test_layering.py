"""Dependencies point one way: layers ← blocks ← models ← training/inference ← recipes ← sweeps
← cli (docs/design.md), and the speed engine (``fast``) stands apart from the model's code. Walks
the package with ``ast`` and fails on an upward or forbidden import."""

from __future__ import annotations

import ast
from pathlib import Path

import fullrank

PACKAGE = Path(fullrank.__file__).parent

# rank of each top-level part; a module may import only parts of lower or equal rank
RANK = {
    "errors": 0,
    "validation": 0,
    "paths": 0,
    "output": 0,
    "layers": 1,
    "blocks": 2,
    "fast": 2,
    "models": 3,
    "data": 3,
    "evaluation": 3,
    "training": 4,
    "inference": 4,
    "analysis": 5,
    "recipes": 5,
    "interop": 5,
    "sweeps": 6,
    "cli": 7,
    "__init__": 8,
    "__main__": 8,
}
# parts nobody may import (besides the entry points)
LEAVES = {"cli", "analysis"}
# The papers' model code imports nothing of the speed engine, which plugs into its seams; the
# engine knows layers alone (no model class). data and evaluation import no model code.
# Training never names a model class and runs no speed setting itself (the recipes enter
# fast.cpu around it). Inference receives a step function, never a model class.
FORBIDDEN = {
    "layers": {"fast"},
    "blocks": {"fast"},
    "models": {"fast"},
    "fast": {"blocks", "models"},
    "data": {"models", "blocks", "layers", "fast"},
    "evaluation": {"models", "blocks", "layers", "fast"},
    "training": {"models", "blocks", "fast"},
    "inference": {"models"},
    "analysis": {"recipes"},
    "recipes": {"analysis"},
    "sweeps": {"analysis"},
}
# The one module allowed past FORBIDDEN, and why: loading a checkpoint builds the model its
# config describes, and writing one stores that config (the model families' own table).
EXCEPTIONS = {("training/checkpoints.py", "models")}


def part_of(path: Path, package: Path = PACKAGE) -> str:
    return path.relative_to(package).parts[0].removesuffix(".py")


def imported_parts(path: Path) -> list[str]:
    """The top-level parts of fullrank that the module at ``path`` imports, anywhere in it."""
    parts = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module] if node.module != "fullrank" else [f"fullrank.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        parts += [n.split(".")[1] for n in names if n.startswith("fullrank.")]
    return parts


def problems_in(package: Path) -> list[str]:
    problems = []
    for path in sorted(package.rglob("*.py")):
        src, rel = part_of(path, package), path.relative_to(package).as_posix()
        for dst in imported_parts(path):
            if dst == src:
                continue
            if src in RANK and dst in RANK and RANK[dst] > RANK[src]:
                problems.append(f"{rel} imports upward: {dst}")
            if dst in LEAVES and src not in ("cli", "__init__", "__main__"):
                problems.append(f"{rel} imports {dst}")
            if dst in FORBIDDEN.get(src, set()) and (rel, dst) not in EXCEPTIONS:
                problems.append(f"{rel} ({src}) imports {dst}")
    return problems


def test_imports_point_one_way():
    assert problems_in(PACKAGE) == []


def test_the_models_code_imports_no_speed_machinery_and_training_no_model_class():
    """The rules this file states, each seen to fail on a module that breaks it."""
    assert imported_parts(PACKAGE / "fast" / "engine.py")  # the walk sees imports at all
    for src, dst in (
        ("layers", "fast"),
        ("blocks", "fast"),
        ("models", "fast"),
        ("training", "models"),
        ("training", "fast"),
        ("fast", "models"),
    ):
        assert dst in FORBIDDEN[src], (src, dst)
    assert "from fullrank import fast" in (PACKAGE / "inference" / "translate.py").read_text()


def test_a_forbidden_import_is_reported(tmp_path):
    """The walk catches both spellings of an import, also inside a function."""
    (tmp_path / "layers").mkdir()
    (tmp_path / "training").mkdir()
    (tmp_path / "layers" / "x.py").write_text("from fullrank import fast\n")
    (tmp_path / "training" / "y.py").write_text("def f():\n    import fullrank.models.config\n")
    assert problems_in(tmp_path) == [
        "layers/x.py imports upward: fast",
        "layers/x.py (layers) imports fast",
        "training/y.py (training) imports models",
    ]
