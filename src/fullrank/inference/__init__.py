"""Decoding: greedy and beam search for translation, sampling for language models, and BERT's
cloze task (:func:`~fullrank.inference.fill_mask.fill_masks`).

The search functions take a :class:`Decoder` (a step function with reorderable state), never a
model class; adapters wrap the models' ``decode_step`` and key/value cache::

    from fullrank.inference import Seq2SeqDecoder, beam_search, max_output_len

    model.eval()
    hyps = beam_search(Seq2SeqDecoder(model, src, src_mask), batch_size=len(src),
                       beam_size=4, alpha=0.6, bos_id=bos, eos_id=eos,
                       max_len=max_output_len(src_mask.sum(1)))
    best = [h[0].tokens for h in hyps]

    text = sample(LMDecoder(lm), prompt, max_new_tokens=200, temperature=0.8, top_k=40)

The same searches run faster through :mod:`fullrank.fast` (its decoder, top-k and weight layout;
``fast.cpu(model, decoding=True)``), which :func:`~fullrank.inference.translate.translate` uses.
"""

from fullrank.inference.decoders import (
    Decoder,
    EnsembleDecoder,
    LMDecoder,
    Seq2SeqDecoder,
    UncachedLMDecoder,
    UncachedSeq2SeqDecoder,
    compiled_decode,
)
from fullrank.inference.fill_mask import Candidate, Filled, fill_masks
from fullrank.inference.sampling import next_token, sample
from fullrank.inference.search import Hypothesis, beam_search, greedy_search, length_penalty, max_output_len

__all__ = [
    "Candidate",
    "Decoder",
    "EnsembleDecoder",
    "Filled",
    "Hypothesis",
    "LMDecoder",
    "Seq2SeqDecoder",
    "UncachedLMDecoder",
    "UncachedSeq2SeqDecoder",
    "beam_search",
    "compiled_decode",
    "fill_masks",
    "greedy_search",
    "length_penalty",
    "max_output_len",
    "next_token",
    "sample",
]
