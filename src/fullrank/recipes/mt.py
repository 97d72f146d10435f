"""The translation recipe ([V17] §5–6): shared BPE → token-bucketed batches → ``EncoderDecoder``
with label smoothing and the Noam schedule → beam search on the last checkpoint and on the
average of the last K → sacreBLEU, chrF and tokenized lowercased BLEU.
"""

from __future__ import annotations

import dataclasses
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from torch import nn

from fullrank.data.bpe_dropout import VARIANTS, BPEDropout
from fullrank.data.tokenizers import Tokenizer, ensure_vocab_matches
from fullrank.data.translation import EncodedPairs, ParallelBatches, encode_pairs, read_parallel
from fullrank.errors import ConfigError, DataError
from fullrank.evaluation.bleu import score
from fullrank.inference.translate import first_too_long, translate
from fullrank.output import console as make_console
from fullrank.recipes.common import Resume, RunReport, keeps_thread_count, prepare_tokenizer
from fullrank.recipes.config import DataConfig, DecodeConfig, ExperimentConfig
from fullrank.recipes.init import find_start, start_config
from fullrank.recipes.seq2seq import begin, finish, not_scored, scored_models, train_seq2seq


def pair_files(data: DataConfig, prefix: str) -> tuple[Path, Path]:
    """``(PREFIX.SRC_LANG, PREFIX.TGT_LANG)`` under ``data.root``."""
    if not data.src_lang or not data.tgt_lang:
        raise ConfigError("task 'mt' needs data.src_lang and data.tgt_lang (e.g. en and de)")
    return data.path(f"{prefix}.{data.src_lang}"), data.path(f"{prefix}.{data.tgt_lang}")


def load_split(data: DataConfig, prefix: str, tok: Tokenizer) -> tuple[list[tuple[str, str]], EncodedPairs]:
    pairs = read_parallel(*pair_files(data, prefix))
    return pairs, encode_pairs(pairs, tok, max_len=data.max_sentence_len)


def evaluate_bleu(model: nn.Module, tok: Tokenizer, pairs: list[tuple[str, str]],
                  decode: DecodeConfig, out_file: Path, progress: bool, *,
                  lang: str) -> dict[str, Any]:
    """Translate the sources of ``pairs``, write the output, and score it against the targets
    (in target language ``lang``)."""
    start = time.perf_counter()
    hyps = [h[0] for h in translate(model, tok, [s for s, _ in pairs], beam=decode.beam,
                                    alpha=decode.alpha, a=decode.a, b=decode.b,
                                    batch_size=decode.batch_size, progress=progress,
                                    workers=decode.workers, processes=decode.processes)]
    seconds = time.perf_counter() - start
    out_file.parent.mkdir(parents=True, exist_ok=True)
    out_file.write_text("".join(h + "\n" for h in hyps), encoding="utf-8")
    report = score(hyps, [t for _, t in pairs], lang=lang)
    return {**dataclasses.asdict(report), "sentences_per_s": len(pairs) / seconds,
            "output": str(out_file)}


@keeps_thread_count
def run_mt(exp: ExperimentConfig, *, resume: Resume = "never", progress: bool = True,
           console: Console | None = None) -> RunReport:
    """Train and evaluate a translation model as ``exp`` describes."""
    console = console or make_console()
    cfg, data = exp.train, exp.data
    dist, start = begin(exp, resume, console)
    run_dir = exp.run_dir
    # evaluation-only sets scored at the end, read first: a missing or bad file fails at once
    extra = {name: read_parallel(*pair_files(data, prefix))
             for name, prefix in data.eval_sets.items() if name in exp.decode.splits}
    origin = find_start(exp)
    tok = prepare_tokenizer(exp, list(pair_files(data, data.train)), run_dir, dist,
                            resuming=start is not None, start=origin and origin.tokenizer)
    model_cfg = start_config(exp, origin, tok.vocab_size)
    ensure_vocab_matches(tok, model_cfg.vocab_size, f"model.vocab_size in {exp.name}")
    train_raw, train_pairs = load_split(data, data.train, tok)
    valid_raw, valid_pairs = load_split(data, data.valid, tok) if data.valid else ([], None)
    test_raw = read_parallel(*pair_files(data, data.test)) if data.test else []
    scored = {"valid": valid_raw, "test": test_raw, **extra}
    for split in exp.decode.splits:  # a source too long to translate fails now, not after training
        long = first_too_long(tok.encode_batch([s for s, _ in scored.get(split, [])]),
                              model_cfg.max_len)
        if long is not None:
            raise DataError(f"decode.splits: '{split}' line {long[0] + 1} has {long[1]} source "
                            f"tokens, more than model.max_len={model_cfg.max_len}; raise "
                            f"model.max_len or leave '{split}' out of decode.splits")

    sampler = None
    if data.bpe_dropout:
        kept = [train_raw[i] for i in train_pairs.kept]
        sides = [BPEDropout(tok, [pair[j] for pair in kept], data.bpe_dropout, seed=cfg.seed + j,
                            max_len=data.max_sentence_len, standard=ids)
                 for j, ids in enumerate((train_pairs.src, train_pairs.tgt))]

        def sampler(epoch: int) -> tuple[list[np.ndarray], list[np.ndarray]]:
            return sides[0].epoch(epoch), sides[1].epoch(epoch)

    def describe_data(batches: ParallelBatches) -> str:
        line = (f"data: {len(train_pairs):,} training pairs "
                f"({train_pairs.n_dropped} longer than {data.max_sentence_len} tokens dropped), "
                f"{len(batches):,} batches of ≤{data.max_tokens} tokens per epoch"
                + (" with standard BPE" if sampler is not None else
                   f", padding {100 * batches.padding_ratio():.1f}%"))
        if sampler is not None:
            line += (f"\nBPE-dropout p={data.bpe_dropout:g}: {VARIANTS} segmentations drawn "
                     f"per word ({sides[0].n_words:,} source, {sides[1].n_words:,} target "
                     f"words); epoch 0 has {batches.n_tokens(0) / batches.n_tokens() - 1:+.1%}"
                     f" tokens, {batches.epoch_length(0):,} batches, padding "
                     f"{100 * batches.padding_ratio(0):.1f}%")
        return line

    model, report = train_seq2seq(
        exp, model_cfg, train_pairs, valid_pairs, tokenizer=tok,
        vocabulary=f"shared {tok.kind} vocabulary of {tok.vocab_size}",
        meta={"task": "mt", "experiment": exp.to_dict()}, dist=dist, start=start, origin=origin,
        progress=progress, console=console, describe_data=describe_data, sampler=sampler)
    report.extra["dropped_pairs"] = train_pairs.n_dropped
    if dist.is_main:
        report.extra["bleu"] = final_bleu(exp, run_dir, model, tok, scored, progress, console)
        finish(run_dir, report, console)
    return report


