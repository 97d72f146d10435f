"""Greedy and batched beam search, as pure functions over a :class:`Decoder`.

[V17] §6.1 decodes with beam size 4 and length penalty α = 0.6 (the GNMT penalty of Wu et al.,
2016), and a maximum output length of input length + 50, terminating early when possible.

Scores (SPEC §1.4): a hypothesis ``Y`` has log-probability ``log P(Y|X)`` and score
``log P(Y|X) / lp(Y)`` with ``lp(Y) = ((5 + |Y|) / 6)^α``. **``|Y|`` counts the generated tokens
including the closing EOS** (a hypothesis cut at the maximum length has no EOS and ``|Y|`` equal
to that length). Hugging Face's ``length_penalty`` divides by ``|Y|^α`` instead.

The beam search follows the Flax WMT ``decode.py`` design: each step keeps the ``2k`` best
continuations of the ``k`` open beams, so that even when ``k`` of them end in EOS together there
are ``k`` non-EOS ones left to continue; EOS continuations that rank among the ``k`` best move to
a finished set (the ``n_best`` best by score), the ``k`` best others become the next open beams.
(Like fairseq and Hugging Face, an EOS ranked below the ``k`` best continuations is dropped, not
finished: with ``k = 1`` and α = 0 the search is exactly greedy decoding.) A sentence stops when no open beam
can beat its ``n_best``-th finished hypothesis any more, or at its maximum length (open beams
are then finished as they are). Finished sentences leave the batch (their decoder rows are
pruned), so they cost nothing afterwards.

Shapes: ``B`` sentences, ``N`` sentences still decoding, ``K`` beam size, ``Kc`` decoder rows per
sentence now (1 before the first step, ``K`` after), ``V`` vocabulary, ``t`` tokens generated so
far, ``L`` the largest maximum length, ``n`` ``n_best``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import overload

import torch
import torch.nn.functional as F
from torch import Tensor

from fullrank.errors import ConfigError
from fullrank.inference.decoders import Decoder

NEG_INF = float("-inf")

# ``(x (N, M), k) → (values, indices)``, each ``(N, k)``: each row's k largest entries, best first
TopK = Callable[[Tensor, int], tuple[Tensor, Tensor]]
# ``x (N, M) → (N,)``: the column of each row's largest entry, the first among equals
ArgMax = Callable[[Tensor], Tensor]


def row_topk(x: Tensor, k: int) -> tuple[Tensor, Tensor]:
    """``x.topk(k, dim=1)``: the default :data:`TopK`."""
    return x.topk(k, dim=1)


def row_argmax(x: Tensor) -> Tensor:
    """``x.argmax(dim=1)``: the default :data:`ArgMax`."""
    return x.argmax(dim=1)


@dataclass(frozen=True)
class Hypothesis:
    """One finished output.

    Attributes:
        tokens: generated token ids, without BOS and without the closing EOS.
        score: ``log_prob / lp(|Y|)``; the beam ranks by it.
        log_prob: ``log P(Y|X)``, EOS included when the hypothesis ended with one.
    """

    tokens: list[int]
    score: float
    log_prob: float


@overload
def length_penalty(length: Tensor, alpha: float) -> Tensor: ...
@overload
def length_penalty(length: float, alpha: float) -> float: ...
def length_penalty(length: Tensor | float, alpha: float) -> Tensor | float:
    """GNMT length penalty ``((5 + |Y|) / 6)^α`` (Wu et al. 2016, eq. 14; [V17] §6.1)."""
    return ((5.0 + length) / 6.0) ** alpha


def max_output_len(src_lengths: Tensor | Sequence[int], a: float = 1.0, b: int = 50) -> Tensor:
    """Maximum output length ``⌊a·|src| + b⌋`` per sentence, ``(B,)`` int64.

    The defaults are [V17] §6.1's "input length + 50". ``src_lengths`` counts real source tokens
    (e.g. ``src_mask.sum(1)``).
    """
    lengths = torch.as_tensor(src_lengths)
    return torch.floor(a * lengths.double() + b).long()


def _lengths(max_len: Tensor | Sequence[int] | int, batch_size: int, device: torch.device) -> Tensor:
    """``max_len`` as a ``(B,)`` int64 tensor on ``device``, validated."""
    if isinstance(max_len, int):
        out = torch.full((batch_size,), max_len, dtype=torch.long, device=device)
    else:
        out = torch.as_tensor(max_len, device=device).long().reshape(-1)
        if out.numel() != batch_size:
            raise ConfigError(f"max_len has {out.numel()} entries for a batch of {batch_size}")
    if batch_size and int(out.min()) < 1:
        raise ConfigError(f"max_len must be at least 1 token, got {int(out.min())}")
    return out


def _check_vocab(logits: Tensor, bos_id: int, eos_id: int) -> None:
    """``bos_id`` and ``eos_id`` must index the decoder's ``(N, V)`` logits."""
    vocab = logits.shape[-1]
    if max(bos_id, eos_id) >= vocab:
        raise ConfigError(
            f"bos_id={bos_id} and eos_id={eos_id} must be below the model's "
            f"vocabulary size {vocab}; pass the tokenizer's ids"
        )


