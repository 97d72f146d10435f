"""Does BERT pre-training learn alike in fullrank and in Hugging Face? Both models train on the
same masked batches of a pre-training config, with the same optimiser and schedule, and report
validation masked-LM accuracy and perplexity side by side.

    python bench/bert_learning.py                          # configs/bert/pretrain.yaml, 600 steps
    python bench/bert_learning.py --steps 3000 --set data.root=/data

What it compares: fullrank's :class:`~fullrank.models.encoder.Encoder`, trained and measured
through the recipe's :class:`~fullrank.training.tasks.MaskedLMWithNSP`, against
``transformers.BertForPreTraining`` (eager attention) of the same shape, each from its own random
initialisation (both BERT's ``N(0, 0.02)``), trained with a plain PyTorch loop and the recipe's
optimiser and schedule (:func:`~fullrank.training.optim.make_optimizer`,
:func:`~fullrank.training.schedules.make_schedule`: AdamW, weight decay 0.01 on matrices, linear
warm-up over 10% of ``--steps`` and decay, the config's gradient clipping) on the batches of
:class:`~fullrank.data.bert_pretraining.PretrainingBatches`
(the recipe's pairs and masks). Validation: the first ``--eval-batches`` batches of 64 validation
pairs with fixed masks. If fullrank's curve matched Hugging Face's and both were poor, the data
or the schedule limits learning, not the model. Writes ``bench/results/bert_learning.md``.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import itertools
import math
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import machine, write

from fullrank.data.bert_pretraining import Instances, PretrainingBatches, make_instances, masking_rule
from fullrank.data.document_cache import tokenize_documents
from fullrank.data.documents import read_documents
from fullrank.models.encoder import Encoder, EncoderConfig
from fullrank.recipes.bert import train_wordpiece
from fullrank.recipes.config import load_experiment
from fullrank.recipes.encoder_data import PretrainData
from fullrank.training.optim import make_optimizer
from fullrank.training.schedules import make_schedule
from fullrank.training.tasks import MaskedLMWithNSP

Loss = Callable[[Any], torch.Tensor]  # batch → BERT's loss, mean MLM + mean NSP
Evaluate = Callable[[Iterable[Any]], tuple[float, float]]  # batches → (MLM accuracy %, perplexity)


def fullrank_model(cfg: EncoderConfig) -> tuple[torch.nn.Module, Loss, Evaluate]:
    """fullrank's encoder with the recipe's own loss and evaluation (:class:`MaskedLMWithNSP`)."""
    m, task = Encoder(cfg), MaskedLMWithNSP()

    def loss(b: Any) -> torch.Tensor:
        out = task.loss(m, b)
        return out.loss / out.n_tokens

    def evaluate(batches: Iterable[Any]) -> tuple[float, float]:
        r = task.evaluate(m, batches, torch.device("cpu"))
        return r["mlm_acc"], r["mlm_ppl"]

    return m, loss, evaluate


def hf_model(cfg: EncoderConfig) -> tuple[torch.nn.Module, Loss, Evaluate]:
    """``BertForPreTraining`` of the same shape; the same loss and measures, written for its heads."""
    from transformers import BertConfig, BertForPreTraining

    m = BertForPreTraining(
        BertConfig(  # type: ignore[call-arg]  # typed signature omits its **kwargs, attn_implementation
            vocab_size=cfg.vocab_size,
            hidden_size=cfg.d_model,
            num_hidden_layers=cfg.n_layers,
            num_attention_heads=cfg.n_heads,
            intermediate_size=cfg.d_ff,
            max_position_embeddings=cfg.max_len,
            hidden_dropout_prob=cfg.dropout,
            attention_probs_dropout_prob=cfg.attn_dropout,
            attn_implementation="eager",
        )
    )

    def forward(b: Any) -> tuple[torch.Tensor, torch.Tensor]:  # MLM logits (N, V), NSP (B, 2)
        i = b.inputs
        seq, pooled = m.bert(input_ids=i.tokens, token_type_ids=i.segments, attention_mask=i.mask.long())[:2]
        picked = seq.reshape(-1, seq.shape[-1]).index_select(0, b.mlm_index)
        return m.cls.predictions(picked), m.cls.seq_relationship(pooled)

    def loss(b: Any) -> torch.Tensor:
        mlm, nsp = forward(b)
        return F.cross_entropy(mlm, b.mlm_labels) + F.cross_entropy(nsp, b.nsp_labels)

    @torch.no_grad()
    def evaluate(batches: Iterable[Any]) -> tuple[float, float]:
        right = n = 0
        nll = 0.0
        for b in batches:
            logits, _ = forward(b)
            right += int((logits.argmax(-1) == b.mlm_labels).sum())
            nll += float(F.cross_entropy(logits, b.mlm_labels, reduction="sum"))
            n += len(b.mlm_labels)
        return 100.0 * right / n, math.exp(nll / n)

    return m, loss, evaluate


def run(
    name: str,
    model: torch.nn.Module,
    loss: Loss,
    evaluate: Evaluate,
    train: PretrainingBatches,
    valid: PretrainingBatches,
    args: argparse.Namespace,
) -> list[dict[str, float]]:
    opt = make_optimizer(model, args.train)
    schedule = make_schedule(args.train)

    def measure() -> tuple[float, float]:
        model.eval()
        out = evaluate(itertools.islice(valid.eval_batches(64), args.eval_batches))
        model.train()
        return out

    torch.manual_seed(args.seed)
    rows, begun, epoch, index = [], time.perf_counter(), 0, 0
    every = max(1, args.steps // args.points)
    for step in range(1, args.steps + 1):
        batch = train.get(epoch, index)
        index += 1
        if index == len(train):
            epoch, index = epoch + 1, 0
        value = loss(batch)
        opt.zero_grad()
        value.backward()
        if args.train.clip_grad:
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.train.clip_grad)
        for group in opt.param_groups:
            group["lr"] = schedule(step)
        opt.step()
        if step % every == 0 or step == args.steps:
            acc, ppl = measure()
            rows.append({"step": step, "acc": acc, "ppl": ppl})
            print(
                f"{name:>8} step {step:>6}: MLM accuracy {acc:5.2f}% · perplexity {ppl:7.1f} "
                f"({time.perf_counter() - begun:.0f} s)",
                flush=True,
            )
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--config", default="configs/bert/pretrain.yaml")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--steps", type=int, default=600)
    p.add_argument("--lr", type=float, default=None, help="peak rate (default: the config's)")
    p.add_argument("--points", type=int, default=6, help="evaluations per run")
    p.add_argument("--eval-batches", type=int, default=8)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    exp = load_experiment(args.config, args.set)
    data, cfg = exp.data, exp.train
    if not isinstance(data, PretrainData) or data.valid is None:
        sys.exit(f"{args.config}: not a `task: bert` config with data.valid")
    args.lr = args.lr or cfg.lr
    # the recipe's optimiser and schedule, over --steps with a 10% warm-up
    args.train = dataclasses.replace(cfg, steps=args.steps, lr=args.lr, warmup=max(1, args.steps // 10))
    with tempfile.TemporaryDirectory() as tmp:
        tok = train_wordpiece(data, Path(tmp) / "wordpiece.json")
    model_cfg = EncoderConfig(
        vocab_size=tok.vocab_size,
        **{k: v for k, v in exp.model.items() if k in EncoderConfig.__dataclass_fields__},
    )

    def pairs(name: str) -> Instances:
        docs = read_documents(data.path(name), data.corpus_format)
        corpus = tokenize_documents(docs, tok, skip_short=data.short_documents == "skip")
        return make_instances(corpus, max_seq_len=model_cfg.seq_len, seed=cfg.seed)

    rule = masking_rule(tok, mlm_prob=data.mlm_prob, max_predictions=data.max_predictions)
    cls_id, sep_id, pad_id = tok.cls_id, tok.sep_id, tok.pad_id
    assert cls_id is not None and sep_id is not None  # a wordpiece tokenizer's
    batches = functools.partial(PretrainingBatches, cls_id=cls_id, sep_id=sep_id, pad_id=pad_id)
    train = batches(pairs(data.train), rule, batch_size=cfg.batch_size, seed=cfg.seed, masking=data.masking)
    valid = batches(pairs(data.valid), rule, batch_size=64, masking="static")
    results = {}
    for name, build in (("fullrank", fullrank_model), ("hf", hf_model)):
        torch.manual_seed(args.seed)
        model, loss, evaluate = build(model_cfg)
        print(f"{name}: {sum(q.numel() for q in model.parameters()):,} parameters", flush=True)
        results[name] = run(name, model, loss, evaluate, train, valid, args)

    lines = [
        "# BERT pre-training, fullrank and Hugging Face on the same batches\n",
        f"`python bench/bert_learning.py --config {args.config} --steps {args.steps} "
        f"--lr {args.lr:g}` · {machine().get('cpu', 'CPU')} · {args.threads} thread(s)\n",
        "| step | fullrank MLM acc % | HF MLM acc % | fullrank ppl | HF ppl |",
        "|---:|---:|---:|---:|---:|",
    ]
    for a, b in zip(results["fullrank"], results["hf"]):
        lines.append(f"| {a['step']} | {a['acc']:.2f} | {b['acc']:.2f} | {a['ppl']:.1f} | {b['ppl']:.1f} |")
    settings = {k: v for k, v in vars(args).items() if k != "train"}
    write(
        "bert_learning", "\n".join(lines) + "\n", {"args": settings, "machine": machine(), "results": results}
    )
    print("\n".join(lines[2:]))


if __name__ == "__main__":
    main()
