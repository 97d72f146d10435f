"""Every shipped experiment file trains: two steps each through `fullrank train`, on the data it
names under ../shared/data (skipped, with the reason, when that is absent), its model shrunk to a
tiny one of the same family and its final evaluation kept cheap (no decoding: a model two steps
old writes to its length limit; language-model and masked-LM scores on 2 batches of a split).
What it checks is the file: its data paths, tokenizer and task settings, its model family and
heads, the lifecycle from setup to results.json."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fullrank.cli import main
from fullrank.recipes.config import load_experiment
from fullrank.training.tasks import LanguageModeling, MaskedLMWithNSP
from tests.helpers import SHARED_DATA

REPO = Path(__file__).resolve().parents[2]
CONFIGS = sorted(p for p in (REPO / "configs").rglob("*.yaml") if "sweeps" not in p.parts)
TWO_STEPS = [
    "train.steps=2",
    "train.warmup=1",
    "train.eval_every=1",
    "train.save_every=2",
    "train.log_every=1",
    "train.eval_batches=2",
    "train.max_minutes=null",
    "train.grad_accum=1",
    "train.precision=fp32",
    "train.compile=false",
    "train.threads=1",
    "--quiet",
]
# a small model of each family, whatever the file's sizes
SMALL = [
    "model.d_model=24",
    "model.n_heads=3",
    "model.d_head=10",
    "model.d_value=null",
    "model.d_ff=37",
    "model.n_layers=1",
]
TASK = {
    "lm": ["model.seq_len=16", "train.batch_size=64", "sample.max_new_tokens=8"],
    "mt": [
        "model.n_decoder_layers=1",
        "decode.splits=[]",
        "decode.average_last=0",
        "decode.tune_alpha=[]",
        "data.max_tokens=512",
    ],
    "parse": [
        "model.n_decoder_layers=1",
        "decode.splits=[]",
        "decode.average_last=0",
        "data.max_tokens=1024",
    ],
    "bert": ["model.seq_len=64", "model.max_len=64", "train.batch_size=32"],
    "classify": ["train.batch_size=32"],
    "squad": ["train.batch_size=32", "data.eval_questions=20"],
}
# what a file needs that a fresh clone does not have: a corpus that takes minutes to tokenize
# (the same format, smaller: every file that pre-trains on the Wikipedia dump), a pre-trained
# checkpoint (the tiny pre-training run below, whose windows of 64 tokens hold SQuAD's longest
# question)
WIKIPEDIA_TRAIN = "wikipedia-en-2015/train_"
SMALLER_WIKIPEDIA = ["data.train=wikipedia-en-2015/valid.txt.xz", "data.tokenizer_sample=0.2"]


def _id(path: Path) -> str:
    return str(path.relative_to(REPO / "configs"))


@pytest.fixture(scope="module")
def shared(tmp_path_factory) -> dict[str, Path]:
    """One tokenizer cache and run folder for every run."""
    tmp = tmp_path_factory.mktemp("shipped")
    return {"cache": tmp / "cache", "runs": tmp / "runs"}


@pytest.fixture(scope="module")
def pretrained(shared) -> Path:
    """A tiny pre-trained BERT for the files that start from a checkpoint (``train.init_from``)."""
    if not (SHARED_DATA / "wikitext-2").is_dir():
        pytest.skip(f"needs the shared datasets: {SHARED_DATA / 'wikitext-2'} is absent")
    assert (
        main(
            [
                "train",
                str(REPO / "configs" / "bert" / "pretrain.yaml"),
                *TWO_STEPS,
                *SMALL,
                *TASK["bert"],
                "name=pre",
                f"out_dir={shared['runs']}",
                f"data.cache_dir={shared['cache']}",
            ]
        )
        == 0
    )
    return shared["runs"] / "pre"


def _few_batches(evaluate):
    """A task's evaluation on at most 2 batches."""

    def few(self, model, batches, device, limit=None):
        return evaluate(self, model, batches, device, min(limit or 2, 2))

    return few


@pytest.mark.slow
@pytest.mark.data
@pytest.mark.parametrize("path", CONFIGS, ids=_id)
def test_every_shipped_config_trains_two_steps(path, shared, request, monkeypatch):
    monkeypatch.chdir(REPO)  # data.root is relative to the repository, as in the README
    # a final evaluation over a whole split (WikiText-2's 33,280-word softmax over 463k tokens:
    # most of a minute) is the evaluation's own tests' business, not the file's
    for task in (LanguageModeling, MaskedLMWithNSP):
        monkeypatch.setattr(task, "evaluate", _few_batches(task.evaluate))
    exp = load_experiment(path)
    root = Path(exp.data.root)
    if not root.is_dir():
        pytest.skip(f"needs the shared datasets: {root.resolve()} is absent")
    name = _id(path).removesuffix(".yaml").replace("/", "_")
    smaller = SMALLER_WIKIPEDIA if str(getattr(exp.data, "train", "")).startswith(WIKIPEDIA_TRAIN) else []
    args = [
        *TWO_STEPS,
        *TASK[exp.task],
        *smaller,
        f"name={name}",
        f"out_dir={shared['runs']}",
        f"data.cache_dir={shared['cache']}",
    ]
    if exp.train.init_from or exp.task == "bert":
        pre = request.getfixturevalue("pretrained")
    if exp.train.init_from:  # fine-tuning or training on: the tiny pre-trained model
        args.append(f"train.init_from={pre}")
    else:
        args += SMALL
        if exp.task == "bert" and exp.data.corpus_format == "wikitext":
            args.append(f"data.tokenizer_file={pre / 'tokenizer.json'}")  # trained once
    assert main(["train", str(path), *args]) == 0
    results = json.loads((shared["runs"] / name / "results.json").read_text())
    assert results["steps"] == 2 and results["params"] > 0
    assert results["valid"] or results["test"]