def _check(batch_size: int, bos_id: int, eos_id: int, min_len: int) -> None:
    if batch_size < 0:
        raise ConfigError(f"batch_size must be non-negative, got {batch_size}")
    if bos_id < 0 or eos_id < 0:
        raise ConfigError(f"bos_id and eos_id must be token ids, got {bos_id} and {eos_id}")
    if min_len < 0:
        raise ConfigError(f"min_len must be non-negative, got {min_len}")


@torch.inference_mode()
def greedy_search(
    decoder: Decoder,
    *,
    batch_size: int,
    bos_id: int,
    eos_id: int,
    max_len: Tensor | Sequence[int] | int,
    min_len: int = 0,
    argmax: ArgMax = row_argmax,
) -> list[list[int]]:
    """Pick the most likely next token until EOS or the maximum length.

    Args:
        decoder: fresh decoder state with ``batch_size`` rows.
        batch_size: number of sentences ``B``.
        bos_id: the token every output starts from (fed first, not returned).
        eos_id: end of sentence; not returned.
        max_len: most tokens generated per sentence, EOS included: an int or ``(B,)``.
        min_len: EOS is impossible while fewer than ``min_len`` tokens exist (``min_len ≥
            max_len`` suppresses it, so every output has exactly ``max_len`` tokens).
        argmax: how the largest logit of each row is found (``argmax(dim=1)``;
            :func:`fullrank.fast.argmax_rows` gives the same, faster on CPUs).

    Returns:
        ``B`` lists of token ids, in the order of the batch.
    """
    _check(batch_size, bos_id, eos_id, min_len)
    dev = decoder.device
    limit = _lengths(max_len, batch_size, dev)  # (B,)
    out: list[list[int]] = [[] for _ in range(batch_size)]
    if batch_size == 0:
        return out
    sent = torch.arange(batch_size, device=dev)  # (N,) original sentence ids
    seqs = torch.empty(batch_size, 0, dtype=torch.long, device=dev)  # (N, t)
    tokens = torch.full((batch_size, 1), bos_id, dtype=torch.long, device=dev)  # (N, 1)
    for t in range(int(limit.max())):
        logits = decoder.step(tokens)[:, -1]  # (N, V)
        if t == 0:
            _check_vocab(logits, bos_id, eos_id)
        if t < min_len:
            logits[:, eos_id] = NEG_INF
        nxt = argmax(logits)  # (N,)
        seqs = torch.cat([seqs, nxt[:, None]], dim=1)  # (N, t + 1)
        done = (nxt == eos_id) | (limit <= t + 1)  # (N,)
        if bool(done.any()):
            ended = seqs[done]  # (N_done, t + 1)
            for i, row in zip(sent[done].tolist(), ended.tolist()):
                out[i] = row[:-1] if row[-1] == eos_id else row
            keep = (~done).nonzero().squeeze(1)  # (N',)
            if keep.numel() == 0:
                break
            decoder.reorder(keep, sources=keep)
            sent, seqs, nxt, limit = sent[keep], seqs[keep], nxt[keep], limit[keep]
        tokens = nxt[:, None]  # (N, 1)
    return out


