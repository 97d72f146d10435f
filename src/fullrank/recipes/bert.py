"""BERT pre-training ([B20] §4): documents → NSP pairs (or single segments) → masked batches →
masked-LM (+ NSP) loss.

Steps: read the corpus into documents of sentences (:mod:`fullrank.data.documents`) → a
lowercased WordPiece vocabulary trained on those sentences or a sample of them (or the one given
/ of ``train.init_from``) → the corpus tokenized once into a memory-mapped cache
(:mod:`fullrank.data.document_cache`) → fixed segment pairs, or single segments with
``model.next_sentence=false`` → :func:`fullrank.training.loop.train` with
:class:`~fullrank.training.tasks.MaskedLMWithNSP` → MLM accuracy and perplexity (and NSP
accuracy) on the validation sequences, masked at BERT's 15% with masks fixed by the data →
``results.json`` and curves.
"""

from __future__ import annotations

import math
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

from fullrank.data.bert_pretraining import (
    Instances,
    PretrainingBatches,
    make_instances,
    make_segments,
    masking_rule,
)
from fullrank.data.document_cache import TokenizedCorpus, cached_documents, corpus_key
from fullrank.data.documents import CorpusFormat, iter_documents
from fullrank.data.tokenizers import Tokenizer
from fullrank.models import ModelConfig
from fullrank.models.encoder import EncoderConfig
from fullrank.recipes.config import PretrainExperiment
from fullrank.recipes.encoder_data import PretrainData
from fullrank.recipes.init import planned_config
from fullrank.recipes.recipe import Recipe, Run, RunReport, Setup, planned_once, trained_tokenizer
from fullrank.training.tasks import MaskedLMWithNSP

VALID_MLM_PROB = 0.15  # BERT's rate: validation is scored alike whatever a run trains with


def write_sentences(data: PretrainData, out: Path) -> Path:
    """The sentences of the training documents (``data.tokenizer_sample`` of them, evenly
    spread), one per line (WikiText's markup undone): the text the WordPiece vocabulary is
    trained on."""
    with open(out, "w", encoding="utf-8") as f:
        docs = iter_documents(data.path(data.train), data.corpus_format, data.tokenizer_sample)
        f.writelines("".join(s + "\n" for s in doc) for doc in docs)
    return out


def sentences_key(data: PretrainData) -> str:
    """What identifies the text :func:`write_sentences` writes: the training corpus's files
    (their checksums), format and the sampled share."""
    return corpus_key(data.path(data.train), data.corpus_format, f"tokenizer_sample={data.tokenizer_sample}")


def wordpiece(data: PretrainData, say: Callable[[str], None] | None = None) -> Tokenizer:
    """The WordPiece vocabulary of ``data`` (lowercased unless ``data.lowercase`` is false), as
    a pre-training run trains it: kept in ``data.cache_dir`` and trained only the first time
    (:func:`~fullrank.recipes.recipe.trained_tokenizer`)."""
    with tempfile.TemporaryDirectory() as tmp:
        return trained_tokenizer(
            data,
            lambda: [write_sentences(data, Path(tmp) / "sentences.txt")],
            lambda: sentences_key(data),
            say,
        )


def train_wordpiece(data: PretrainData, out: Path) -> Tokenizer:
    """:func:`wordpiece`, saved to ``out`` too, so that several runs can share one vocabulary
    (``data.tokenizer_file``)."""
    tok = wordpiece(data)
    tok.save(out)
    return tok


def pretraining_instances(
    corpus: TokenizedCorpus,
    cfg: EncoderConfig,
    seed: int,
    *,
    short_seq_prob: float = 0.1,
    random_next_prob: float = 0.5,
    where: str = "corpus",
) -> Instances:
    """What a model of ``cfg`` reads of ``corpus`` (named ``where`` in errors): next-sentence
    pairs when it has the next-sentence head, else single segments (BERT's rates by default)."""
    if not cfg.next_sentence:
        return make_segments(corpus, max_seq_len=cfg.seq_len, seed=seed, short_seq_prob=short_seq_prob)
    return make_instances(
        corpus,
        max_seq_len=cfg.seq_len,
        seed=seed,
        short_seq_prob=short_seq_prob,
        random_next_prob=random_next_prob,
        where=where,
    )


def validation_batches(
    instances: Instances, tok: Tokenizer, cfg: EncoderConfig, batch_size: int, name: str
) -> PretrainingBatches:
    """Validation as every run scores it, whatever it trains with: BERT's 15% masking (80/10/10,
    word pieces), the masks fixed by the data (seed 0)."""
    assert tok.cls_id is not None and tok.sep_id is not None  # a wordpiece tokenizer's
    rule = masking_rule(tok, mlm_prob=VALID_MLM_PROB, max_predictions=math.ceil(VALID_MLM_PROB * cfg.seq_len))
    return PretrainingBatches(
        instances,
        rule,
        batch_size=batch_size,
        seed=0,
        masking="static",
        name=name,
        cls_id=tok.cls_id,
        sep_id=tok.sep_id,
        pad_id=tok.pad_id,
    )