def final_bleu(exp: ExperimentConfig, run_dir: Path, model: nn.Module, tok: Tokenizer,
               scored: dict[str, list[tuple[str, str]]], progress: bool,
               console: Console) -> dict[str, Any]:
    """BLEU of the last checkpoint and of the average of the last K on each of
    ``decode.splits`` (``scored`` maps a split name to its raw pairs: ``valid``, ``test`` and
    the evaluation-only sets of ``data.eval_sets``; an empty one is skipped)."""
    decode = exp.decode
    models = scored_models(run_dir, model, decode.average_last, console)
    results: dict[str, Any] = {}
    for split in decode.splits:
        pairs = scored.get(split)
        if not pairs:
            not_scored(console, split)
            continue
        for name, m in models.items():
            out_file = run_dir / "translations" / f"{split}.{name}.{exp.data.tgt_lang}"
            r = evaluate_bleu(m, tok, pairs, decode, out_file, progress, lang=exp.data.tgt_lang)
            results[f"{split}.{name}"] = r
            _print_result(console, f"{split} ({name}) beam {decode.beam}, α {decode.alpha:g}", r)
    if decode.tune_alpha and decode.splits:  # no splits: nothing is decoded, nor tuned
        results.update(_tuned_alpha(exp, run_dir, models, tok, scored, results, progress,
                                    console))
    signature = next((r["signature"] for r in results.values() if "signature" in r), None)
    if signature:
        console.print(f"sacreBLEU signature: {signature}")
    return results


def _print_result(console: Console, what: str, r: dict[str, Any]) -> None:
    console.print(f"{what}: sacreBLEU {r['sacrebleu']:.2f} · chrF {r['chrf']:.2f} · tokenized "
                  f"lowercased BLEU {r['tokenized_lowercased']:.2f} · Moses-tokenized lowercased "
                  f"BLEU {r['moses_lowercased']:.2f} ({r['sentences_per_s']:.1f} sentences/s)")


def _tuned_alpha(exp: ExperimentConfig, run_dir: Path, models: dict[str, nn.Module],
                 tok: Tokenizer, scored: dict[str, list[tuple[str, str]]],
                 done: dict[str, Any], progress: bool, console: Console) -> dict[str, Any]:
    """For each model: the α of ``decode.tune_alpha`` with the best tokenized lowercased BLEU on
    ``valid`` (``scored["valid"]``, non-empty: the config requires ``data.valid``), then every
    other split of ``decode.splits`` decoded once with it. ``done`` holds the results already
    computed at ``decode.alpha`` (and their translation files), reused rather than decoded
    again."""
    decode, lang, out_dir = exp.decode, exp.data.tgt_lang, run_dir / "translations"
    results: dict[str, Any] = {}
    for name, m in models.items():

        def bleu_at(split: str, alpha: float, out_file: Path) -> dict[str, Any]:
            if alpha == decode.alpha and f"{split}.{name}" in done:
                if split != "valid":  # the tuned output file, as if decoded again
                    shutil.copyfile(out_dir / f"{split}.{name}.{lang}", out_file)
                return done[f"{split}.{name}"]
            return evaluate_bleu(m, tok, scored[split], dataclasses.replace(decode, alpha=alpha),
                                 out_file, progress, lang=lang)

        dev = {a: bleu_at("valid", a, out_dir / f"valid.{name}.alpha{a:g}.{lang}")
               ["tokenized_lowercased"] for a in dict.fromkeys(decode.tune_alpha)}
        best = max(dev, key=lambda a: dev[a])  # the first listed among equals
        results[f"valid.{name}.tune_alpha"] = {"bleu": {f"{a:g}": b for a, b in dev.items()},
                                               "best": best}
        console.print(f"valid ({name}) tokenized lowercased BLEU by α: "
                      + ", ".join(f"{a:g} {b:.2f}" for a, b in dev.items())
                      + f" → α {best:g}")
        for split in decode.splits:
            if split == "valid" or not scored.get(split):
                continue
            r = bleu_at(split, best, out_dir / f"{split}.{name}.tuned.{lang}")
            results[f"{split}.{name}.tuned"] = {**r, "alpha": best}
            _print_result(console, f"{split} ({name}) beam {decode.beam}, α {best:g} chosen on "
                          f"valid", r)
    return results
