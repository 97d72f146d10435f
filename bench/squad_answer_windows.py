"""SQuAD fine-tuning on the windows that hold the answer only: ``fullrank train`` with the
training windows without the answer (BERT labels them ``[CLS]``; 11,729 of the 21,874 of
``configs/bert/squad.yaml``) left out; the test part is windowed and scored as always.

    python bench/squad_answer_windows.py train configs/bert/squad.yaml train.init_from=RUN …
"""

from __future__ import annotations

import sys
from typing import Any

import fullrank.recipes.squad as squad
from fullrank.cli import main
from fullrank.data.finetuning import SquadWindows

every_window = squad.make_windows
FIELDS = ("rows", "segments", "offsets", "max_context", "question", "starts", "ends")


def answer_windows(
    questions: Any, tok: Any, *, max_seq_len: int, doc_stride: int, training: bool
) -> SquadWindows:
    """``make_windows``, keeping only the training windows whose answer position is not 0."""
    w = every_window(questions, tok, max_seq_len=max_seq_len, doc_stride=doc_stride, training=training)
    if not training:
        return w
    keep = [i for i, s in enumerate(w.starts) if s != 0]
    out = SquadWindows(skipped=w.skipped)
    for name in FIELDS:
        setattr(out, name, [getattr(w, name)[i] for i in keep])
    return out


if __name__ == "__main__":
    squad.make_windows = answer_windows  # the one change this probe makes
    sys.exit(main(sys.argv[1:]))
