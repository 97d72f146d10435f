"""Evaluation metrics: BLEU and chrF through sacrebleu (never re-implemented)."""
