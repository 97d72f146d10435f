"""Position-wise feed-forward network ([V17] eq. 2): ``FFN(x) = act(x W1 + b1) W2 + b2``.

Shapes: ``(B, T, D) → (B, T, F) → (B, T, D)`` with ``F`` = d_ff.
"""

from __future__ import annotations

from typing import Literal

import torch.nn.functional as F
from torch import Tensor, nn

from fullrank.layers.linear import Linear

Activation = Literal["relu", "gelu", "gelu_tanh", "silu"]


def activate(h: Tensor, activation: Activation) -> Tensor:
    """``h`` through ``activation``: ReLU ([V17]); GELU in its exact erf form (BERT) or its tanh
    approximation (GPT-2's ``gelu_new``); SiLU (Marian's ``swish``)."""
    if activation == "relu":
        return F.relu(h)
    if activation == "gelu":
        return F.gelu(h)
    if activation == "gelu_tanh":
        return F.gelu(h, approximate="tanh")
    return F.silu(h)


class FeedForward(nn.Module):
    """Two linear maps around ReLU ([V17]), GELU (BERT; GPT-2's tanh form) or SiLU (Marian).

    Args:
        d_model: input and output width ``D``.
        d_ff: inner width ``F``.
        activation: ``"relu"``, ``"gelu"``, ``"gelu_tanh"`` or ``"silu"`` (:func:`activate`).
        dropout: dropout after the activation (0 in [V17], which drops only sublayer outputs).
        bias: whether both linear maps have biases.
    """

    def __init__(
        self,
        d_model: int,
        d_ff: int,
        *,
        activation: Activation = "relu",
        dropout: float = 0.0,
        bias: bool = True,
    ) -> None:
        super().__init__()
        self.fc1 = Linear(d_model, d_ff, bias=bias)
        self.fc2 = Linear(d_ff, d_model, bias=bias)
        self.activation = activation
        self.dropout = nn.Dropout(dropout)
        for lin in (self.fc1, self.fc2):
            nn.init.xavier_uniform_(lin.weight)
            if lin.bias is not None:
                nn.init.zeros_(lin.bias)

    def forward(self, x: Tensor) -> Tensor:
        """``(B, T, D) → (B, T, D)``."""
        h = self.fc1(x)  # (B, T, F)
        h = activate(h, self.activation)
        return self.fc2(self.dropout(h) if self.dropout.training else h)  # eval: no call
