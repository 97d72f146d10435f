"""Evaluation metrics: BLEU and chrF through sacrebleu (never re-implemented), SQuAD EM/F1 as the
official script defines them, classification accuracy."""
