"""The top-k and arg-max of wide rows through block maxima: ``torch.topk``'s and ``argmax``'s
results, computed with one cheap pass over the row.

A search over a vocabulary asks, at every step, for the best few entries of rows of tens of
thousands (beam search: the ``2k`` best of ``k × V`` candidates per sentence). The ``k`` largest
entries of a row lie in the ``k`` blocks (of :data:`TOPK_BLOCK` entries) with the largest
maxima — any entry outside them is beaten by those ``k`` maxima — so one pass of ``amax`` over
the blocks (a reduction CPUs run several times faster than one that also tracks positions)
and a top-k over ``k`` blocks replace a top-k over the whole row. Pass them to the searches:
``beam_search(…, topk=topk_rows)``, ``greedy_search(…, argmax=argmax_rows)``.

Shapes: ``x (N, M)``: ``N`` rows of ``M`` entries.
"""

from __future__ import annotations

import torch
from torch import Tensor

# Entries per block; rows narrower than ``4·k·TOPK_BLOCK`` use ``torch.topk`` (``max`` for the
# arg-max), where a block pass would save nothing.
TOPK_BLOCK = 64


def argmax_rows(x: Tensor) -> Tensor:
    """The column of each row's largest entry of ``x (N, M)`` → ``(N,)``, the first among
    equals: ``x.argmax(dim=1)``, through the first block holding the row's maximum, then the
    first maximum inside it."""
    n, m = x.shape
    b = TOPK_BLOCK
    if m < 4 * b or x.stride(1) != 1:
        return x.max(dim=1).indices
    full = m - m % b
    block_max = x[:, :full].view(n, full // b, b).amax(dim=2)  # (N, M/b)
    if full < m:  # the ragged tail is one more block
        block_max = torch.cat([block_max, x[:, full:].amax(dim=1, keepdim=True)], dim=1)
    start = block_max.max(dim=1).indices * b  # (N,) its first column
    cols = (start[:, None] + torch.arange(b, device=x.device)).clamp_(max=m - 1)  # (N, b)
    return start + x.gather(1, cols).max(dim=1).indices


def topk_rows(x: Tensor, k: int) -> tuple[Tensor, Tensor]:
    """The ``k`` largest entries of each row of ``x (N, M)``, best first: ``x.topk(k, dim=1)``.

    The values equal ``torch.topk``'s; among equal values the indices may differ. Returns
    ``(values, indices)``, each ``(N, k)``.
    """
    n, m = x.shape
    b = TOPK_BLOCK
    if m < 4 * k * b or x.stride(1) != 1:
        return x.topk(k, dim=1)
    full = m - m % b
    blocks = x[:, :full].view(n, full // b, b)  # (N, M/b, b)
    pick = blocks.amax(dim=2).topk(k, dim=1).indices  # (N, k) best blocks
    chosen = blocks.gather(1, pick[:, :, None].expand(-1, -1, b)).view(n, k * b)  # (N, k·b)
    values, j = torch.cat([chosen, x[:, full:]], dim=1).topk(k, dim=1)  # (N, k)
    in_block = j < k * b
    index = torch.where(
        in_block, pick.gather(1, (j // b).clamp_(max=k - 1)) * b + j % b, full + j - k * b
    )  # (N, k) column in x
    return values, index
