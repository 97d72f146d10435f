"""Screening probes for leaving the masked-LM plateau: a tiny BERT (d_model 64, 2 layers, 2
heads, n = 64, batch 64, pre-LN, masked LM alone, no dropout, AdamW lr 2e-3 constant after a 10%
warm-up) on the Wikipedia corpus, one setting changed per probe; validation MLM accuracy (BERT's
15% masking, fixed masks) every 250 steps. Small enough to screen many settings on one core
before the larger probes of ``bench/bert_probes.py``.

    python bench/bert_screen.py --name mimetic --pos sinusoidal --scale --mimetic
    python bench/bert_screen.py --report             # table of bench/results/bert_screen/*.log

Each probe prints ``NAME STEP MLM_ACC MLM_PPL SECONDS`` lines (its log in
``bench/results/bert_screen/NAME.log``). The corpus and WordPiece vocabulary are those of the
probes (``--vocab``, ``--cache``).
"""

from __future__ import annotations

import argparse
import functools
import math
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data" / "wikipedia-en-2015"
RESULTS = ROOT / "bench" / "results" / "bert_screen"
# what each recorded probe changed from the tiny pre-LN baseline ("learned")
PROBES = {
    "learned": "learned positions (the baseline)",
    "lr5e3": "learning rate 5e-3",
    "seq32": "n = 32",
    "sinus": "sinusoidal positions, embeddings scaled by √d",
    "mimetic": "sinusoidal positions, scaled embeddings, mimetic q/k initialisation",
    "mim_learned": "learned positions, mimetic q/k",
    "mim_learned_sinit": "learned positions started at the sinusoid table, mimetic q/k",
    "mim_sinus_noscale": "sinusoidal positions, unscaled embeddings, mimetic q/k",
    "mim_post": "as mimetic, post-LN",
}


def run(a: argparse.Namespace) -> None:
    from fullrank.data.bert_pretraining import PretrainingBatches, make_segments, masking_rule
    from fullrank.data.document_cache import cached_documents
    from fullrank.data.tokenizers import Tokenizer
    from fullrank.models.encoder import Encoder, EncoderConfig
    from fullrank.training.config import TrainConfig
    from fullrank.training.optim import make_optimizer
    from fullrank.training.schedules import make_schedule
    from fullrank.training.tasks import MaskedLMWithNSP

    torch.set_num_threads(1)
    torch.manual_seed(0)
    tok = Tokenizer.load(a.vocab)
    train_docs = cached_documents(DATA / "train_*.txt.xz", "wikiextractor", tok, a.cache, skip_short=True)
    valid_docs = cached_documents(DATA / "valid.txt.xz", "wikiextractor", tok, a.cache, skip_short=True)
    assert tok.cls_id is not None and tok.sep_id is not None  # a wordpiece tokenizer's
    batches = functools.partial(PretrainingBatches, cls_id=tok.cls_id, sep_id=tok.sep_id, pad_id=tok.pad_id)
    train = batches(
        make_segments(train_docs, max_seq_len=a.seq, seed=0),
        masking_rule(tok, mlm_prob=0.15, max_predictions=math.ceil(0.15 * a.seq) + 1),
        batch_size=64,
        seed=0,
    )
    valid = batches(
        make_segments(valid_docs, max_seq_len=a.seq, seed=0),
        masking_rule(tok, mlm_prob=0.15, max_predictions=math.ceil(0.15 * a.seq)),
        batch_size=64,
        seed=0,
        masking="static",
    )
    cfg = EncoderConfig(
        vocab_size=tok.vocab_size,
        d_model=64,
        n_heads=2,
        d_ff=256,
        n_layers=2,
        seq_len=a.seq,
        max_len=a.seq,
        norm_first=not a.post,
        next_sentence=False,
        dropout=0.0,
        attn_dropout=0.0,
        ffn_dropout=0.0,
        positions=a.pos,
        scale_embeddings=a.scale,
        attn_init="mimetic" if a.mimetic else "normal",
    )
    model = Encoder(cfg)
    if a.pos_init_sinusoid:
        from fullrank.layers.embeddings import sinusoidal_table

        model.embed.positions.weight.data.copy_(sinusoidal_table(a.seq, 64))
    tc = TrainConfig(
        steps=a.steps,
        optimizer="adamw",
        lr=a.lr,
        betas=(0.9, 0.98),
        eps=1e-6,
        weight_decay=0.01,
        schedule="constant",
        warmup=a.steps // 10,
        clip_grad=1.0,
    )
    opt, schedule, task = make_optimizer(model, tc), make_schedule(tc, 64), MaskedLMWithNSP()
    start = time.perf_counter()
    for step in range(1, a.steps + 1):
        for group in opt.param_groups:
            group["lr"] = schedule(step)
        loss = task.loss(model, train.get(0, step - 1))
        (loss.loss / loss.n_tokens).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad()
        if step % 250 == 0:
            model.eval()
            with torch.no_grad():
                r = task.evaluate(model, valid.eval_batches(64), torch.device("cpu"), limit=15)
            model.train()
            print(
                a.name,
                step,
                round(r["mlm_acc"], 2),
                round(r["mlm_ppl"], 1),
                round(time.perf_counter() - start),
                flush=True,
            )


def report() -> None:
    print("| probe | what changes | MLM acc % at 250 / 500 / 750 / 1000 / 1500 steps | ppl at last |")
    print("|---|---|---|---|---|")
    for name, what in PROBES.items():
        log = RESULTS / f"{name}.log"
        if not log.is_file():
            continue
        rows = [line.split() for line in log.read_text().splitlines() if line.startswith(name)]
        at = {int(r[1]): float(r[2]) for r in rows}
        marks = " / ".join(f"{at[s]:.1f}" if s in at else "–" for s in (250, 500, 750, 1000, 1500))
        print(f"| {name} | {what} | {marks} | {float(rows[-1][3]):.0f} at {rows[-1][1]} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--report", action="store_true", help="table of the recorded probes")
    ap.add_argument("--name", default="probe")
    ap.add_argument("--steps", type=int, default=1500)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--pos", choices=["learned", "sinusoidal"], default="learned")
    ap.add_argument("--scale", action="store_true", help="embeddings scaled by √d_model")
    ap.add_argument("--mimetic", action="store_true", help="mimetic q/k initialisation")
    ap.add_argument("--post", action="store_true", help="post-LN instead of pre-LN")
    ap.add_argument(
        "--pos-init-sinusoid", action="store_true", help="learned positions started at the sinusoid table"
    )
    ap.add_argument("--vocab", type=Path, default=ROOT / "runs" / "probes" / "wordpiece.json")
    ap.add_argument("--cache", type=Path, default=ROOT / ".cache" / "fullrank")
    a = ap.parse_args()
    report() if a.report else run(a)


if __name__ == "__main__":
    main()
