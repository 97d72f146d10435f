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

import collections
import json
import re
import string
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from hf_finetune import arguments, fine_tune, model_and_tokenizer, report


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
    p = arguments(__doc__.splitlines()[0], steps=800, warmup=80)
    p.add_argument("--stride", type=int, default=64, help="tokens shared by consecutive windows")
    p.add_argument("--test-every", type=int, default=4)
    a = p.parse_args()

    began = time.perf_counter()
    model, tok = model_and_tokenizer(a, "ForQuestionAnswering")
    train_q, test_q = split(a.data, a.test_every)
    train = windows(tok, train_q, a.max_len, a.stride, train=True)
    test = windows(tok, test_q, a.max_len, a.stride, train=False)
    print(
        f"{type(model).__name__} ({'random weights' if a.scratch else 'pre-trained'}), seed {a.seed}: "
        f"{len(train_q):,} training questions in {len(train['tensors']['input_ids']):,} windows, "
        f"{len(test_q):,} test questions",
        flush=True,
    )
    keys = ("input_ids", "token_type_ids", "attention_mask", "start_positions", "end_positions")
    losses = fine_tune(model, train["tensors"], keys, a)
    answers = predict(model, test, test_q)
    pairs = list(zip(answers, test_q))
    em = 100 * sum(max(float(normalize(x) == normalize(g)) for g in q["answers"]) for x, q in pairs)
    fs = 100 * sum(max(f1(x, g) for g in q["answers"]) for x, q in pairs)
    report(a, losses, began, EM=em / len(test_q), F1=fs / len(test_q))
    return 0


if __name__ == "__main__":
    sys.exit(main())
