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

from torch import Tensor, nn
from torch.optim import Optimizer


def main() -> int:
    argv = sys.argv[1:]
    if "--" not in argv:
        sys.exit("usage: squad_hold_qk.py --layers L [L …] -- FULLRANK-ARGS")
    cut = argv.index("--")
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--layers", type=int, nargs="+", required=True, help="encoder layers to hold")
    a = p.parse_args(argv[:cut])

    import fullrank.training.loop as loop
    from fullrank.cli import main as fullrank
    from fullrank.layers.attention import MultiHeadAttention
    from fullrank.training.config import TrainConfig

    make_optimizer = loop.make_optimizer

    def holding(model: nn.Module, cfg: TrainConfig, *, fused: bool = False) -> Optimizer:
        for name, module in model.named_modules():
            if isinstance(module, MultiHeadAttention) and int(name.split(".")[1]) in a.layers:
                rows = 2 * module.n_heads * module.d_head  # the query rows, then the key rows

                def hold(grad: Tensor, rows: int = rows) -> Tensor:
                    grad = grad.clone()
                    grad[:rows] = 0
                    return grad

                for param in module.qkv_proj.parameters():
                    param.register_hook(hold)
                print(f"holding the queries and keys of {name} ({rows} rows)", flush=True)
        return make_optimizer(model, cfg, fused=fused)

    loop.make_optimizer = holding  # the training loop builds its optimizer through this name
    return fullrank(argv[cut + 1 :])


if __name__ == "__main__":
    sys.exit(main())
