"""Extractive question answering (BERT §4.2; SQuAD v1.1 in [B20] Tables 1–3): a pre-trained
encoder (``train.init_from``) with a start/end span head, trained on windows of the training
articles → EM and F1 (the official definitions) on the test articles."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from fullrank.data.finetuning import (
    SquadQuestion,
    SquadWindows,
    in_file_order,
    make_windows,
    read_squad,
    span_batches,
    split_articles,
)
from fullrank.data.tokenizers import Tokenizer
from fullrank.errors import ConfigError
from fullrank.evaluation.squad import best_span, squad_scores
from fullrank.models import ModelConfig
from fullrank.paths import write_text_atomic
from fullrank.recipes.config import SquadExperiment
from fullrank.recipes.encoder_data import SquadData
from fullrank.recipes.init import planned_config
from fullrank.recipes.recipe import Recipe, Run, RunReport, Setup, given_vocab
from fullrank.training.tasks import SpanExtraction


def squad_parts(data: SquadData) -> tuple[list[SquadQuestion], list[SquadQuestion]]:
    """The training and test questions: split by article (``data.test_every``) or two files."""
    articles = read_squad(data.path(data.train))
    if data.test_every:
        return split_articles(articles, data.test_every)
    test = [q for art in read_squad(data.path(data.test)) for q in art] if data.test else []
    return [q for art in articles for q in art], test


@torch.no_grad()
def predict_answers(
    model: nn.Module,
    windows: SquadWindows,
    questions: Sequence[SquadQuestion],
    tok: Tokenizer,
    device: torch.device,
    *,
    batch_size: int = 64,
    n_best: int = 20,
    max_answer_len: int = 30,
) -> list[str]:
    """The answer text of every question: the best span over its windows
    (:func:`fullrank.evaluation.squad.best_span`)."""
    task = SpanExtraction()
    per_question: list[list[int]] = [[] for _ in questions]
    for w, i in enumerate(windows.question):
        per_question[i].append(w)
    batches = span_batches(windows, pad_id=tok.pad_id, batch_size=batch_size)
    visited: list[np.ndarray] = []
    for batch in batches.eval_batches():
        out = task.logits(model, batch, device).numpy()  # (B, T, 2)
        visited.extend(out[i, : int(batch.inputs.mask[i].sum())] for i in range(len(out)))
    logits = in_file_order(visited, batches.eval_order())
    answers = []
    for q, ws in zip(questions, per_question):
        text, _ = best_span(
            [logits[w][:, 0] for w in ws],
            [logits[w][:, 1] for w in ws],
            [windows.offsets[w] for w in ws],
            [windows.max_context[w] for w in ws],
            q.context,
            n_best=n_best,
            max_answer_len=max_answer_len,
        )
        answers.append(text)
    return answers


def evaluate_questions(
    model: nn.Module,
    questions: Sequence[SquadQuestion],
    tok: Tokenizer,
    data: SquadData,
    seq_len: int,
    device: torch.device,
    batch_size: int,
) -> tuple[dict[str, float], list[str]]:
    windows = make_windows(questions, tok, max_seq_len=seq_len, doc_stride=data.doc_stride, training=False)
    answers = predict_answers(
        model,
        windows,
        questions,
        tok,
        device,
        batch_size=batch_size,
        n_best=data.n_best,
        max_answer_len=data.max_answer_len,
    )
    return squad_scores(answers, [[a for a, _ in q.answers] for q in questions]), answers


class SquadRecipe(Recipe[SquadExperiment]):
    """``task: squad``."""

    metrics = {
        "test_f1": (("test", "f1"), "test F1", False),
        "test_em": (("test", "em"), "test exact match", False),
    }

    def setup(self, run: Run[SquadExperiment]) -> Setup:
        exp = run.exp
        data, cfg = exp.data, exp.train
        tok = run.tokenizer(None)
        model_cfg = run.model_config(tok)
        segments = getattr(model_cfg, "type_vocab_size", 2)  # an encoder's segment embeddings
        if segments < 2:
            raise ConfigError(
                f"the model has one segment embedding (type_vocab_size={segments}); task 'squad' "
                f"reads a question and a paragraph, two segments"
            )
        train_q, test_q = squad_parts(data)
        windows = make_windows(
            train_q, tok, max_seq_len=model_cfg.seq_len, doc_stride=data.doc_stride, training=True
        )
        batches = span_batches(
            windows,
            pad_id=tok.pad_id,
            batch_size=cfg.batch_size,
            seed=cfg.seed,
            name=data.train,
            group_by_length=data.group_by_length,
        )
        with_answer = int(np.count_nonzero(windows.starts))
        articles = len({q.article for q in train_q}), len({q.article for q in test_q})
        self.test_q, self.skipped = test_q, len(windows.skipped)
        self.eval_bs = max(1, cfg.batch_size // run.dist.world)
        seq_len = model_cfg.seq_len

        def validate(m: nn.Module) -> dict[str, float]:
            qs = test_q[: data.eval_questions] if data.eval_questions else test_q
            return evaluate_questions(m, qs, tok, data, seq_len, run.dist.device, self.eval_bs)[0]

        return Setup(
            model_config=model_cfg,
            tokenizer=tok,
            batches=batches,
            loss=SpanExtraction(),
            data_line=(
                f"data: {len(train_q):,} training questions from {articles[0]} articles "
                f"({len(windows.skipped)} left out: answer not on token boundaries) → "
                f"{len(windows):,} windows ({with_answer:,} holding the answer), "
                f"{len(batches):,} batches of {cfg.batch_size} per epoch"
                f"{', grouped by length' if data.group_by_length else ''}; "
                f"{len(test_q):,} test questions from {articles[1]} articles; "
                f"doc_stride {data.doc_stride}"
            ),
            vocabulary=f"{tok.kind} vocabulary of {tok.vocab_size}",
            per_rank=cfg.batch_size // run.dist.world,
            unit="windows",
            validate=validate if test_q else None,
            meta={
                "squad": {
                    "doc_stride": data.doc_stride,
                    "n_best": data.n_best,
                    "max_answer_len": data.max_answer_len,
                }
            },
        )

    def evaluate(self, run: Run[SquadExperiment], setup: Setup, model: nn.Module, report: RunReport) -> None:
        exp = run.exp
        report.extra["skipped_training_answers"] = self.skipped
        if not self.test_q:
            return
        report.test, answers = evaluate_questions(
            model,
            self.test_q,
            setup.tokenizer,
            exp.data,
            setup.model_config.seq_len,
            run.dist.device,
            self.eval_bs,
        )
        predictions = run.run_dir / "predictions.json"
        write_text_atomic(predictions, json.dumps({q.id: a for q, a in zip(self.test_q, answers)}, indent=0))
        run.say(
            f"test: EM {report.test['em']:.2f} · F1 {report.test['f1']:.2f} on "
            f"{report.test['questions']:,} questions ({predictions})"
        )

    def plan_model(
        self, exp: SquadExperiment, out: Path, cache: dict[str, Any], base: ModelConfig | None
    ) -> tuple[ModelConfig, list[str]]:
        if base is not None:
            return planned_config(exp, 0, base), []
        return planned_config(exp, given_vocab(exp), None), []


def answer_one(
    model: nn.Module,
    tok: Tokenizer,
    context: str,
    question: str,
    *,
    seq_len: int,
    doc_stride: int,
    device: torch.device,
    n_best: int = 20,
    max_answer_len: int = 30,
) -> str:
    """The answer to one question about ``context`` (``fullrank answer``)."""
    q = SquadQuestion("--question", question, context, [], 0)
    windows = make_windows([q], tok, max_seq_len=seq_len, doc_stride=doc_stride, training=False)
    return predict_answers(model, windows, [q], tok, device, n_best=n_best, max_answer_len=max_answer_len)[0]
