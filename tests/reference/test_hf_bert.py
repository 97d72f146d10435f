"""The BERT backbone and pre-training heads against Hugging Face ``transformers`` with copied
weights (a tiny, odd-sized model built offline from a config)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

from fullrank.models import Encoder
from fullrank.models.convert_hf import bert_layout, encoder_config_from_hf, load_from_hf, strip_prefix

transformers = pytest.importorskip("transformers")


@pytest.mark.reference
def test_bert_for_pretraining_matches_hugging_face():
    hf_cfg = transformers.BertConfig(
        vocab_size=53,
        hidden_size=24,
        num_hidden_layers=3,
        num_attention_heads=4,
        intermediate_size=37,
        max_position_embeddings=19,
        attn_implementation="eager",
    )
    hf = transformers.BertForPreTraining(hf_cfg).eval()
    with torch.no_grad():  # non-trivial norms and biases
        for name, p in hf.named_parameters():
            if "LayerNorm" in name or name.endswith("bias"):
                p.uniform_(-0.5, 0.5)
    ours = _converted(hf, hf_cfg)
    cfg = ours.config

    tokens = torch.randint(0, 53, (5, 11))
    segments = (torch.arange(11) >= 6).long().expand(5, 11)
    keep = torch.ones(5, 11, dtype=torch.bool)
    keep[2, 7:] = False
    keep[4, 3:] = False
    with torch.no_grad():
        ref = hf(
            input_ids=tokens, token_type_ids=segments, attention_mask=keep.long(), output_hidden_states=True
        )
        hidden = ours(tokens, segments=segments, mask=keep)
    torch.testing.assert_close(hidden[keep], ref.hidden_states[-1][keep], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(
        ours.mlm_logits(hidden)[keep], ref.prediction_logits[keep], atol=1e-4, rtol=1e-5
    )
    torch.testing.assert_close(ours.nsp_logits(hidden), ref.seq_relationship_logits, atol=1e-5, rtol=1e-5)
    assert cfg.num_params() == sum(p.numel() for p in hf.parameters())


def _tiny_hf_config(**kw):
    return transformers.BertConfig(
        vocab_size=53,
        hidden_size=24,
        num_hidden_layers=3,
        num_attention_heads=4,
        intermediate_size=37,
        max_position_embeddings=19,
        attn_implementation="eager",
        **kw,
    )


def _perturb(hf) -> None:
    with torch.no_grad():  # non-trivial norms and biases
        for name, p in hf.named_parameters():
            if "LayerNorm" in name or name.endswith("bias"):
                p.uniform_(-0.5, 0.5)


def _converted(hf, hf_cfg):
    """``hf``'s weights in a fullrank ``Encoder`` (every tensor mapped)."""
    names = set(strip_prefix(hf.state_dict(), "bert."))
    cfg = encoder_config_from_hf(hf_cfg.to_dict(), names)
    ours = Encoder(cfg).eval()
    load_from_hf(ours, bert_layout(cfg, type(hf).__name__), hf.state_dict())
    assert cfg.num_params() == sum(p.numel() for p in hf.parameters())
    return ours


def _batch():
    tokens = torch.randint(0, 53, (5, 11))
    segments = (torch.arange(11) >= 6).long().expand(5, 11)
    keep = torch.ones(5, 11, dtype=torch.bool)
    keep[2, 7:] = False
    keep[4, 3:] = False
    return tokens, segments, keep


@pytest.mark.reference
def test_bert_for_sequence_classification_matches_hugging_face():
    hf_cfg = _tiny_hf_config(num_labels=3)
    hf = transformers.BertForSequenceClassification(hf_cfg).eval()
    _perturb(hf)
    ours = _converted(hf, hf_cfg)
    assert ours.config.n_classes == 3 and not ours.config.pretraining_heads
    tokens, segments, keep = _batch()
    with torch.no_grad():
        ref = hf(input_ids=tokens, token_type_ids=segments, attention_mask=keep.long()).logits
        got = ours.class_logits(ours(tokens, segments=segments, mask=keep))
    torch.testing.assert_close(got, ref, atol=1e-5, rtol=1e-5)


