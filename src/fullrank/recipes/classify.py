"""Sentence (pair) classification (BERT §4.1; MNLI in [B20] Tables 1–3): a pre-trained encoder
(``train.init_from``) with a classifier on the pooled ``[CLS]`` → accuracy on the validation file
and on every evaluation-only set (the MNLI hard subsets, SNLI hard)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from torch import nn

from fullrank.data.finetuning import (
    ExampleBatches,
    classification_batches,
    encode_texts,
    label_ids,
    read_examples,
)
from fullrank.data.tokenizers import Tokenizer
from fullrank.errors import DataError
from fullrank.evaluation.accuracy import accuracy
from fullrank.models import ModelConfig
from fullrank.recipes.config import ClassifyExperiment
from fullrank.recipes.encoder_data import ClassifyData, ClassifyFile
from fullrank.recipes.init import planned_config
from fullrank.recipes.recipe import Recipe, Run, RunReport, Setup, given_vocab
from fullrank.training.tasks import SequenceClassification


def load_set(
    spec: ClassifyFile,
    tok: Tokenizer,
    labels: list[str],
    max_seq_len: int,
    *,
    batch_size: int,
    seed: int = 0,
    group_by_length: bool = False,
    n_segments: int = 2,
) -> ExampleBatches:
    """A classification file as batches (labels checked against ``labels``); ``n_segments``:
    the model's segment embeddings (a pair needs two)."""
    examples = read_examples(
        spec.path, text_fields=spec.text_fields, label_field=spec.label_field, detokenized=spec.detokenize
    )
    if any(ex.label is None for ex in examples):
        raise DataError(f"{spec.path}: no label field; name it with label_field")
    if n_segments < 2 and any(len(ex.texts) > 1 for ex in examples):
        raise DataError(
            f"{spec.path}: sentence pairs, but the model has one segment embedding "
            f"(type_vocab_size={n_segments}); give one text per example, or start from a model with two"
        )
    rows, segments = encode_texts([ex.texts for ex in examples], tok, max_seq_len)
    return classification_batches(
        rows,
        segments,
        label_ids(examples, labels),
        pad_id=tok.pad_id,
        batch_size=batch_size,
        seed=seed,
        name=spec.path,
        group_by_length=group_by_length,
    )


def label_set(data: ClassifyData) -> list[str]:
    """``data.labels``, or the training file's labels in order of first appearance."""
    if data.labels:
        return list(data.labels)
    spec = data.spec(data.train)
    found = read_examples(spec.path, text_fields=spec.text_fields, label_field=spec.label_field)
    return list(dict.fromkeys(str(ex.label) for ex in found))


def score(
    task: SequenceClassification,
    model: Any,
    batches: ExampleBatches,
    labels: list[str],
    device: Any,
    batch_size: int,
) -> dict[str, float]:
    probs, gold = task.predict(model, batches.eval_batches(batch_size), device)
    return accuracy(probs.argmax(-1).numpy(), gold.numpy(), labels)


class ClassificationRecipe(Recipe[ClassifyExperiment]):
    """``task: classify``."""

    metrics = {
        "valid_accuracy": (("valid", "accuracy"), "validation accuracy (%)", False),
        "{set}_accuracy": (("extra", "eval_sets", "{set}", "accuracy"), "{set} accuracy (%)", False),
    }

    def setup(self, run: Run[ClassifyExperiment]) -> Setup:
        exp = run.exp
        data, cfg = exp.data, exp.train
        tok = run.tokenizer(None)
        labels = label_set(data)
        if len(labels) < 2:
            raise DataError(f"{data.train}: one label ({labels[0]!r}); a classifier needs at least two")
        model_cfg = run.model_config(tok, n_classes=len(labels))
        n = model_cfg.seq_len
        kept = getattr(model_cfg, "type_vocab_size", 2)  # segment embeddings: an encoder's
        train_set = load_set(
            data.spec(data.train),
            tok,
            labels,
            n,
            batch_size=cfg.batch_size,
            seed=cfg.seed,
            group_by_length=data.group_by_length,
            n_segments=kept,
        )
        eval_bs = max(1, cfg.batch_size // run.dist.world)

        def evaluation_set(spec: ClassifyFile) -> ExampleBatches:
            return load_set(spec, tok, labels, n, batch_size=eval_bs, n_segments=kept)

        valid = evaluation_set(data.spec(data.valid)) if data.valid else None
        extra = {name: evaluation_set(data.spec(spec)) for name, spec in data.eval_sets.items()}
        loss = SequenceClassification()
        self.labels, self.loss, self.eval_bs = labels, loss, eval_bs
        self.sets = ({"valid": valid} if valid else {}) | extra

        def validate(m: nn.Module) -> dict[str, float]:
            assert valid is not None
            return loss.evaluate(m, valid.eval_batches(eval_bs, cfg.eval_batches), run.dist.device)

        return Setup(
            model_config=model_cfg,
            tokenizer=tok,
            batches=train_set,
            loss=loss,
            data_line=(
                f"data: {train_set.n:,} training examples ({len(train_set):,} batches "
                f"of {cfg.batch_size} per epoch{', grouped by length' if data.group_by_length else ''}), "
                f"labels {', '.join(labels)}"
                + (f"; {valid.n:,} validation examples" if valid else "")
                + "".join(f"; {name} {s.n:,}" for name, s in extra.items())
            ),
            vocabulary=f"{tok.kind} vocabulary of {tok.vocab_size}",
            per_rank=cfg.batch_size // run.dist.world,
            unit="examples",
            validate=validate if valid else None,
            meta={"labels": labels},
        )

    def evaluate(
        self, run: Run[ClassifyExperiment], setup: Setup, model: nn.Module, report: RunReport
    ) -> None:
        results = {
            name: score(self.loss, model, s, self.labels, run.dist.device, self.eval_bs)
            for name, s in self.sets.items()
        }
        report.valid = results.get("valid")
        report.extra["eval_sets"] = {k: v for k, v in results.items() if k != "valid"}
        for name, r in results.items():
            shares = " · ".join(f"{lab} {r[f'predicted_{lab}']:.0f}%" for lab in self.labels)
            run.say(
                f"{name}: accuracy {r['accuracy']:.2f}% on {r['examples']:,} examples (predicted: {shares})"
            )

    def plan_model(
        self, exp: ClassifyExperiment, out: Path, cache: dict[str, Any], base: ModelConfig | None
    ) -> tuple[ModelConfig, list[str]]:
        labels = len(label_set(exp.data))
        if base is not None:
            return planned_config(exp, 0, base, n_classes=labels), []
        return planned_config(exp, given_vocab(exp), None, n_classes=labels), []
