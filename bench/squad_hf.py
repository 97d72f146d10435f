"""SQuAD fine-tuning through Hugging Face alone: an independent check of fullrank's SQuAD numbers.

A fullrank pre-trained encoder, written with ``fullrank export`` (a pre-LN one, as the Wikipedia
recipe's, becomes ``RobertaPreLayerNormForMaskedLM``), is fine-tuned by ``transformers``'
``…ForQuestionAnswering`` with the tokenizer export wrote, on the split of
``configs/bert/squad.yaml`` (the dev-v1.1.json articles, every 4th one the test part) — but with
none of fullrank's code: the preprocessing and post-processing of ``transformers``' own
question-answering example (``run_qa.py``: question first, ``truncation="only_second"``, windows
overlapping by ``--stride`` tokens, offsets to cut the answer from the context, the best start
and end among the top 20), ``torch.optim.AdamW`` with ``transformers``'
``get_linear_schedule_with_warmup``, and SQuAD v1.1's EM and F1 as its official script defines
them, written out here. ``--scratch`` starts from ``transformers``' own random initialisation of
the same config instead. The settings are ``configs/bert/squad.yaml``'s: 800 steps of 32, lr 3e-4
with 80 warm-up steps, weight decay 0.01, clipping at 1.0, windows of 128 tokens.

    fullrank export runs/bert/wiki_recipe -o runs/hf/wiki_recipe
    python bench/squad_hf.py runs/hf/wiki_recipe ../shared/data/squad-v1.1/dev-v1.1.json --seed 0
    python bench/squad_hf.py runs/hf/wiki_recipe ../shared/data/squad-v1.1/dev-v1.1.json --seed 0 --scratch
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import string
import sys
import time
from pathlib import Path

import torch


def split(path: Path, test_every: int) -> tuple[list[dict], list[dict]]:
    """(training questions, test questions): every ``test_every``-th article (1-based) is test."""
    data = json.loads(path.read_text(encoding="utf-8"))["data"]
    parts: tuple[list[dict], list[dict]] = ([], [])
    for i, article in enumerate(data):
        for paragraph in article["paragraphs"]:
            for qa in paragraph["qas"]:
                q = {"id": qa["id"], "question": qa["question"], "context": paragraph["context"]}
                q["answers"] = [a["text"] for a in qa["answers"]]
                q["start"] = qa["answers"][0]["answer_start"]
                parts[(i + 1) % test_every == 0].append(q)
    return parts


def windows(tok, questions: list[dict], max_len: int, stride: int, train: bool) -> dict:
    """``run_qa.py``'s ``prepare_train_features`` / ``prepare_validation_features``."""
    enc = tok(
        [q["question"].lstrip() for q in questions],
        [q["context"] for q in questions],
        truncation="only_second",
        max_length=max_len,
        stride=stride,
        return_overflowing_tokens=True,
        return_offsets_mapping=True,
        padding="max_length",
    )
    owner = enc.pop("overflow_to_sample_mapping")
    starts, ends, offsets = [], [], []
    for w, offset in enumerate(enc["offset_mapping"]):
        seq = enc.sequence_ids(w)
        q = questions[owner[w]]
        if train:
            a0 = q["start"]
            a1 = a0 + len(q["answers"][0])
            first = seq.index(1)
            last = len(seq) - 1 - seq[::-1].index(1)
            if not (offset[first][0] <= a0 and offset[last][1] >= a1):
                s, e = 1, -1  # the answer is outside: point at [CLS] (s - 1 = e + 1 = 0)
            else:
                s = first
                while s <= last and offset[s][0] <= a0:
                    s += 1
                e = last
                while e >= first and offset[e][1] >= a1:
                    e -= 1
            starts.append(s - 1)
            ends.append(e + 1)
        offsets.append([o if seq[k] == 1 else None for k, o in enumerate(offset)])
    out = {k: torch.tensor(v) for k, v in enc.items() if k != "offset_mapping"}
    out["owner"] = torch.tensor(owner)
    if train:
        out["start_positions"], out["end_positions"] = torch.tensor(starts), torch.tensor(ends)
    return {"tensors": out, "offsets": offsets}


def normalize(text: str) -> str:
    """SQuAD v1.1's ``normalize_answer``: lower case, no punctuation, articles or extra space."""
    text = "".join(ch for ch in text.lower() if ch not in set(string.punctuation))
    return " ".join(re.sub(r"\b(a|an|the)\b", " ", text).split())


