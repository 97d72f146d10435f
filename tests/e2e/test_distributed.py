"""Every task scales out the same way: `torchrun --nproc_per_node=2` with `train.parallel=ddp` and
`fsdp` through each task's recipe (2 CPU processes, gloo), the final evaluation equal to one
process's, and an FSDP checkpoint that resumes in one process.

Two processes take the same global batches as one: a language model's and an encoder task's
rows are split over the ranks; translation and parsing give each rank a bucket batch of its own,
so one process takes the same two bucket batches per step with `train.grad_accum=2`. Dropout is
off and Adam's epsilon large (its update then stays linear in the gradient), so the runs differ
by float rounding only."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from fullrank.cli import main
from fullrank.data.tokenizers import Tokenizer
from tests.e2e.bert_fixture import write_configs
from tests.e2e.lm_fixture import tiny_experiment
from tests.e2e.test_cli_parse import CONFIG as PARSE_CONFIG
from tests.e2e.test_cli_parse import write_treebank
from tests.e2e.test_cli_translate import write_corpus

pytestmark = [pytest.mark.slow, pytest.mark.distributed]
COMMON = [
    "--quiet",
    "train.device=cpu",
    "train.eps=1.0",
    "train.steps=4",
    "train.save_every=2",
    "train.keep_last=5",
    "train.eval_every=2",
]
ENCODER = [
    "model.d_model=24",
    "model.n_heads=3",
    "model.d_head=10",
    "model.d_ff=37",
    "model.n_layers=2",
    "model.seq_len=48",
    "model.max_len=48",
    "model.dropout=0.0",
    "model.attn_dropout=0.0",
]
# the global batch of one bucket-batched process: the two bucket batches two ranks take
SEQ2SEQ = {"mt", "parse"}


def config(task: str, tmp: Path) -> tuple[Path, list[str]]:
    """A tiny experiment of ``task`` and the overrides every run of it takes."""
    if task == "lm":
        return tiny_experiment(tmp, dropout=0.0), []
    if task == "mt":
        write_corpus(tmp, (("train", 300, 0), ("val", 30, 1)))
        cfg = tmp / "mt.yaml"
        cfg.write_text(f"""name: mt
task: mt
out_dir: {tmp / "runs"}
model: {{d_model: 24, n_heads: 3, d_head: 10, d_value: 6, d_ff: 37, n_layers: 1,
         n_decoder_layers: 2, max_len: 64, seq_len: 8, dropout: 0.0}}
data: {{root: {tmp}, train: train, valid: val, src_lang: en, tgt_lang: de, tokenizer: bpe,
        vocab_size: 60, max_tokens: 128, max_sentence_len: 20, cache_dir: {tmp / "cache"}}}
train: {{lr: 2.0, schedule: noam, warmup: 8, label_smoothing: 0.1, log_every: 2, threads: 1}}
decode: {{splits: [valid], beam: 1, a: 0.5, b: 6, average_last: 0}}
""")
        return cfg, []
    if task == "parse":
        write_treebank(tmp)
        cfg = tmp / "parse.yaml"
        cfg.write_text(PARSE_CONFIG.format(out=tmp / "runs", root=tmp))
        return cfg, [
            "decode.splits=[valid]",
            "decode.beam=1",
            "decode.average_last=0",
            "data.max_tokens=256",
            "model.decoder_cursor=true",
            "data.tree_order=in_order",
        ]
    cfgs = write_configs(tmp, steps=4)
    if task == "bert":
        return cfgs["bert"], ["model.dropout=0.0", "model.attn_dropout=0.0"]
    # fine-tuning from random weights: the recipe and its heads, without a pre-training run
    docs = tmp / "docs.txt"
    tok = Tokenizer.train("wordpiece", [docs], 300, lowercase=True)
    tok.save(tmp / "wordpiece.json")
    return cfgs[task], ["train.init_from=null", f"data.tokenizer_file={tmp / 'wordpiece.json'}", *ENCODER]


def launch(cfg: Path, *args: str, processes: int) -> str:
    """``fullrank train CFG ARGS`` in this process, or in ``processes`` under torchrun;
    returns what the run printed."""
    if processes == 1:
        assert main(["train", str(cfg), *args]) == 0
        return ""
    torchrun = shutil.which("torchrun", path=str(Path(sys.executable).parent))
    if torchrun is None:
        pytest.skip("torchrun is not installed next to this Python")
    # a rank that aborts (SIGABRT, SIGSEGV) prints where each of its threads was
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONFAULTHANDLER": "1"}
    done = subprocess.run(
        [
            torchrun,
            "--standalone",
            f"--nproc_per_node={processes}",
            "-m",
            "fullrank",
            "train",
            str(cfg),
            *args,
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert done.returncode == 0, what_failed(done.stderr)
    return done.stdout


def what_failed(stderr: str, limit: int = 8000) -> str:
    """What the ranks of a failed ``torchrun`` printed (each rank's error and, from the fault
    handler, where a rank that aborted was), without torchrun's own traceback and summary."""
    ours, _, launcher = stderr.rpartition("Traceback (most recent call last):\n")
    if "torchrun" in launcher.partition("\n")[0]:
        stderr = ours
    return stderr[-limit:]


