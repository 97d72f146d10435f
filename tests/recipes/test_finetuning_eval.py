"""Fine-tuning evaluation batches its examples longest first and reports them in file order: the
same predictions as one example at a time."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fullrank.data.finetuning import (
    SquadQuestion,
    classification_batches,
    encode_texts,
    in_file_order,
    make_windows,
)
from fullrank.data.tokenizers import Tokenizer
from fullrank.models import Encoder, EncoderConfig
from fullrank.recipes.squad import predict_answers
from fullrank.training.tasks import SequenceClassification

WORDS = "the quick brown fox jumps over a lazy dog while Tesla was born in Smiljan in 1856".split()


@pytest.fixture(scope="module")
def tok(tmp_path_factory) -> Tokenizer:
    text = tmp_path_factory.mktemp("tok") / "t.txt"
    rng = np.random.default_rng(0)
    text.write_text("\n".join(" ".join(rng.choice(WORDS, 12)) + " ." for _ in range(200)))
    return Tokenizer.train("wordpiece", [text], 100)


def encoder(tok: Tokenizer, **heads) -> Encoder:
    torch.manual_seed(0)
    cfg = EncoderConfig(
        vocab_size=tok.vocab_size, d_model=32, n_heads=2, d_ff=64, n_layers=2, seq_len=32, max_len=32,
        dropout=0.0, attn_dropout=0.0, pretraining_heads=False, **heads,
    )  # fmt: skip
    return Encoder(cfg).eval()


def test_classification_predictions_return_to_file_order(tok):
    rng = np.random.default_rng(1)

    def words(n: int) -> str:
        return " ".join(rng.choice(WORDS, n))

    texts = [(words(int(rng.integers(1, 12))), words(3)) for _ in range(11)]
    rows, segs = encode_texts(texts, tok, 32)
    assert len({len(r) for r in rows}) > 3  # lengths differ, so the order changes
    model, task, cpu = encoder(tok, n_classes=3), SequenceClassification(), torch.device("cpu")
    batches = classification_batches(rows, segs, np.zeros(11, np.int64), pad_id=tok.pad_id, batch_size=4)
    assert batches.eval_order().tolist() != list(range(11))
    probs, _ = task.predict(model, batches.eval_batches(), cpu)
    one = classification_batches(rows, segs, np.zeros(11, np.int64), pad_id=tok.pad_id, batch_size=1)
    alone = torch.cat([task.predict(model, [one.collate(np.array([i]))], cpu)[0] for i in range(11)])
    torch.testing.assert_close(in_file_order(probs, batches.eval_order()), alone, atol=1e-6, rtol=0)
    assert not torch.allclose(probs, alone, atol=1e-6)  # the batches visited them in another order


def test_squad_answers_do_not_depend_on_the_batch(tok):
    rng = np.random.default_rng(2)
    questions = []
    for i in range(9):
        context = " ".join(rng.choice(WORDS, int(rng.integers(4, 40))))
        questions.append(SquadQuestion(str(i), f"where was {WORDS[i]} ?", context, [("x", 0)], 0))
    model = encoder(tok, span_head=True)
    windows = make_windows(questions, tok, max_seq_len=32, doc_stride=8, training=False)
    assert len({len(r) for r in windows.rows}) > 3
    cpu = torch.device("cpu")
    batched = predict_answers(model, windows, questions, tok, cpu, batch_size=64)
    alone = predict_answers(model, windows, questions, tok, cpu, batch_size=1)
    assert batched == alone and len(set(alone)) > 3
