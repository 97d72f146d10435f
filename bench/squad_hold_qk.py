"""Fine-tune with the queries and keys of chosen encoder layers held at their start: a probe of
whether SQuAD fine-tuning loses what the pre-trained attention matches. A gradient hook zeroes
the query and key rows of each chosen layer's fused ``qkv_proj`` (AdamW's decoupled weight decay
still shrinks them by ``lr · weight_decay`` a step; ``train.freeze`` holds whole tensors, such as
the token embeddings); everything after ``--`` is ``fullrank``'s command line.

    python bench/squad_hold_qk.py --layers 2 3 -- train configs/bert/squad.yaml name=squad_hold23
    python bench/squad_hold_qk.py --layers 0 1 2 3 -- train configs/bert/squad.yaml name=squad_hold_emb \
        'train.freeze=[embed.token.weight]'
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from torch import Tensor, nn

sys.path.insert(0, str(Path(__file__).resolve().parent))

from probe import run_fullrank_with


def hold_queries_and_keys(model: nn.Module, options: argparse.Namespace) -> None:
    """Zero the gradient of the query and key rows of ``qkv_proj`` in each layer of
    ``options.layers``."""
    from fullrank.layers.attention import MultiHeadAttention

    for name, module in model.named_modules():
        if isinstance(module, MultiHeadAttention) and int(name.split(".")[1]) in options.layers:
            rows = 2 * module.n_heads * module.d_head  # the query rows, then the key rows

            def hold(grad: Tensor, rows: int = rows) -> Tensor:
                grad = grad.clone()
                grad[:rows] = 0
                return grad

            for param in module.qkv_proj.parameters():
                param.register_hook(hold)
            print(f"holding the queries and keys of {name} ({rows} rows)", flush=True)


def main() -> int:
    p = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], usage="%(prog)s --layers L [L …] -- FULLRANK-ARGS"
    )
    p.add_argument("--layers", type=int, nargs="+", required=True, help="encoder layers to hold")
    return run_fullrank_with(sys.argv[1:], p, hold_queries_and_keys)


if __name__ == "__main__":
    sys.exit(main())
