"""SQuAD fine-tuning on a share of the training articles: ``fullrank train`` with every ``K``-th
training article kept (in file order, so the kept articles spread over the file); the test part
is the same as always. With the steps scaled by the share, every run sees its questions the same
number of times, and the gap between a pre-trained start and random weights can be read against
the number of training questions.

    python bench/squad_fewer_questions.py K train configs/bert/squad.yaml train.init_from=RUN …
"""

from __future__ import annotations

import sys

import fullrank.recipes.squad as squad
from fullrank.cli import main
from fullrank.data.finetuning import SquadQuestion
from fullrank.recipes.encoder_data import SquadData

every_part = squad.squad_parts
KEEP_EVERY = 1  # K, from the command line


def fewer_articles(data: SquadData) -> tuple[list[SquadQuestion], list[SquadQuestion]]:
    """``squad_parts`` keeping every ``KEEP_EVERY``-th training article (the first, the
    ``K+1``-th, …)."""
    train, test = every_part(data)
    kept = set(sorted({q.article for q in train})[::KEEP_EVERY])
    train = [q for q in train if q.article in kept]
    print(f"training on {len(kept)} articles, {len(train)} questions (every {KEEP_EVERY}-th article)")
    return train, test


if __name__ == "__main__":
    if len(sys.argv) < 2 or not sys.argv[1].isdigit() or int(sys.argv[1]) < 1:
        sys.exit("usage: python bench/squad_fewer_questions.py K train CONFIG [KEY=VALUE …] (K ≥ 1)")
    KEEP_EVERY = int(sys.argv[1])
    squad.squad_parts = fewer_articles  # the one change this probe makes
    sys.exit(main(sys.argv[2:]))
