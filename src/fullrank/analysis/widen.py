"""Function-preserving head widening: turn a model into one with larger heads, same outputs.

**Convention: row-major** fullrank weights (``nn.Linear`` stores ``(out, in)``). Every
:class:`~fullrank.layers.attention.MultiHeadAttention` keeps ``qkv_proj.weight`` as rows
``[q; k; v]`` of shapes ``(H·Dh, D)``, ``(H·Dh, D)``, ``(H·Dv, D)``, each grouped head by head
(rows ``h·Dh … (h+1)·Dh − 1`` are head ``h``), and ``out_proj.weight`` ``(D, H·Dv)`` with columns
grouped the same way.

Widening ``Dh → Dh'`` and ``Dv → Dv'`` (both ``≥``):

- each head's existing query and key rows (and biases) are multiplied by ``(Dh'/Dh)^{1/4}``, so
  ``q·k`` grows by ``√(Dh'/Dh)`` and the new scale ``1/√Dh'`` gives back the old ``q·k/√Dh``;
- each head gets ``Dh' − Dh`` new query rows and key rows, and ``Dv' − Dv`` new value rows and
  output-projection columns. In each product one side is zero — the new **key** rows and the new
  **output columns** — so the new coordinates add exactly nothing: the attention probabilities and
  the outputs are unchanged. The other side — new query rows and new value rows — is random
  (normal, with the standard deviation of the head's existing rows; ``zero_init=True`` makes it
  zero as well). With both sides zero the new coordinates would sit at a saddle: each side's
  gradient is proportional to the other, so training would never move them;
- new biases are zero; everything else is copied.

The widened model computes the same function (to float rounding) and can be trained from there
with wider heads.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
from torch import Tensor, nn

from fullrank.errors import ConfigError
from fullrank.layers.attention import MultiHeadAttention


def _pad_heads(
    w: Tensor,
    n_heads: int,
    old: int,
    new: int,
    *,
    scale: float = 1.0,
    fill_std: float = 0.0,
    generator: torch.Generator | None = None,
) -> Tensor:
    """Rows grouped per head ``(H·old, …) → (H·new, …)``: existing rows times ``scale``, the new
    rows of each head normal with std ``fill_std`` (zero when 0)."""
    rest = w.shape[1:]
    out = w.new_zeros(n_heads, new, *rest)
    if fill_std > 0 and new > old:
        noise = torch.randn(n_heads, new - old, *rest, generator=generator, dtype=torch.float64)
        out[:, old:] = (noise * fill_std).to(w.dtype)
    out[:, :old] = w.reshape(n_heads, old, *rest) * scale
    return out.reshape(n_heads * new, *rest)


def widen_attention_state(
    old: MultiHeadAttention,
    d_head: int,
    d_value: int,
    *,
    zero_init: bool = False,
    generator: torch.Generator | None = None,
) -> dict[str, Tensor]:
    """The state dict of ``old`` mapped to heads of ``d_head`` / ``d_value`` (see the module
    docstring); keys as in ``MultiHeadAttention.state_dict()``."""
    h, dh, dv = old.n_heads, old.d_head, old.d_value
    s = (d_head / dh) ** 0.25
    hd, hv = h * dh, h * dv
    w = old.qkv_proj.weight.detach().cpu()
    w_q, w_k, w_v = w[:hd], w[hd : 2 * hd], w[2 * hd : 2 * hd + hv]
    q_std = 0.0 if zero_init else w_q.double().std().item()
    v_std = 0.0 if zero_init else w_v.double().std().item()
    state: dict[str, Tensor] = {}
    state["qkv_proj.weight"] = torch.cat(
        [
            _pad_heads(w_q, h, dh, d_head, scale=s, fill_std=q_std, generator=generator),
            _pad_heads(w_k, h, dh, d_head, scale=s),  # new key rows zero: q·k unchanged
            _pad_heads(w_v, h, dv, d_value, fill_std=v_std, generator=generator),
        ]
    )
    if old.qkv_proj.bias is not None:
        b = old.qkv_proj.bias.detach().cpu()
        state["qkv_proj.bias"] = torch.cat(
            [
                _pad_heads(b[:hd], h, dh, d_head, scale=s),
                _pad_heads(b[hd : 2 * hd], h, dh, d_head, scale=s),
                _pad_heads(b[2 * hd : 2 * hd + hv], h, dv, d_value),
            ]
        )
    # out_proj.weight (D, H·Dv): its new columns are zero, so the new value coordinates add nothing.
    state["out_proj.weight"] = _pad_heads(old.out_proj.weight.detach().cpu().T, h, dv, d_value).T
    if old.out_proj.bias is not None:
        state["out_proj.bias"] = old.out_proj.bias.detach().cpu().clone()
    return state


def widen(
    model: nn.Module, d_head: int, d_value: int | None = None, *, zero_init: bool = False, seed: int = 0
) -> nn.Module:
    """A new model of the same family with heads of ``d_head`` (and ``d_value``), same outputs.

    The new config is ``dataclasses.replace(model.config, d_head=d_head, d_value=...)``.
    ``d_value=None`` keeps the values tied to ``d_head`` when the original config left
    ``d_value`` unset (so they widen too), and keeps the original explicit ``d_value``
    otherwise. ``zero_init`` zeroes the new query and value rows too (see the module docstring:
    they then never train); ``seed`` seeds their random values. The new model has the old one's
    dtype, device and train/eval mode.

    Raises:
        ConfigError: ``d_head`` or ``d_value`` smaller than the current sizes (widening only),
            or a model without a fullrank ``config``.
    """
    config: Any = getattr(model, "config", None)
    if not dataclasses.is_dataclass(getattr(model, "config", None)):
        raise ConfigError(f"widen needs a fullrank model with a config, got {type(model).__name__}")
    old_dh, old_dv = config.head_sizes
    if d_value is None:
        new_dv_field, new_dv = (None, d_head) if config.d_value is None else (old_dv, old_dv)
    else:
        new_dv_field, new_dv = d_value, d_value
    if d_head < old_dh or new_dv < old_dv:
        raise ConfigError(
            f"widen only grows heads: d_head {old_dh} → {d_head}, d_value {old_dv} → "
            f"{new_dv}; both must not shrink"
        )
    new_config = dataclasses.replace(config, d_head=d_head, d_value=new_dv_field)
    ref = next(model.parameters())
    new_model = type(model)(new_config).to(dtype=ref.dtype, device=ref.device)
    gen = torch.Generator().manual_seed(seed)
    state = {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}
    for name, module in model.named_modules():
        if isinstance(module, MultiHeadAttention):
            for key, value in widen_attention_state(
                module, d_head, new_dv, zero_init=zero_init, generator=gen
            ).items():
                state[f"{name}.{key}"] = value
    new_model.load_state_dict(state)
    new_model.train(model.training)
    return new_model