@torch.inference_mode()
def beam_search(
    decoder: Decoder,
    *,
    batch_size: int,
    beam_size: int,
    bos_id: int,
    eos_id: int,
    max_len: Tensor | Sequence[int] | int,
    alpha: float = 0.6,
    n_best: int = 1,
    min_len: int = 0,
    topk: TopK = row_topk,
) -> list[list[Hypothesis]]:
    """Batched beam search with the GNMT length penalty; see the module docstring.

    Args:
        decoder: fresh decoder state with one row per sentence; beam search widens it to
            ``beam_size`` rows per sentence with ``decoder.reorder`` after the first step.
        batch_size: number of sentences ``B``.
        beam_size: open hypotheses kept per sentence ``K``.
        bos_id: the token every output starts from (fed first, not returned).
        eos_id: end of sentence; not returned.
        max_len: most tokens generated per sentence, EOS included: an int or ``(B,)`` (see
            :func:`max_output_len`).
        alpha: length-penalty exponent α; 0 ranks by log-probability alone.
        n_best: hypotheses returned per sentence (``≤ beam_size``).
        min_len: EOS is impossible while fewer than ``min_len`` tokens exist.
        topk: how the ``2K`` best of each sentence's ``Kc·V`` candidates are found
            (``topk(k, dim=1)``; :func:`fullrank.fast.topk_rows` gives the same values, faster
            on CPUs).

    Returns:
        For each sentence, up to ``n_best`` distinct :class:`Hypothesis`, best score first.
    """
    _check(batch_size, bos_id, eos_id, min_len)
    if beam_size < 1 or not 1 <= n_best <= beam_size:
        raise ConfigError(
            f"need beam_size ≥ 1 and 1 ≤ n_best ≤ beam_size, got beam_size={beam_size}, n_best={n_best}"
        )
    dev, k = decoder.device, beam_size
    limit = _lengths(max_len, batch_size, dev)  # (N,)
    out: list[list[Hypothesis]] = [[] for _ in range(batch_size)]
    if batch_size == 0:
        return out
    n, total = batch_size, int(limit.max())
    kc = 1  # decoder rows per sentence
    sent = torch.arange(n, device=dev)  # (N,) original sentence ids
    tokens = torch.full((n, 1), bos_id, dtype=torch.long, device=dev)  # (N·Kc, 1)
    alive_seq = torch.empty(n, 1, 0, dtype=torch.long, device=dev)  # (N, Kc, t)
    alive_lp = torch.zeros(n, 1, device=dev)  # (N, Kc) log P(prefix)
    fin_seq = torch.full((n, n_best, total), eos_id, dtype=torch.long, device=dev)  # (N, n, L)
    fin_score = torch.full((n, n_best), NEG_INF, device=dev)  # (N, n), sorted, −∞ = empty
    fin_lp = torch.full((n, n_best), NEG_INF, device=dev)  # (N, n)
    fin_len = torch.zeros(n, n_best, dtype=torch.long, device=dev)  # (N, n) tokens without EOS

    logp_buf = None  # log-probabilities of logits that cannot hold them (no fresh pages each step)
    among_k = torch.arange(2 * k, device=dev) < k  # (2K,) the K best candidates
    limit_lp = torch.empty(0)  # (N,) lp(maximum length)
    for t in range(total):
        logits = decoder.step(tokens)[:, -1]  # (N·Kc, V)
        vocab = logits.shape[-1]
        if t == 0:
            _check_vocab(logits, bos_id, eos_id)
        if logits.dtype == _score_dtype(logits) and logits.is_contiguous():
            logp = torch.log_softmax(logits, dim=-1, out=logits)  # (N·Kc, V), over the logits
        else:
            if logp_buf is None or logp_buf.numel() < logits.numel():
                logp_buf = logits.new_empty(logits.numel(), dtype=_score_dtype(logits))
            logp = torch.log_softmax(
                logits, dim=-1, dtype=logp_buf.dtype, out=logp_buf[: logits.numel()].view(logits.shape)
            )
        if t == 0:  # scores in the log-probabilities' precision (float32 at least)
            alive_lp, fin_score, fin_lp = (x.to(logp.dtype) for x in (alive_lp, fin_score, fin_lp))
            limit_lp = length_penalty(limit.to(logp.dtype), alpha)
        if t < min_len:
            logp[:, eos_id] = NEG_INF
        # --- the 2K best continuations of all open beams of each sentence
        cand = logp.view(n, kc, vocab).add_(alive_lp[:, :, None]).view(n, kc * vocab)  # (N, Kc·V)
        if kc * vocab < 2 * k:  # tiny vocabularies: pad with impossible candidates
            cand = F.pad(cand, (0, 2 * k - kc * vocab), value=NEG_INF)
        top_lp, top_idx = topk(cand, 2 * k)  # (N, 2K), best first
        top_beam = (top_idx // vocab).clamp_(max=kc - 1)  # (N, 2K) beam it extends
        top_tok = top_idx % vocab  # (N, 2K) token it appends
        last = limit <= t + 1  # (N,) at maximum length
        ending = (top_tok == eos_id) | last[:, None]  # (N, 2K) leave the beam
        # --- candidates that end (EOS, or maximum length) among the K best join the finished set
        finish = ending & among_k  # (N, 2K)
        if bool(finish.any()):
            new_score = (top_lp / length_penalty(t + 1.0, alpha)).masked_fill(~finish, NEG_INF)
            top_seq = _extend(alive_seq, top_beam, top_tok)  # (N, 2K, t + 1)
            top_seq = F.pad(top_seq, (0, total - t - 1), value=eos_id)  # (N, 2K, L)
            top_len = (t + 1) - (top_tok == eos_id).long()  # (N, 2K)
            fin_score, pick = torch.cat([fin_score, new_score], 1).topk(n_best, dim=1)  # (N, n)
            fin_lp = torch.cat([fin_lp, top_lp], 1).gather(1, pick)  # (N, n)
            fin_len = torch.cat([fin_len, top_len], 1).gather(1, pick)  # (N, n)
            fin_seq = torch.cat([fin_seq, top_seq], 1).gather(  # (N, n, L)
                1, pick[:, :, None].expand(-1, -1, total)
            )
        # --- the K best candidates that do not end are the next open beams
        open_lp, pos = top_lp.masked_fill(ending, NEG_INF).topk(k, dim=1)  # (N, K), best first
        beam = top_beam.gather(1, pos)  # (N, K)
        tok = top_tok.gather(1, pos)  # (N, K)
        alive_seq = _extend(alive_seq, beam, tok)  # (N, K, t + 1)
        alive_lp = open_lp  # (N, K)
        rows = torch.arange(n, device=dev)[:, None] * kc + beam  # (N, K) decoder row extended
        # --- a sentence is done when no open beam can beat its n-th finished hypothesis: the
        # best an open beam can still reach is its log-prob now (log-probs only fall) over the
        # largest penalty it can still get (at the maximum length for α ≥ 0, the next for α < 0).
        best_lp = limit_lp.clamp(min=length_penalty(t + 2.0, alpha))  # (N,)
        done = last | (alive_lp[:, 0] / best_lp <= fin_score[:, -1])  # (N,)
        if bool(done.any()):
            _emit(out, sent[done], fin_seq[done], fin_score[done], fin_lp[done], fin_len[done])
            keep = (~done).nonzero().squeeze(1)  # (N',)
            n = keep.numel()
            if n == 0:
                break
            decoder.reorder(rows[keep].reshape(-1), sources=keep)
            sent, limit, limit_lp, alive_seq, alive_lp, tok = (
                sent[keep],
                limit[keep],
                limit_lp[keep],
                alive_seq[keep],
                alive_lp[keep],
                tok[keep],
            )
            fin_seq, fin_score, fin_lp, fin_len = (
                fin_seq[keep],
                fin_score[keep],
                fin_lp[keep],
                fin_len[keep],
            )
        else:
            decoder.reorder(rows.reshape(-1))  # the same sentences: sources stay
        kc = k
        tokens = tok.reshape(-1, 1)  # (N·K, 1)
    return out


def _score_dtype(logits: Tensor) -> torch.dtype:
    """Accumulate log-probabilities in float32 at least (float64 models keep float64)."""
    return torch.promote_types(logits.dtype, torch.float32)


def _extend(seq: Tensor, beam: Tensor, tok: Tensor) -> Tensor:
    """``seq (N, Kc, t)`` of open beams → ``(N, M, t + 1)``: row ``beam (N, M)`` plus ``tok (N, M)``."""
    prev = seq.gather(1, beam[:, :, None].expand(-1, -1, seq.shape[2]))  # (N, M, t)
    return torch.cat([prev, tok[:, :, None]], dim=2)


def _emit(
    out: list[list[Hypothesis]], sent: Tensor, seq: Tensor, score: Tensor, lp: Tensor, length: Tensor
) -> None:
    """Write the finished sets of the sentences ``sent (M,)`` to ``out``; ``seq (M, n, L)``,
    ``score``/``lp``/``length (M, n)``; empty (−∞) slots are skipped."""
    for i, rows, scores, lps, lens in zip(
        sent.tolist(), seq.tolist(), score.tolist(), lp.tolist(), length.tolist()
    ):
        out[i] = [
            Hypothesis(tokens=r[:m], score=s, log_prob=p)
            for r, s, p, m in zip(rows, scores, lps, lens)
            if s > -math.inf
        ]