def evaluate_file(
    model: nn.Module,
    tok: Tokenizer,
    path: str | Path,
    corpus_format: CorpusFormat,
    cache_dir: str | Path,
    *,
    batch_size: int,
    device: torch.device,
) -> dict[str, float]:
    """A pre-trained model's masked-LM accuracy and perplexity (and next-sentence accuracy,
    with that head) on the documents of ``path``, scored as a run's validation is
    (:func:`validation_batches`; one-sentence documents left out), with ``sequences``."""
    cfg = getattr(model, "config")
    assert isinstance(cfg, EncoderConfig)
    corpus = cached_documents(path, corpus_format, tok, cache_dir, skip_short=True)
    instances = pretraining_instances(corpus, cfg, 0, where=str(path))
    batches = validation_batches(instances, tok, cfg, batch_size, str(path))
    scores = MaskedLMWithNSP().evaluate(model, batches.eval_batches(batch_size), device)
    return {**scores, "sequences": len(batches.instances)}


class PretrainingRecipe(Recipe[PretrainExperiment]):
    """``task: bert``."""

    metrics = {
        "valid_mlm_acc": (("valid", "mlm_acc"), "validation MLM accuracy (%)", False),
        "valid_nsp_acc": (("valid", "nsp_acc"), "validation NSP accuracy (%)", False),
        "valid_mlm_ppl": (("valid", "mlm_ppl"), "validation MLM perplexity", True),
    }

    def setup(self, run: Run[PretrainExperiment]) -> Setup:
        exp = run.exp
        data, cfg = exp.data, exp.train
        with tempfile.TemporaryDirectory() as tmp:  # the tokenizer's text, if one is trained
            tok = run.tokenizer(
                lambda: [write_sentences(data, Path(tmp) / "sentences.txt")], lambda: sentences_key(data)
            )
        model_cfg = run.model_config(tok)
        assert isinstance(model_cfg, EncoderConfig)

        def instances(name: str, seed: int) -> Instances:
            corpus = cached_documents(
                data.path(name),
                data.corpus_format,
                tok,
                data.cache_dir,
                skip_short=data.short_documents == "skip",
                say=run.say,
            )
            if corpus.skipped:
                run.say(
                    f"{name}: {corpus.skipped} one-sentence documents left out (data.short_documents=skip)"
                )
            return pretraining_instances(
                corpus,
                model_cfg,
                seed,
                short_seq_prob=data.short_seq_prob,
                random_next_prob=data.random_next_prob,
                where=name,
            )

        rule = masking_rule(
            tok, mlm_prob=data.mlm_prob, max_predictions=data.max_predictions, unit=data.mask_unit
        )
        assert tok.cls_id is not None and tok.sep_id is not None  # a wordpiece tokenizer's
        ids = {"cls_id": tok.cls_id, "sep_id": tok.sep_id, "pad_id": tok.pad_id}
        batches = PretrainingBatches(
            instances(data.train, cfg.seed),
            rule,
            batch_size=cfg.batch_size,
            seed=cfg.seed,
            masking=data.masking,
            name=data.train,
            **ids,
        )
        valid = None
        if data.valid:  # the validation instances and masks depend on the data alone
            valid = validation_batches(instances(data.valid, 0), tok, model_cfg, cfg.batch_size, data.valid)
        loss = MaskedLMWithNSP()
        eval_bs = max(1, cfg.batch_size // run.dist.world)

        def validation(limit: int | None) -> Callable[[nn.Module], dict[str, float]] | None:
            if valid is None:
                return None
            source = valid
            return lambda m: loss.evaluate(m, source.eval_batches(eval_bs), run.dist.device, limit=limit)

        self.exact_valid = validation(None)
        n = len(batches.instances)
        what = (
            f"{n:,} sentence pairs ({int(batches.instances.random_next.sum()):,} with a random next segment)"
            if batches.paired
            else f"{n:,} single segments (no next-sentence prediction)"
        )
        return Setup(
            model_config=model_cfg,
            tokenizer=tok,
            batches=batches,
            loss=loss,
            data_line=(
                f"data: {what}, {len(batches):,} batches of {cfg.batch_size} per epoch, "
                f"{data.masking} masking of {data.mlm_prob:.0%}"
                + ("" if data.mask_unit == "token" else f" by {data.mask_unit}s")
                + (f"; {len(valid.instances):,} validation sequences" if valid else "")
            ),
            vocabulary=f"{tok.kind} vocabulary of {tok.vocab_size}",
            per_rank=cfg.batch_size // run.dist.world,
            unit="sequences",
            validate=validation(cfg.eval_batches),
        )

    def evaluate(
        self, run: Run[PretrainExperiment], setup: Setup, model: nn.Module, report: RunReport
    ) -> None:
        if self.exact_valid is None:
            return
        report.valid = v = self.exact_valid(model)
        nsp = f" · NSP accuracy {v['nsp_acc']:.2f}%" if "nsp_acc" in v else ""
        run.say(
            f"valid: MLM accuracy {v['mlm_acc']:.2f}% · MLM perplexity "
            f"{v['mlm_ppl']:.2f}{nsp} ({v['predictions']:,} predictions)"
        )

    def plan_model(
        self, exp: PretrainExperiment, out: Path, cache: dict[str, Any], base: ModelConfig | None
    ) -> tuple[ModelConfig, list[str]]:
        if base is not None or exp.model.get("vocab_size"):
            return planned_config(exp, exp.model.get("vocab_size", 0), base), []
        data = exp.data
        if data.tokenizer_file:
            return planned_config(exp, Tokenizer.load(data.path(data.tokenizer_file)).vocab_size, None), []
        parts = [
            exp.task,
            str(data.path(data.train).resolve()),
            data.corpus_format,
            str(data.vocab_size),
            str(data.lowercase),
            str(data.tokenizer_sample),
        ]
        tok, overrides = planned_once("wordpiece", parts, out, cache, lambda: wordpiece(data))
        return planned_config(exp, tok.vocab_size, None), overrides
