"""The linear map of the attention and feed-forward layers: ``nn.Linear`` with a replaceable
product.

:class:`Linear` has ``nn.Linear``'s parameters, ``state_dict`` and initialisation; its forward
pass is ``self.product(x, self.weight, self.bias)``, where ``product`` is
:func:`torch.nn.functional.linear` unless something put another function there. That attribute
is the seam through which a speed engine computes the layers' products its own way without a
branch in the model's code: :func:`fullrank.fast.cpu` with ``decoding=True`` installs a product
that multiplies by weights packed once for oneDNN, and restores ``F.linear`` on exit. A product
must compute ``x Wᵀ + b`` (it may run any kernel, not change the result beyond rounding).

Shapes: ``x (…, in)``, ``weight (out, in)``, ``bias (out,)`` → ``(…, out)``.
"""

from __future__ import annotations

from collections.abc import Callable

import torch.nn.functional as F
from torch import Tensor, nn

# (x, weight, bias) → x Wᵀ + b
LinearProduct = Callable[[Tensor, Tensor, "Tensor | None"], Tensor]


class Linear(nn.Linear):
    """``nn.Linear`` whose product is the attribute ``product`` (``F.linear`` by default).

    The attention layer also multiplies by row slices of its fused weight through it
    (cross-attention's query rows), so an installed product sees those too.
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True) -> None:
        super().__init__(in_features, out_features, bias=bias)
        self.product: LinearProduct = F.linear

    def forward(self, x: Tensor) -> Tensor:
        """``(…, in) → (…, out)``."""
        return self.product(x, self.weight, self.bias)
