"""The benchmark harness: jobs in separate processes, interleaved in rounds, medians and ratios.

These machines drift by up to ±25% from one minute to the next, so every implementation of a
workload runs once per round, in turn (A, B, C, A, B, C, …), each in a fresh process; the report
uses medians over rounds and, for ratios, the median of the per-round ratios as well as the ratio
of medians. A job is ``python bench/jobs.py '<json spec>'``, which prints one JSON line.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

BENCH = Path(__file__).resolve().parent
RESULTS = BENCH / "results"


def run_job(spec: dict[str, Any], timeout: float = 900, script: Path = BENCH / "jobs.py") -> dict[str, Any]:
    """Run one job (``script SPEC``) in a fresh process; return its JSON result (or an ``error``
    entry)."""
    env = {
        **os.environ,
        "OMP_NUM_THREADS": str(spec.get("threads", 2)),
        "MKL_NUM_THREADS": str(spec.get("threads", 2)),
    }
    proc = subprocess.run(
        [sys.executable, str(script), json.dumps(spec)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )
    lines = [x for x in proc.stdout.splitlines() if x.startswith("{")]
    if proc.returncode != 0 or not lines:
        return {**spec, "error": (proc.stderr.strip().splitlines() or ["no output"])[-1]}
    return json.loads(lines[-1])


def interleaved(
    specs: dict[str, dict[str, Any]], rounds: int, log=print, script: Path = BENCH / "jobs.py"
) -> dict[str, list[dict[str, Any]]]:
    """``rounds`` rounds of every spec in turn; results per spec name, in round order."""
    out: dict[str, list[dict[str, Any]]] = {name: [] for name in specs}
    for r in range(rounds):
        for name, spec in specs.items():
            res = run_job(spec, script=script)
            out[name].append(res)
            if "error" in res:
                log(f"  round {r + 1} {name}: ERROR {res['error']}")
            else:
                log(
                    f"  round {r + 1} {name}: {res['value']:.4g} {res['unit']}"
                    f"  (params {res.get('params', 0):,}, peak RSS {res.get('peak_rss_mb', 0):.0f} MB)"
                )
    return out


def median(results: Sequence[dict[str, Any]], key: str = "value") -> float | None:
    vals = [r[key] for r in results if "error" not in r and key in r]
    return statistics.median(vals) if vals else None


def paired_ratio(a: Sequence[dict[str, Any]], b: Sequence[dict[str, Any]]) -> float | None:
    """Median over rounds of ``a/b`` (throughputs: > 1 means ``a`` is faster)."""
    ratios = [
        x["value"] / y["value"]
        for x, y in zip(a, b)
        if "error" not in x and "error" not in y and y["value"] > 0
    ]
    return statistics.median(ratios) if ratios else None


def machine() -> dict[str, Any]:
    info = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "platform": platform.platform(),
        "processor": platform.processor(),
        "cpu_count": os.cpu_count(),
        "date": time.strftime("%Y-%m-%d %H:%M"),
    }
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                info["cpu"] = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    from fullrank.fast import matmul_summary  # whether fullrank's defaults take oneDNN here

    info["cpu_matmul"] = matmul_summary()
    for pkg in ("transformers", "x-transformers"):  # distribution names (no __version__ in x_transformers)
        try:
            info[pkg] = importlib.metadata.version(pkg)
        except importlib.metadata.PackageNotFoundError:  # a missing peer is reported, not fatal
            info[pkg] = None
    return info


def write(name: str, markdown: str, data: dict[str, Any], out: Path = RESULTS) -> tuple[Path, Path]:
    out.mkdir(parents=True, exist_ok=True)
    md, js = out / f"{name}.md", out / f"{name}.json"
    md.write_text(markdown, encoding="utf-8")
    js.write_text(json.dumps(data, indent=1, default=str), encoding="utf-8")
    return md, js
