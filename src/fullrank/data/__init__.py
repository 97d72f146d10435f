"""Data: tokenizers, token caches, language-model blocks, token-bucketed batches, parallel corpora.

This package imports no model code (``tests/test_layering.py``): it turns files into typed
batches (:class:`LMBatch`, :class:`Seq2SeqBatch`) and nothing else.
"""

from fullrank.data.batch import LMBatch, Seq2SeqBatch, collate_pairs, pad_sequences
from fullrank.data.batching import bucket_batches, padding_ratio
from fullrank.data.corpus import tokenize_file
from fullrank.data.lm import LMBlocks
from fullrank.data.text import read_lines, read_text
from fullrank.data.tokenizers import Tokenizer, TokenizerKind, ensure_vocab_matches
from fullrank.data.translation import EncodedPairs, ParallelBatches, encode_pairs, read_parallel

__all__ = [
    "EncodedPairs",
    "LMBatch",
    "LMBlocks",
    "ParallelBatches",
    "Seq2SeqBatch",
    "Tokenizer",
    "TokenizerKind",
    "bucket_batches",
    "collate_pairs",
    "encode_pairs",
    "ensure_vocab_matches",
    "pad_sequences",
    "padding_ratio",
    "read_lines",
    "read_parallel",
    "read_text",
    "tokenize_file",
]
