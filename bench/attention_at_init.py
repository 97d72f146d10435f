"""How sharp a BERT encoder's first attention is at initialisation: with mimetic query/key
initialisation a token starts attending to the tokens like its own, and how much of its
attention stays on itself depends on the width unless ``attn_init_logit`` fixes the logit.

    python bench/attention_at_init.py

For each model (4 layers, the recipe's sinusoidal positions and scaled embeddings, pre-LN,
vocabulary 6,000, 8 sequences of 128 random tokens): the mean logit of a token with itself,
the mean entropy of the first layer's attention rows (nats; uniform over 128 tokens: 4.85) and
the mean probability a token gives itself. Prints a Markdown table.
"""

from __future__ import annotations

import math

import torch

from fullrank.blocks import EncoderBlock
from fullrank.models.encoder import Encoder, EncoderConfig

# (d_model, n_heads, d_head, d_ff, attn_init_logit): the Wikipedia recipe, its width doubled,
# and the three models of configs/sweeps/b20_bert_gpu.yaml without and with the logit set
MODELS = [
    (128, 4, None, 512, None),
    (256, 4, None, 1024, None),
    (512, 8, None, 2048, None),
    (512, 8, 128, 1024, None),
    (384, 6, 128, 2848, None),
    (512, 8, None, 2048, 11.0),
    (512, 8, 128, 1024, 11.0),
    (384, 6, 128, 2848, 11.0),
]


def first_attention(config: EncoderConfig, seed: int = 0) -> tuple[float, float, float, float]:
    """(query scale ``s``, self-logit, row entropy in nats, probability on itself) of the first
    layer at init; ``s`` read off the weights, ``std(W_q)·√Dh``."""
    torch.manual_seed(seed)
    model = Encoder(config).eval()
    tokens = torch.randint(5, config.vocab_size, (8, config.seq_len))
    with torch.no_grad():
        x = model.embed(tokens, segments=torch.zeros_like(tokens))
        layer = model.layers[0]
        assert isinstance(layer, EncoderBlock)
        w_q = layer.self_attn.qkv_proj.weight[: config.n_heads * layer.self_attn.d_head]
        scale = w_q.std().item() * math.sqrt(layer.self_attn.d_head)
        q, k, _ = layer.self_attn.project_qkv(layer.attn_norm(x))
        logits = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])  # (B, H, T, T)
        p = logits.softmax(-1)
    entropy = -(p * p.clamp_min(1e-30).log()).sum(-1).mean()
    on_self = p.diagonal(dim1=-2, dim2=-1).mean()
    return scale, logits.diagonal(dim1=-2, dim2=-1).mean().item(), entropy.item(), on_self.item()


def main() -> None:
    print("| d_model | heads × d_head | attn_init_logit | self-logit | entropy (nats) | p(self) |")
    print("|---|---|---|---|---|---|")
    for d, h, dh, ff, logit in MODELS:
        config = EncoderConfig(
            vocab_size=6000, d_model=d, n_heads=h, d_head=dh, d_ff=ff, n_layers=4, seq_len=128,
            max_len=128, norm_first=True, positions="sinusoidal", scale_embeddings=True,
            attn_init="mimetic", attn_init_logit=logit, next_sentence=False,
        )  # fmt: skip
        scale, s, ent, on_self = first_attention(config)
        print(f"| {d} | {h} × {dh or d // h} | {logit or '–'} (s = {scale:.2f}) | "
              f"{s:.1f} | {ent:.2f} | {on_self:.2f} |")  # fmt: skip


if __name__ == "__main__":
    main()
