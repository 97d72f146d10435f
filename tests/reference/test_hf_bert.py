"""The BERT backbone and pre-training heads against Hugging Face ``transformers`` with copied
weights (a tiny, odd-sized model built offline from a config)."""

from __future__ import annotations

import pytest
import torch

from fullrank.models import Encoder
from fullrank.models.convert_hf import bert_config_from_hf, bert_state_dict_from_hf

transformers = pytest.importorskip("transformers")


@pytest.mark.reference
def test_bert_for_pretraining_matches_hugging_face():
    hf_cfg = transformers.BertConfig(vocab_size=53, hidden_size=24, num_hidden_layers=3,
                                     num_attention_heads=4, intermediate_size=37,
                                     max_position_embeddings=19, attn_implementation="eager")
    hf = transformers.BertForPreTraining(hf_cfg).eval()
    with torch.no_grad():  # non-trivial norms and biases
        for name, p in hf.named_parameters():
            if "LayerNorm" in name or name.endswith("bias"):
                p.uniform_(-0.5, 0.5)
    cfg = bert_config_from_hf(hf_cfg.to_dict())
    ours = Encoder(cfg).eval()
    state = bert_state_dict_from_hf(hf.state_dict(), cfg.n_layers)
    missing, unexpected = ours.load_state_dict(state, strict=True)
    assert not missing and not unexpected

    tokens = torch.randint(0, 53, (5, 11))
    segments = (torch.arange(11) >= 6).long().expand(5, 11)
    keep = torch.ones(5, 11, dtype=torch.bool)
    keep[2, 7:] = False
    keep[4, 3:] = False
    with torch.no_grad():
        ref = hf(input_ids=tokens, token_type_ids=segments, attention_mask=keep.long(),
                 output_hidden_states=True)
        hidden = ours(tokens, segments=segments, mask=keep)
    torch.testing.assert_close(hidden[keep], ref.hidden_states[-1][keep], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(ours.mlm_logits(hidden)[keep], ref.prediction_logits[keep],
                               atol=1e-4, rtol=1e-5)
    torch.testing.assert_close(ours.nsp_logits(hidden), ref.seq_relationship_logits,
                               atol=1e-5, rtol=1e-5)
    assert cfg.num_params() == sum(p.numel() for p in hf.parameters())
