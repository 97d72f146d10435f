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
from pathlib import Path

from rich.console import Console

from fullrank.data.bert_pretraining import (
    Instances,
    PretrainingBatches,
    make_instances,
    make_segments,
    masking_rule,
)
from fullrank.data.document_cache import cached_documents, sample_documents
from fullrank.data.tokenizers import Tokenizer
from fullrank.recipes.common import Resume, RunReport, keeps_thread_count
from fullrank.recipes.config import ExperimentConfig
from fullrank.recipes.encoder_data import PretrainData
from fullrank.recipes.encoder_run import open_run
from fullrank.training.tasks import MaskedLMWithNSP

VALID_MLM_PROB = 0.15  # BERT's rate: validation is scored alike whatever a run trains with


def write_sentences(data: PretrainData, out: Path) -> Path:
    """The sentences of the training documents (``data.tokenizer_sample`` of them, evenly
    spread), one per line (WikiText's markup undone): the text the WordPiece vocabulary is
    trained on."""
    with open(out, "w", encoding="utf-8") as f:
        f.writelines("".join(s + "\n" for s in doc) for doc in sample_documents(data.path(data.train), data.corpus_format, data.tokenizer_sample))
    return out


def train_wordpiece(data: PretrainData, out: Path) -> Tokenizer:
    """Train the WordPiece vocabulary of ``data`` (lowercased unless ``data.lowercase`` is
    false) and save it to ``out``: what a pre-training run does, done once so that several runs
    can share one vocabulary (``data.tokenizer_file``)."""
    with tempfile.TemporaryDirectory() as tmp:
        text = write_sentences(data, Path(tmp) / "sentences.txt")
        tok = Tokenizer.train("wordpiece", [text], data.vocab_size, lowercase=data.lowercase)
    tok.save(out)
    return tok


@keeps_thread_count
def run_bert(exp: ExperimentConfig, *, resume: Resume = "never", progress: bool = True,
             console: Console | None = None) -> RunReport:
    """Pre-train a BERT encoder as ``exp`` describes."""
    data: PretrainData = exp.data  # type: ignore[assignment]
    cfg = exp.train
    tmp = tempfile.TemporaryDirectory()

    with tmp:  # the tokenizer's training text, written only when a tokenizer is trained
        run = open_run(exp, resume, console, tokenizer_files=lambda: [
            write_sentences(data, Path(tmp.name) / "sentences.txt")])
    tok = run.tok
    model, model_cfg = run.build()

    def instances(name: str, seed: int) -> Instances:
        corpus = cached_documents(data.path(name), data.corpus_format, tok, data.cache_dir,
                                  skip_short=data.short_documents == "skip", say=run.say)
        if corpus.skipped:
            run.say(f"{name}: {corpus.skipped} one-sentence documents left out "
                    f"(data.short_documents=skip)")
        if not model_cfg.next_sentence:
            return make_segments(corpus, max_seq_len=model_cfg.seq_len, seed=seed,
                                 short_seq_prob=data.short_seq_prob)
        return make_instances(corpus, max_seq_len=model_cfg.seq_len, seed=seed,
                              short_seq_prob=data.short_seq_prob,
                              random_next_prob=data.random_next_prob)

    rule = masking_rule(tok, mlm_prob=data.mlm_prob, max_predictions=data.max_predictions)
    ids = dict(cls_id=tok.cls_id, sep_id=tok.sep_id, pad_id=tok.pad_id)
    batches = PretrainingBatches(instances(data.train, cfg.seed), rule, batch_size=cfg.batch_size,
                                 seed=cfg.seed, masking=data.masking, name=data.train, **ids)
    valid = None
    if data.valid:  # the validation instances and masks depend on the data alone, not on the run
        valid_rule = masking_rule(tok, mlm_prob=VALID_MLM_PROB,
                                  max_predictions=math.ceil(VALID_MLM_PROB * model_cfg.seq_len))
        valid = PretrainingBatches(instances(data.valid, 0), valid_rule, batch_size=cfg.batch_size,
                                   seed=0, masking="static", name=data.valid, **ids)
    task = MaskedLMWithNSP()
    eval_bs = max(1, cfg.batch_size // run.dist.world)
    n = len(batches.instances)
    what = (f"{n:,} sentence pairs ({int(batches.instances.random_next.sum()):,} with a random "
            f"next segment)" if batches.paired else f"{n:,} single segments (no next-sentence "
                                                     f"prediction)")
    run.header(model_cfg, f"data: {what}, {len(batches):,} batches of {cfg.batch_size} per "
                          f"epoch, {data.masking} masking of {data.mlm_prob:.0%}"
                          + (f"; {len(valid.instances):,} validation sequences" if valid else ""))
    out = run.output(model_cfg)

    def evaluate(m, limit=cfg.eval_batches):  # noqa: ANN001, ANN202
        assert valid is not None
        return task.evaluate(m, valid.eval_batches(eval_bs), run.dist.device, limit=limit)

    report = run.train(model, model_cfg, task, batches, out, progress=progress,
                       evaluate=evaluate if valid else None)
    if run.dist.is_main:
        if valid is not None:
            model.eval()
            report.valid = evaluate(model, None)
            v = report.valid
            nsp = f" · NSP accuracy {v['nsp_acc']:.2f}%" if "nsp_acc" in v else ""
            run.say(f"valid: MLM accuracy {v['mlm_acc']:.2f}% · MLM perplexity "
                    f"{v['mlm_ppl']:.2f}{nsp} ({v['predictions']:,} predictions)")
        run.finish(report)
    return report
