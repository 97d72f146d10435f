"""Run a chosen subset of a folder of experiment files and tabulate them in [V17] Table 3's layout.

``configs/mt/table3/`` holds every row of Table 3 scaled to Multi30k; :func:`run_grid` trains
(or resumes, or simply re-reads) each chosen row and writes ``table.md`` and ``table.csv``:
the row's settings, parameters, dev perplexity and dev BLEU, beside the paper's figures.
"""

from __future__ import annotations

import csv
import json
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from fullrank.errors import ConfigError, closest
from fullrank.models.presets import TABLE3
from fullrank.recipes.config import ExperimentConfig, load_experiment

# our scaled rows → the paper's rows they scale (the same change by the same ratio)
PAPER_ROW = {"base": "base", "A_h1": "A_h1", "A_h4": "A_h4", "A_h16": "A_h16", "A_h32": "A_h32",
             "B_dk8": "B_dk16", "B_dk16": "B_dk32", "C_N1": "C_N2", "C_N2": "C_N4",
             "C_N4": "C_N8", "C_d128": "C_d256", "C_d512": "C_d1024", "C_dff512": "C_dff1024",
             "C_dff2048": "C_dff4096", "D_pdrop0.0": "D_pdrop0.0", "D_pdrop0.5": "D_pdrop0.2",
             "D_ls0.0": "D_ls0.0", "D_ls0.2": "D_ls0.2", "E_learned": "E_learned", "big": "big"}
COLUMNS = ["row", "N", "d_model", "d_ff", "h", "d_k", "d_v", "P_drop", "eps_ls", "steps",
           "params_M", "dev_PPL", "dev_BLEU", "dev_BLEU_tok_lc", "paper_row", "paper_PPL",
           "paper_BLEU", "paper_params_M"]


def grid_rows(folder: Path) -> dict[str, Path]:
    """Row name → experiment file, for every ``*.yaml``/``*.toml`` in ``folder``, in the
    paper's order for Table 3's rows (base, A … E, big), then the others by name with numbers
    compared as numbers (``A_h4`` before ``A_h16``)."""
    files = [*folder.glob("*.yaml"), *folder.glob("*.toml")]
    if not files:
        raise ConfigError(f"{folder}: no experiment files (*.yaml, *.toml) in this folder")
    paper_order = {name: i for i, name in enumerate(PAPER_ROW)}

    def key(f: Path) -> tuple:
        natural = [(0, int(p), "") if p.isdigit() else (1, 0, p)
                   for p in re.split(r"(\d+)", f.stem) if p]
        return paper_order.get(f.stem, len(paper_order)), natural, f.suffix
    return {f.stem: f for f in sorted(files, key=key)}


def choose(rows: dict[str, Path], wanted: Sequence[str]) -> list[str]:
    """Expand ``A`` (every row starting with ``A_``), exact names, or ``all``; keep the grid's order."""
    if not wanted or list(wanted) == ["all"]:
        return list(rows)
    chosen: list[str] = []
    for w in wanted:
        match = [r for r in rows if r == w or r.startswith(f"{w}_")]
        if not match:
            raise ConfigError(f"no row '{w}' in the grid{closest(w, rows)}; rows are: "
                              + ", ".join(rows))
        chosen += [m for m in match if m not in chosen]
    return chosen


def table_row(name: str, exp: ExperimentConfig, results: dict[str, Any]) -> dict[str, Any]:
    """One line of the table from an experiment and its ``results.json``."""
    cfg = exp.model_config(vocab_size=1)
    dh, dv = cfg.head_sizes
    bleu = results.get("extra", {}).get("bleu", {}).get("valid.last", {})
    paper = {r.name: r for r in TABLE3}.get(PAPER_ROW.get(name, ""))
    return {
        "row": name, "N": cfg.n_layers, "d_model": cfg.d_model, "d_ff": cfg.d_ff,
        "h": cfg.n_heads, "d_k": dh, "d_v": dv, "P_drop": cfg.dropout,
        "eps_ls": exp.train.label_smoothing, "steps": results.get("steps"),
        "params_M": round(results["params"] / 1e6, 2) if "params" in results else None,
        "dev_PPL": round(results["valid"]["ppl"], 2) if results.get("valid") else None,
        "dev_BLEU": round(bleu["sacrebleu"], 2) if bleu else None,
        "dev_BLEU_tok_lc": round(bleu["tokenized_lowercased"], 2) if bleu else None,
        "paper_row": paper.name if paper else None,
        "paper_PPL": paper.paper_ppl if paper else None,
        "paper_BLEU": paper.paper_bleu if paper else None,
        "paper_params_M": paper.paper_params if paper else None,
    }


def write_table(lines: list[dict[str, Any]], out_dir: Path) -> tuple[Path, Path]:
    """``table.md`` (Markdown) and ``table.csv`` under ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    md = out_dir / "table.md"
    csv_path = out_dir / "table.csv"
    fmt = lambda v: "" if v is None else str(v)  # noqa: E731
    text = "| " + " | ".join(COLUMNS) + " |\n|" + "---|" * len(COLUMNS) + "\n"
    text += "".join("| " + " | ".join(fmt(line[c]) for c in COLUMNS) + " |\n" for line in lines)
    md.write_text(text, encoding="utf-8")
    with open(csv_path, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(lines)
    return md, csv_path


def run_grid(folder: Path, wanted: Sequence[str], overrides: Sequence[str],
             run: Callable[[ExperimentConfig], Any], out_dir: Path) -> list[dict[str, Any]]:
    """Run (or resume) each chosen row that has no results yet with ``run``, and write the table.

    The table lists every finished row of the folder, in the grid's order — the chosen ones and any
    finished before or in another process (rows are often trained side by side, one process
    each) — and is rewritten after every row, so a long grid shows its progress.
    """
    rows = grid_rows(folder)
    chosen = choose(rows, wanted)
    experiments = {}
    for name, path in rows.items():
        try:
            experiments[name] = load_experiment(path, list(overrides))
        except ConfigError:
            if name in chosen:
                raise
            # a row not chosen that the overrides do not fit: left out of the table
    lines: list[dict[str, Any]] = []
    for name in chosen:
        if not (experiments[name].run_dir / "results.json").is_file():
            run(experiments[name])
        lines = finished_lines(experiments)
        write_table(lines, out_dir)
    return lines


def finished_lines(experiments: dict[str, ExperimentConfig]) -> list[dict[str, Any]]:
    """Table lines of the rows whose run directory holds a ``results.json``."""
    lines = []
    for name, exp in experiments.items():
        results_file = exp.run_dir / "results.json"
        if results_file.is_file():
            lines.append(table_row(name, exp, json.loads(results_file.read_text(encoding="utf-8"))))
    return lines
