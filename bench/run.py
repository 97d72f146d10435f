"""The benchmark suite: fullrank against its peers, side by side, interleaved in rounds.

    python bench/run.py                    # everything (about half an hour on 2 CPU cores)
    python bench/run.py --only lm_s attention --rounds 3

Workloads (float32, 2 threads, dropout 0, warm-up steps untimed):

- ``lm_s``/``lm_m`` — LM training step (forward + backward + AdamW), S: vocab 8192, d_model 256,
  4 layers, 8 heads, d_ff 1024, seq 256, batch 8; M: vocab 32000, d_model 512, 6 layers,
  8 heads, d_ff 2048, seq 256, batch 4. Peers: Hugging Face GPT-2, x-transformers, and
  ``torch.nn.TransformerEncoder`` (a GPT-2-shaped model: pre-LN, GELU, learned positions, tied).
- ``encdec`` — encoder-decoder training step: d_model 256, 3+3 layers, 4 heads, d_ff 1024,
  shared vocab 8000, 32+32 tokens, batch 32. Peers: Hugging Face Marian, x-transformers
  ``XTransformer``, ``torch.nn.Transformer``.
- ``attention`` — scaled dot-product attention alone, forward + backward, batch 8, seq 256,
  ``(n_heads, d_head)`` ∈ {(8,32), (16,32), (32,32), (8,64), (8,128), (8,256)}.
- ``matmul`` — the ceiling: a 2048² matrix multiply, forward + backward, measured the same way
  in every round, at PyTorch's defaults and under fullrank's (``matmul_fullrank``: where
  fullrank routes float32 matmuls through oneDNN); every GFLOP/s figure is also given as a
  fraction of the ceiling under its own settings.
- ``decode`` — beam 4 and greedy decoding against Hugging Face ``generate`` (``bench/decode.py``).

``fullrank`` runs with its defaults (the speed engine, ``fullrank.fast.cpu``: oneDNN float32
matmuls where float32-accurate and the CPU attention kernel; freed memory kept for reuse);
``fullrank_same`` with PyTorch's defaults, the peers' settings. Results: a Markdown table and
JSON per workload under ``bench/results/``, and ``summary.md``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import RESULTS, interleaved, machine, median, paired_ratio, write

PEERS = {"lm": ["hf", "xt", "torch"], "encdec": ["hf", "xt", "torch"]}
IMPL_NAMES = {
    "fullrank": "fullrank (defaults)",
    "fullrank_same": "fullrank (PyTorch defaults)",
    "hf": "Hugging Face transformers",
    "xt": "x-transformers",
    "torch": "torch.nn",
    "explicit": "fullrank explicit attend()",
}
CEILINGS = {"torch": "matmul", "fullrank": "matmul_fullrank"}  # job impl → result name
ATTENTION_SHAPES = [(8, 32), (16, 32), (32, 32), (8, 64), (8, 128), (8, 256)]


def specs_for(workload: str, threads: int, steps: int) -> dict[str, dict[str, Any]]:
    base = {"threads": threads, "steps": steps, "warmup": 3}
    # the ceiling twice: at PyTorch's defaults (the peers' and fullrank_same's) and under
    # fullrank's defaults (where those route float32 matmuls through oneDNN, that is faster)
    matmul = {CEILINGS[impl]: {**base, "workload": "matmul", "impl": impl} for impl in CEILINGS}
    if workload in ("lm_s", "lm_m"):
        size = workload[-1].upper()
        impls = ["fullrank", "fullrank_same", *PEERS["lm"]]
        return {**matmul, **{i: {**base, "workload": "lm", "impl": i, "size": size} for i in impls}}
    if workload == "encdec":
        impls = ["fullrank", "fullrank_same", *PEERS["encdec"]]
        return {**matmul, **{i: {**base, "workload": "encdec", "impl": i} for i in impls}}
    if workload == "attention":
        out = dict(matmul)
        for h, dh in ATTENTION_SHAPES:
            for impl in ("fullrank", "explicit"):
                out[f"{impl} h={h} d_head={dh}"] = {
                    **base,
                    "workload": "attention",
                    "impl": impl,
                    "heads": h,
                    "d_head": dh,
                }
        return out
    raise ValueError(workload)


def table(workload: str, results: dict[str, list[dict[str, Any]]]) -> tuple[str, dict]:
    """Markdown rows: medians, GFLOP/s, share of the matmul ceiling, memory, ratio to peers."""
    ceilings = {name: median(results[name], "gflops") for name in CEILINGS.values() if name in results}
    ceiling = ceilings["matmul"]
    names = [n for n in results if n not in CEILINGS.values()]
    peers = [n for n in names if n in ("hf", "xt", "torch")]
    best_peer = max(peers, key=lambda n: median(results[n]) or 0) if peers else None
    data: dict[str, Any] = {"ceiling_gflops": ceiling, "ceilings_gflops": ceilings, "rows": {}}
    unit = next((r["unit"] for n in names for r in results[n] if "unit" in r), "")
    lines = [
        f"| implementation | params | median {unit} | step ms | GFLOP/s | % of its matmul ceiling "
        f"| peak RSS MB | vs best peer (paired) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for n in names:
        res = results[n]
        value, gflops = median(res), median(res, "gflops")
        if value is None:
            err = next((r["error"] for r in res if "error" in r), "failed")
            lines.append(f"| {IMPL_NAMES.get(n, n)} | — | error: {err} | | | | | |")
            continue
        assert gflops is not None  # a job that measured a value measured its GFLOP/s
        ratio = paired_ratio(res, results[best_peer]) if best_peer and n not in peers else None
        params = next((r.get("params", 0) for r in res if "error" not in r), 0)
        # each row against the ceiling measured under its own settings
        own = ceilings.get(CEILINGS.get(res[0].get("impl", ""), ""), ceiling)
        row: dict[str, Any] = {
            "value": value,
            "step_ms": median(res, "step_ms"),
            "gflops": gflops,
            "ceiling_share": gflops / own if own else None,
            "params": params,
            "peak_rss_mb": median(res, "peak_rss_mb"),
            "ratio_vs_best_peer": ratio,
            "rounds": [r.get("value") for r in res],
        }
        data["rows"][n] = row
        lines.append(
            f"| {IMPL_NAMES.get(n, n)} | {params:,} | {value:,.0f} | {row['step_ms']:.1f} "
            f"| {gflops:.1f} | {100 * row['ceiling_share']:.0f}% | "
            f"{row['peak_rss_mb']:.0f} | {'' if ratio is None else f'{ratio:.2f}×'} |"
        )
    data["best_peer"] = best_peer
    fast = ceilings.get("matmul_fullrank")
    head = (
        f"## {workload}\n\nmatmul ceiling (2048², forward + backward, same rounds): "
        f"{ceiling:.1f} GFLOP/s at PyTorch's defaults"
        + (
            f", {fast:.1f} under fullrank's defaults (fullrank's rows are given against this one)"
            if fast is not None
            else ""
        )
        + ". "
        + (f"Best peer: {IMPL_NAMES.get(best_peer, best_peer)}." if best_peer else "")
        + "\n\n"
    )
    return head + "\n".join(lines) + "\n", data


WORKLOADS = ["lm_s", "lm_m", "encdec", "attention", "decode"]


def collect(threads: int) -> str:
    """``summary.md``/``.json`` from every workload's latest result file, each section dated
    (``--only`` re-runs some workloads; the others keep their last run)."""
    sections: list[str] = []
    everything: dict[str, Any] = {"workloads": {}}
    for workload in WORKLOADS:
        name = "decode-multi30k" if workload == "decode" else workload
        md, js = RESULTS / f"{name}.md", RESULTS / f"{name}.json"
        if not md.exists():
            continue
        data = json.loads(js.read_text()) if js.exists() else {}
        date = data.get("machine", {}).get("date", "date not recorded")
        text = md.read_text()
        if workload == "decode":  # its own report: demote its title to a section
            text = text.replace("# Decoding speed", "## decode — Decoding speed", 1)
        sections.append(text.rstrip("\n") + f"\n\n(run {date})\n")
        everything["workloads"][workload] = data
    info = machine()
    everything["machine"] = info
    summary = (
        f"# fullrank benchmarks\n\n{info.get('cpu')}, {info['cpu_count']} CPUs, "
        f"{threads} threads, float32; torch {info['torch']}, transformers "
        f"{info['transformers']}, x-transformers {info['x-transformers']}. Each section "
        f"gives the date of its run. Ratios are medians of per-round ratios (throughput, "
        f"> 1 = fullrank faster). {info['cpu_matmul']} (fullrank's defaults).\n\n" + "\n".join(sections)
    )
    write("summary", summary, everything)
    return summary


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", nargs="*", default=WORKLOADS, choices=WORKLOADS)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=10, help="timed steps per job")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument(
        "--collect", action="store_true", help="run nothing; rebuild summary.md from the latest result files"
    )
    args = ap.parse_args()
    if args.collect:
        collect(args.threads)
        print(f"wrote {RESULTS / 'summary.md'}")
        return
    info = machine()
    print(
        f"machine: {info.get('cpu')} · {info['cpu_count']} CPUs · torch {info['torch']} · "
        f"transformers {info['transformers']} · x-transformers {info['x-transformers']}"
    )
    print(f"{info['cpu_matmul']} (fullrank's defaults)")
    for workload in args.only:
        print(f"\n== {workload} ({args.rounds} interleaved rounds)")
        if workload == "decode":
            subprocess.run(
                [
                    sys.executable,
                    str(Path(__file__).with_name("decode.py")),
                    "--rounds",
                    str(args.rounds),
                    "--threads",
                    str(args.threads),
                ],
                check=False,
            )
            continue
        results = interleaved(specs_for(workload, args.threads, args.steps), args.rounds)
        md, data = table(workload, results)
        write(workload, md, {"machine": info, **data, "raw": results})
        print(md)
    collect(args.threads)
    print(f"\nwrote {RESULTS / 'summary.md'}")


if __name__ == "__main__":
    main()
