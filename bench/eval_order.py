"""Fine-tuning evaluation with its examples in file order against longest first, interleaved.

    python bench/eval_order.py --classify runs/bert/mnli_s0 --squad runs/bert/squad_s0

Scores a fine-tuned MNLI checkpoint on ``configs/bert/mnli.yaml``'s validation and evaluation
sets and a fine-tuned SQuAD checkpoint on ``configs/bert/squad.yaml``'s test part, each set
twice per round: batches of 32 consecutive examples of the file (as fullrank evaluated before)
and batches of the longest examples first (:meth:`~fullrank.data.finetuning.ExampleBatches.
eval_order`). One thread, the thread's CPU time; prints both times and both scores, which must
agree.
"""

from __future__ import annotations

import argparse
import functools
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from fullrank import fast
from fullrank.data.finetuning import ExampleBatches
from fullrank.recipes.classify import load_set, score
from fullrank.recipes.config import load_experiment
from fullrank.recipes.encoder_data import ClassifyData, SquadData
from fullrank.recipes.squad import evaluate_questions, squad_parts
from fullrank.training.checkpoints import load_checkpoint
from fullrank.training.integrity import ClassifyMeta
from fullrank.training.tasks import SequenceClassification

LONGEST_FIRST = ExampleBatches.eval_order


def file_order(self: ExampleBatches, batch_size: int | None = None, limit: int | None = None) -> np.ndarray:
    return np.arange(self.n if limit is None else min(self.n, limit * (batch_size or self.batch_size)))


def timed(f: Callable[[], Any]) -> tuple[float, Any]:
    t = time.thread_time()
    out = f()
    return time.thread_time() - t, out


def both(name: str, f: Callable[[], float], rounds: int) -> None:
    for _ in range(rounds):
        cells = []
        for how, order in (("file order", file_order), ("longest first", LONGEST_FIRST)):
            ExampleBatches.eval_order = order  # type: ignore[method-assign]  # patched for the timing
            seconds, value = timed(f)
            cells.append(f"{how} {seconds:.2f} s ({value:.2f})")
        ExampleBatches.eval_order = LONGEST_FIRST  # type: ignore[method-assign]  # the default put back
        print(f"{name}: " + " · ".join(cells), flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--classify", help="a fine-tuned MNLI checkpoint or run")
    p.add_argument("--squad", help="a fine-tuned SQuAD checkpoint or run")
    p.add_argument("--rounds", type=int, default=2)
    args = p.parse_args()
    torch.set_num_threads(1)
    cpu = torch.device("cpu")
    if args.classify:
        classify(args.classify, args.rounds, cpu)
    if args.squad:
        squad(args.squad, args.rounds, cpu)


def accuracy(model: Any, batches: ExampleBatches, labels: list[str], device: torch.device) -> float:
    return score(SequenceClassification(), model, batches, labels, device, 32)["accuracy"]


def classify(checkpoint: str, rounds: int, cpu: torch.device) -> None:
    exp = load_experiment("configs/bert/mnli.yaml")
    assert isinstance(exp.data, ClassifyData)
    ck = load_checkpoint(checkpoint, device=cpu)
    assert isinstance(ck.info, ClassifyMeta) and ck.tokenizer is not None
    labels = ck.info.labels
    assert exp.data.valid is not None
    sets = {"valid": exp.data.valid} | dict(exp.data.eval_sets)
    with fast.cpu(ck.model.eval()):
        for name, entry in sets.items():
            b = load_set(exp.data.spec(entry), ck.tokenizer, labels, ck.config.seq_len, batch_size=32)
            both(
                f"{name} ({b.n:,} examples, accuracy)",
                functools.partial(accuracy, ck.model, b, labels, cpu),
                rounds,
            )


def squad(checkpoint: str, rounds: int, cpu: torch.device) -> None:
    exp = load_experiment("configs/bert/squad.yaml")
    assert isinstance(exp.data, SquadData)
    _, test = squad_parts(exp.data)
    sq = load_checkpoint(checkpoint, device=cpu)
    assert sq.tokenizer is not None
    f1 = functools.partial(
        evaluate_questions, sq.model, test, sq.tokenizer, exp.data, sq.config.seq_len, cpu, 32
    )
    with fast.cpu(sq.model.eval()):
        both(f"SQuAD test ({len(test):,} questions, F1)", lambda: f1()[0]["f1"], rounds)


if __name__ == "__main__":
    main()