@pytest.mark.reference
def test_bert_for_question_answering_matches_hugging_face():
    hf_cfg = _tiny_hf_config()
    hf = transformers.BertForQuestionAnswering(hf_cfg).eval()
    _perturb(hf)
    ours = _converted(hf, hf_cfg)
    assert ours.config.span_head and ours.pooler is None  # HF's QA model has no pooler
    tokens, segments, keep = _batch()
    with torch.no_grad():
        ref = hf(input_ids=tokens, token_type_ids=segments, attention_mask=keep.long())
        got = ours.span_logits(ours(tokens, segments=segments, mask=keep))
    torch.testing.assert_close(got[..., 0][keep], ref.start_logits[keep], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(got[..., 1][keep], ref.end_logits[keep], atol=1e-5, rtol=1e-5)


@pytest.mark.reference
def test_pretraining_loss_matches_hugging_face_on_the_same_masked_batch():
    from fullrank.data.batch import EncoderInputs, PretrainingBatch
    from fullrank.training.tasks import MaskedLMWithNSP

    hf_cfg = _tiny_hf_config()
    hf = transformers.BertForPreTraining(hf_cfg).eval()
    _perturb(hf)
    ours = _converted(hf, hf_cfg)
    tokens, segments, keep = _batch()
    gen = torch.Generator().manual_seed(3)
    chosen = (torch.rand(5, 11, generator=gen) < 0.3) & keep
    chosen[:, 1] = True  # every row predicts something
    labels = torch.where(chosen, torch.randint(0, 53, (5, 11), generator=gen), -100)
    nsp = torch.tensor([0, 1, 1, 0, 1])
    ref = hf(
        input_ids=tokens,
        token_type_ids=segments,
        attention_mask=keep.long(),
        labels=labels,
        next_sentence_label=nsp,
    ).loss
    index = torch.nonzero(chosen.reshape(-1)).squeeze(1)
    batch = PretrainingBatch(
        EncoderInputs(tokens, segments, keep),
        index,
        labels.reshape(-1)[index],
        nsp,
        nsp_weight=len(index) / 5,
    )
    out = MaskedLMWithNSP().loss(ours, batch)
    got = out.loss / out.n_tokens  # what the training loop minimises
    torch.testing.assert_close(got, ref, atol=1e-5, rtol=1e-5)
    # and the gradient reaches the tied MLM decoder through the fused cross-entropy (row 0 is
    # Hugging Face's padding_idx, whose embedding it never updates; ours treats it as any row)
    got.backward()
    ref.backward()
    torch.testing.assert_close(
        ours.embed.token.weight.grad[1:],
        hf.bert.embeddings.word_embeddings.weight.grad[1:],
        atol=1e-5,
        rtol=1e-4,
    )
    torch.testing.assert_close(ours.mlm.bias.grad, hf.cls.predictions.bias.grad, atol=1e-5, rtol=1e-4)


def prefixed(name: str) -> Callable[[str], str]:
    """An assert_close message naming the pair that differs."""
    return lambda m: f"{name}: {m}"


@pytest.mark.reference
def test_classification_loss_and_gradients_match_hugging_face():
    """The classification loss reads the first position alone (the last block computed there
    only): its value and every gradient equal Hugging Face's full computation."""
    from fullrank.data.batch import ClassificationBatch, EncoderInputs
    from fullrank.training.tasks import SequenceClassification

    hf_cfg = _tiny_hf_config(num_labels=3, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    hf = transformers.BertForSequenceClassification(hf_cfg).eval()
    _perturb(hf)
    ours = _converted(hf, hf_cfg)
    tokens, segments, keep = _batch()
    labels = torch.tensor([0, 2, 1, 1, 0])
    ref = hf(input_ids=tokens, token_type_ids=segments, attention_mask=keep.long(), labels=labels).loss
    out = SequenceClassification().loss(
        ours, ClassificationBatch(EncoderInputs(tokens, segments, keep), labels)
    )
    got = out.loss / out.n_tokens
    torch.testing.assert_close(got, ref, atol=1e-5, rtol=1e-5)
    got.backward()
    ref.backward()
    last = ours.layers[-1]
    hf_last = hf.bert.encoder.layer[-1]
    pairs = {
        "token embeddings (rows 1…)": (
            ours.embed.token.weight.grad[1:],
            hf.bert.embeddings.word_embeddings.weight.grad[1:],
        ),
        "last block's second feed-forward": (last.ffn.fc2.weight.grad, hf_last.output.dense.weight.grad),
        "last block's output projection": (
            last.self_attn.out_proj.weight.grad,
            hf_last.attention.output.dense.weight.grad,
        ),
        "last block's key weights": (
            last.self_attn.qkv_proj.weight.grad[24:48],
            hf_last.attention.self.key.weight.grad,
        ),
        "classifier": (ours.classifier.weight.grad, hf.classifier.weight.grad),
    }
    for name, (a, b) in pairs.items():
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4, msg=prefixed(name))