# what a final evaluation records beside its scores: how long it took
TIMINGS = ("seconds", "sentences_per_s")


def figures(results: dict) -> dict[str, float]:
    """The numbers of a run's final evaluation (``valid`` and ``test``, and the decoded splits'
    BLEU and parse scores), by dotted key; timings left out."""
    out: dict[str, float] = {}

    def walk(node: object, key: str) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                if k not in TIMINGS:
                    walk(v, f"{key}.{k}")
        elif isinstance(node, (int, float)) and not isinstance(node, bool):
            out[key] = float(node)

    for split in ("valid", "test"):
        walk(results.get(split) or {}, split)
    for scores in ("bleu", "parse"):
        walk(results.get("extra", {}).get(scores, {}), scores)
    return out


def assert_same(run: Path, reference: Path, decoded: bool = False) -> None:
    """``run`` ended as ``reference`` did: every figure of its final evaluation (``decoded``: the
    decoded split's scores among them) and every weight, within float rounding."""
    a, b = (json.loads((r / "results.json").read_text()) for r in (run, reference))
    assert a["steps"] == b["steps"] == 4
    fa, fb = figures(a), figures(b)
    assert fa.keys() == fb.keys() and fa, (fa, fb)
    if decoded:
        assert any(k.startswith(("bleu.", "parse.")) for k in fa), fa
    for k in fa:
        assert fa[k] == pytest.approx(fb[k], rel=1e-4, abs=1e-4), (run.name, k, fa[k], fb[k])
    wa, wb = (
        load_file(
            str(r / "checkpoints" / (r / "checkpoints" / "latest").read_text().strip() / "model.safetensors")
        )
        for r in (run, reference)
    )
    assert wa.keys() == wb.keys()
    for k in wa:
        assert (wa[k] - wb[k]).abs().max() < 1e-4, (run.name, k)


@pytest.mark.parametrize("task", ["lm", "mt", "parse", "bert", "classify", "squad"])
def test_ddp_and_fsdp_evaluate_like_one_process_and_fsdp_resumes_in_one(task, tmp_path):
    cfg, extra = config(task, tmp_path)
    args = [*COMMON, *extra]
    one = ["train.grad_accum=2"] if task in SEQ2SEQ else []
    runs = tmp_path / "runs"
    launch(cfg, *args, *one, "name=one", processes=1)
    tok = [f"data.tokenizer_file={runs / 'one' / 'tokenizer.json'}"] if task in ("bert",) else []
    printed = launch(cfg, *args, *tok, "name=ddp", "train.parallel=ddp", processes=2)
    assert "data parallel: world size 2" in printed
    launch(cfg, *args, *tok, "name=fsdp", "train.parallel=fsdp", processes=2)
    for name in ("ddp", "fsdp"):
        assert_same(runs / name, runs / "one", decoded=task in SEQ2SEQ)
    # the FSDP run's step-2 checkpoint (whole tensors, gathered on rank 0) resumes in one
    # process and ends as the one-process run did; a bucket-batched task's position (two
    # bucket batches a global batch on two ranks) carries over to one process's count
    step2 = runs / "fsdp" / "checkpoints" / "step-00000002"
    launch(cfg, *args, *one, *tok, "name=resumed", f"train.resume_from={step2}", processes=1)
    assert_same(runs / "resumed", runs / "one", decoded=task in SEQ2SEQ)


def test_ddp_and_fsdp_hold_the_frozen_parameters_and_train_the_others_like_one_process(tmp_path):
    cfg, _ = config("lm", tmp_path)
    runs = tmp_path / "runs"
    launch(cfg, *COMMON, "name=start", processes=1)
    start = load_file(str(runs / "start" / "checkpoints" / "step-00000004" / "model.safetensors"))
    held = [*COMMON, f"train.init_from={runs / 'start'}", "train.freeze=[embed.*, layers.0.*]"]
    launch(cfg, *held, "name=one", processes=1)
    for parallel in ("ddp", "fsdp"):
        printed = launch(cfg, *held, f"name={parallel}", f"train.parallel={parallel}", processes=2)
        assert "frozen (embed.*, layers.0.*): 13 tensors" in printed
        assert_same(runs / parallel, runs / "one")
        latest = (
            runs / parallel / "checkpoints" / (runs / parallel / "checkpoints" / "latest").read_text().strip()
        )
        for name, value in load_file(str(latest / "model.safetensors")).items():
            assert torch.equal(value, start[name]) == name.startswith(("embed.", "layers.0.")), (
                parallel,
                name,
            )
