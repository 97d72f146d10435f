"""Dependencies point one way: layers ← blocks ← models ← training/inference ← cli (STYLE.md §2).
Walks the package with ``ast`` and fails on an upward import."""

from __future__ import annotations

import ast
from pathlib import Path

import fullrank

PACKAGE = Path(fullrank.__file__).parent

# rank of each top-level part; a module may import only parts of lower or equal rank
RANK = {"errors": 0, "validation": 0, "paths": 0, "runtime": 0, "layers": 1, "blocks": 2,
        "models": 3, "data": 3, "evaluation": 3, "training": 4, "inference": 4, "analysis": 5,
        "recipes": 5, "cli": 6, "__init__": 7, "__main__": 7}
# parts nobody may import (besides the entry points)
LEAVES = {"cli", "analysis"}
# data and evaluation never import model code; training never names a model class
FORBIDDEN = {"data": {"models", "blocks", "layers"}, "evaluation": {"models", "blocks", "layers"},
             "inference": {"models"}, "analysis": {"recipes"}, "recipes": {"analysis"}}


def part_of(path: Path) -> str:
    rel = path.relative_to(PACKAGE)
    return rel.parts[0].removesuffix(".py")


def test_imports_point_one_way():
    problems = []
    for path in PACKAGE.rglob("*.py"):
        src = part_of(path)
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("fullrank."):
                dst = node.module.split(".")[1]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names if a.name.startswith("fullrank.")]
                if not names:
                    continue
                dst = names[0].split(".")[1]
            else:
                continue
            if dst == src:
                continue
            if src in RANK and dst in RANK and RANK[dst] > RANK[src]:
                problems.append(f"{path.relative_to(PACKAGE)} imports upward: {dst}")
            if dst in LEAVES and src not in ("cli", "__init__", "__main__"):
                problems.append(f"{path.relative_to(PACKAGE)} imports {dst}")
            if dst in FORBIDDEN.get(src, set()):
                problems.append(f"{path.relative_to(PACKAGE)} ({src}) imports {dst}")
    assert not problems, problems
