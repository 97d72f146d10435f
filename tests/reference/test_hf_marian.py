"""The [V17] encoder-decoder against Hugging Face Marian with the same weights."""

from __future__ import annotations

import pytest
import torch

from fullrank.models import EncoderDecoder, EncoderDecoderConfig
from fullrank.models.convert_hf import marian_config_kwargs, marian_state_dict

transformers = pytest.importorskip("transformers")


@pytest.mark.reference
def test_encoder_decoder_matches_marian():
    cfg = EncoderDecoderConfig(
        vocab_size=53,
        d_model=24,
        n_heads=4,
        d_ff=37,
        n_layers=2,
        n_decoder_layers=3,
        max_len=40,
        seq_len=16,
        dropout=0.0,
    )
    ours = EncoderDecoder(cfg).eval()
    with torch.no_grad():  # non-trivial norms and biases
        for name, p in ours.named_parameters():
            if "norm" in name or name.endswith("bias"):
                p.uniform_(-0.5, 0.5)
    marian = transformers.MarianMTModel(
        transformers.MarianConfig(**marian_config_kwargs(cfg, pad_id=0, bos_id=2, eos_id=3))
    ).eval()
    missing, unexpected = marian.load_state_dict(marian_state_dict(ours), strict=False)
    assert not unexpected and not missing
    src = torch.randint(4, 53, (3, 9))
    src_mask = torch.ones_like(src, dtype=torch.bool)
    src_mask[1, 6:] = False
    src[1, 6:] = 0
    tgt = torch.randint(4, 53, (3, 7))
    with torch.no_grad():
        expected = marian(input_ids=src, attention_mask=src_mask.long(), decoder_input_ids=tgt).logits
        got = ours(src, tgt, src_mask=src_mask)
    torch.testing.assert_close(got, expected, atol=1e-4, rtol=1e-4)
    assert cfg.num_params() == sum(p.numel() for p in marian.parameters() if p.requires_grad)