def f1(prediction: str, truth: str) -> float:
    p, t = normalize(prediction).split(), normalize(truth).split()
    common = sum((collections.Counter(p) & collections.Counter(t)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(p), common / len(t)
    return 2 * precision * recall / (precision + recall)


def predict(model, feats: dict, questions: list[dict], n_best: int = 20, max_answer: int = 30) -> list[str]:
    """``run_qa.py``'s ``postprocess_qa_predictions``: the best valid span over every window."""
    t = feats["tensors"]
    best: dict[int, tuple[float, str]] = {}
    model.eval()
    with torch.no_grad():
        for i in range(0, len(t["input_ids"]), 64):
            kw = {k: t[k][i : i + 64] for k in ("input_ids", "token_type_ids", "attention_mask")}
            out = model(**kw)
            for j in range(len(kw["input_ids"])):
                w = i + j
                offsets, q = feats["offsets"][w], int(t["owner"][w])
                s_log, e_log = out.start_logits[j], out.end_logits[j]
                for s in s_log.argsort(descending=True)[:n_best].tolist():
                    for e in e_log.argsort(descending=True)[:n_best].tolist():
                        if offsets[s] is None or offsets[e] is None or e < s or e - s + 1 > max_answer:
                            continue
                        score = float(s_log[s] + e_log[e])
                        if q not in best or score > best[q][0]:
                            text = questions[q]["context"][offsets[s][0] : offsets[e][1]]
                            best[q] = (score, text)
    model.train()
    return [best.get(q, (0.0, ""))[1] for q in range(len(questions))]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("model", type=Path, help="a directory fullrank export wrote")
    p.add_argument("squad", type=Path, help="dev-v1.1.json")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--scratch", action="store_true", help="transformers' random initialisation instead")
    p.add_argument("--steps", type=int, default=800)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--warmup", type=int, default=80)
    p.add_argument("--max-len", type=int, default=128)
    p.add_argument("--stride", type=int, default=64, help="tokens shared by consecutive windows")
    p.add_argument("--test-every", type=int, default=4)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out", type=Path, default=None, help="append the result as a JSON line here")
    a = p.parse_args()

    import transformers

    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    config = transformers.AutoConfig.from_pretrained(a.model)
    arch = (
        config.architectures[0]
        .replace("ForMaskedLM", "ForQuestionAnswering")
        .replace("ForPreTraining", "ForQuestionAnswering")
    )
    cls = getattr(transformers, arch)
    model = cls(config) if a.scratch else cls.from_pretrained(a.model)
    tok = transformers.AutoTokenizer.from_pretrained(a.model)
    train_q, test_q = split(a.squad, a.test_every)
    train = windows(tok, train_q, a.max_len, a.stride, train=True)
    test = windows(tok, test_q, a.max_len, a.stride, train=False)
    t = train["tensors"]
    n = len(t["input_ids"])
    print(
        f"{arch} ({'random weights' if a.scratch else 'pre-trained'}), seed {a.seed}: "
        f"{len(train_q):,} training questions in {n:,} windows, {len(test_q):,} test questions",
        flush=True,
    )
    decay = [p for name, p in model.named_parameters() if not re.search(r"bias|LayerNorm|layer_norm", name)]
    rest = [p for name, p in model.named_parameters() if re.search(r"bias|LayerNorm|layer_norm", name)]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": 0.01}, {"params": rest, "weight_decay": 0.0}],
        lr=a.lr,
        betas=(0.9, 0.999),
        eps=1e-6,
    )
    sched = transformers.get_linear_schedule_with_warmup(opt, a.warmup, a.steps)
    gen = torch.Generator().manual_seed(a.seed)
    order, at, losses, began = torch.randperm(n, generator=gen), 0, [], time.perf_counter()
    model.train()
    keys = ("input_ids", "token_type_ids", "attention_mask", "start_positions", "end_positions")
    for step in range(1, a.steps + 1):
        if at + a.batch > n:
            order, at = torch.randperm(n, generator=gen), 0
        idx = order[at : at + a.batch]
        at += a.batch
        loss = model(**{k: t[k][idx] for k in keys}).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step(), sched.step(), opt.zero_grad()
        losses.append(loss.item())
        if step % 100 == 0:
            seconds = time.perf_counter() - began
            print(f"step {step}: loss {sum(losses[-100:]) / 100:.4f} ({seconds:.0f} s)", flush=True)
    answers = predict(model, test, test_q)
    pairs = list(zip(answers, test_q))
    em = 100 * sum(max(float(normalize(x) == normalize(g)) for g in q["answers"]) for x, q in pairs)
    fs = 100 * sum(max(f1(x, g) for g in q["answers"]) for x, q in pairs)
    row = {
        "model": str(a.model),
        "start": "scratch" if a.scratch else "pre-trained",
        "seed": a.seed,
        "EM": round(em / len(test_q), 2),
        "F1": round(fs / len(test_q), 2),
        "train_loss_last100": round(sum(losses[-100:]) / len(losses[-100:]), 4),
        "minutes": round((time.perf_counter() - began) / 60, 1),
    }
    print(json.dumps(row), flush=True)
    if a.out:
        with a.out.open("a") as f:
            f.write(json.dumps(row) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
