"""The parsing recipe ([V17] §6.3): Penn Treebank files → cleaned trees → (words, linearized
tree) pairs → the encoder-decoder of translation with a vocabulary for each side → beam search
(beam 21, α 0.3, input length + 300; constrained to well-formed trees) on the last checkpoint
and the average of the last K → EVALB-rule F1, exact match and the share of outputs that needed
repair, for the dev and test files.

Everything about training is the translation recipe's (:mod:`fullrank.recipes.seq2seq`); this
module only turns trees into pairs and parses into scores. The run directory keeps what it
scored: ``data/`` (the pairs and the gold trees, one per line) and ``parses/`` (the output
trees), so ``fullrank parse-eval RUN/parses/test.last.trees --ref RUN/data/test.gold`` prints
the table again.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from rich.console import Console
from torch import nn

from fullrank.data.linearize import (PLACEHOLDER, Leaves, Order, is_bracket, linearize)
from fullrank.data.tokenizers import Tokenizer, ensure_vocab_matches
from fullrank.data.translation import ParallelBatches, encode_pairs
from fullrank.data.treebank import TreebankSplit, load_treebank
from fullrank.data.unknown_words import SignatureDropout, known_word, rare_to_signatures
from fullrank.errors import ConfigError, DataError
from fullrank.evaluation.parse_eval import CUTOFF_LEN, score_trees
from fullrank.inference.parse import (TREE_LEAVES, TREE_ORDER, TREE_VOCABULARY, parse,
                                     tell_words, tree_leaves, tree_order, tree_vocabulary)
from fullrank.inference.translate import first_too_long
from fullrank.recipes.common import Resume, RunReport, keeps_thread_count, prepare_tokenizer
from fullrank.recipes.config import ExperimentConfig
from fullrank.recipes.init import Start, find_start, start_config
from fullrank.recipes.seq2seq import begin, finish, not_scored, scored_models, train_seq2seq
from fullrank.training.checkpoints import read_meta
from fullrank.training.distributed import DistInfo, barrier

# said beside every figure: these are not [V17]'s Table 4 conditions
NOT_COMPARABLE = ("NLTK's sample of WSJ files 0001–0199, not WSJ section 23: not comparable "
                  "with [V17]'s 91.3 F1")


def pairs_of(split: TreebankSplit, leaves: Leaves = "placeholder",
             order: Order = "top_down") -> list[tuple[str, str]]:
    """``(words, linearized tree)`` of each tree, as text."""
    return [(" ".join(t.leaves()), " ".join(linearize(t, leaves, order))) for t in split.trees]


def write_split(out: Path, name: str, split: TreebankSplit) -> None:
    """Write ``NAME.words`` (the sentences) and ``NAME.gold`` (the cleaned trees, one per line)
    under ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    write_lines(out / f"{name}.words", (" ".join(t.leaves()) for t in split.trees))
    write_lines(out / f"{name}.gold", (t.to_string() for t in split.trees))


def write_lines(path: Path, lines: Iterable[str]) -> None:
    """Write ``lines`` to ``path``, one per line."""
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")


def with_known_words(pairs: list[tuple[str, str]], known: Callable[[str], str],
                     leaves: Leaves) -> list[tuple[str, str]]:
    """``pairs`` with each word mapped by ``known`` (:mod:`fullrank.data.unknown_words`), in
    the sentence and, when the words are the tree's leaves, in the tree."""
    def tree(t: str) -> str:
        return t if leaves != "word" or is_bracket(t) else known(t)
    return [(" ".join(map(known, s.split())), " ".join(map(tree, t.split()))) for s, t in pairs]


def tree_tokenizer(run_dir: Path, targets: Path, dist: DistInfo, resuming: bool,
                   origin: Start | None, words: Tokenizer) -> Tokenizer:
    """The tree symbols' vocabulary: the ``train.init_from`` checkpoint's, or every symbol of the
    training targets, and of their words those that ``words`` (the source vocabulary) keeps
    (rank 0 builds and saves ``RUN/tree_tokenizer.json``; a resumed run loads it)."""
    saved = run_dir / "tree_tokenizer.json"
    if dist.is_main and not (resuming and saved.is_file()):
        if origin:
            tok = tree_vocabulary(read_meta(origin.path), f"train.init_from: {origin.path}")
        else:
            symbols = targets.with_suffix(".symbols")
            symbols.write_text("".join(
                " ".join(t for t in line.split() if is_bracket(t) or t == PLACEHOLDER
                         or words.token_to_id(t) not in (None, words.unk_id)) + "\n"
                for line in targets.read_text(encoding="utf-8").splitlines()), encoding="utf-8")
            tok = Tokenizer.train("word", [symbols])
        tok.save(saved)
    barrier(dist)
    return Tokenizer.load(saved)


@keeps_thread_count
def run_parse(exp: ExperimentConfig, *, resume: Resume = "never", progress: bool = True,
              console: Console | None = None) -> RunReport:
    """Train a parser as ``exp`` describes and score its dev and test files."""
    console = console or Console(highlight=False)
    data = exp.data
    dist, start = begin(exp, resume, console)
    run_dir = exp.run_dir
    splits = {name: load_treebank(data.root, pattern) for name, pattern in
              (("train", data.train), ("valid", data.valid), ("test", data.test)) if pattern}
    pairs = {name: pairs_of(split, data.tree_leaves, data.tree_order)
             for name, split in splits.items()}
    data_dir = run_dir / "data"
    signatures = data.unknown_words == "signature"
    # the source vocabulary's text: with signatures, the rare training words are theirs
    sources = data_dir / ("train.source" if signatures else "train.words")
    if dist.is_main:
        for name, split in splits.items():
            write_split(data_dir, name, split)
        if signatures:
            rare = rare_to_signatures((s for s, _ in pairs["train"]), data.min_frequency)
            write_lines(sources, (" ".join(map(rare, s.split())) for s, _ in pairs["train"]))
    barrier(dist)
    origin = find_start(exp)
    if origin:
        meta = read_meta(origin.path)
        where = f"train.init_from: {origin.path}"
        for setting, theirs in (("tree_leaves", tree_leaves(meta, where)),
                                ("tree_order", tree_order(meta, where))):
            if theirs != getattr(data, setting):
                raise ConfigError(f"{where} writes trees with data.{setting}={theirs}, this "
                                  f"experiment with {getattr(data, setting)}; set "
                                  f"data.{setting}: {theirs}")
    words = prepare_tokenizer(exp, [sources], run_dir, dist,
                              resuming=start is not None, start=origin and origin.tokenizer)
    if signatures:
        known = known_word(lambda w: words.token_to_id(w) is not None)
        pairs = {name: with_known_words(p, known, data.tree_leaves) for name, p in pairs.items()}
    if dist.is_main:  # the linearized trees as the model learns them
        for name, p in pairs.items():
            write_lines(data_dir / f"{name}.trees", (t for _, t in p))
    barrier(dist)
    trees = tree_tokenizer(run_dir, data_dir / "train.trees", dist, start is not None, origin,
                           words)
    specials = ("pad_id", "bos_id", "eos_id")
    if any(getattr(words, s) != getattr(trees, s) for s in specials):
        raise ConfigError(f"data.tokenizer '{words.kind}' numbers its special tokens unlike the "
                          f"tree vocabulary ({', '.join(specials)}); use data.tokenizer: word")
    model_cfg = start_config(exp, origin, trees.vocab_size, src_vocab_size=words.vocab_size)
    ensure_vocab_matches(trees, model_cfg.vocab_size, f"model.vocab_size in {exp.name}")
    ensure_vocab_matches(words, model_cfg.src_vocab_size,  # type: ignore[union-attr]
                         f"model.src_vocab_size in {exp.name}")
    for split in exp.decode.splits:  # a sentence too long to parse fails now, not after training
        long = first_too_long(words.encode_batch([s for s, _ in pairs.get(split, [])]),
                              model_cfg.max_len)
        if long is not None:
            file, line = splits[split].origins[long[0]]
            raise DataError(f"decode.splits: the '{split}' tree of {file} line {line} has "
                            f"{long[1]} source tokens, more than model.max_len="
                            f"{model_cfg.max_len}; raise model.max_len")
    limit = data.max_sentence_len
    train_pairs = encode_pairs(pairs["train"], words, max_len=limit, target=trees)
    sampler = None
    if data.word_dropout:
        dropout = SignatureDropout([pairs["train"][i][0] for i in train_pairs.kept],
                                   train_pairs.src, train_pairs.tgt, words,
                                   trees if data.tree_leaves == "word" else None,
                                   data.word_dropout, seed=exp.train.seed)
        sampler = dropout.epoch
    valid_pairs = encode_pairs(pairs["valid"], words, max_len=limit, target=trees) \
        if "valid" in pairs else None

    def describe_data(batches: ParallelBatches) -> str:
        held = " · ".join(f"{name} {len(s):,} trees from {s.n_files} files"
                          for name, s in splits.items() if name != "train")
        return (f"data: {len(train_pairs):,} training trees from {splits['train'].n_files} files "
                f"({train_pairs.n_dropped} longer than {limit} tokens dropped) · {held}; "
                f"{len(batches):,} batches of ≤{data.max_tokens} tokens per epoch, padding "
                f"{100 * batches.padding_ratio():.1f}%"
                + (f"; word dropout to signatures, α={data.word_dropout:g}" if sampler else ""))

    model, report = train_seq2seq(
        exp, model_cfg, train_pairs, valid_pairs, tokenizer=words,
        vocabulary=f"{words.vocab_size} words ({words.kind}), {trees.vocab_size} tree symbols",
        meta={"task": "parse", "experiment": exp.to_dict(), TREE_VOCABULARY: trees.to_str(),
              TREE_LEAVES: data.tree_leaves, TREE_ORDER: data.tree_order},
        dist=dist, start=start, origin=origin, progress=progress, console=console,
        describe_data=describe_data, sampler=sampler, prepare=lambda m: tell_words(m, trees))
    report.extra["dropped_pairs"] = train_pairs.n_dropped
    if dist.is_main:
        report.extra["parse"] = final_parse(exp, run_dir, model, words, trees, splits, progress,
                                            console)
        finish(run_dir, report, console)
    return report


def final_parse(exp: ExperimentConfig, run_dir: Path, model: nn.Module, words: Tokenizer,
                trees: Tokenizer, splits: dict[str, TreebankSplit], progress: bool,
                console: Console) -> dict[str, Any]:
    """Parse and score each split of ``decode.splits`` with the last checkpoint and the average
    of the last K; the output trees go to ``RUN/parses/SPLIT.MODEL.trees``."""
    decode = exp.decode
    models = scored_models(run_dir, model, decode.average_last, console)
    results: dict[str, Any] = {}
    for split in decode.splits:
        gold = splits.get(split)
        if gold is None:
            not_scored(console, split)
            continue
        sentences = [" ".join(t.leaves()) for t in gold.trees]
        for name, m in models.items():
            begun = time.perf_counter()
            parsed = parse(m, words, trees, sentences, beam=decode.beam, alpha=decode.alpha,
                           a=decode.a, b=decode.b, batch_size=decode.batch_size,
                           progress=progress, workers=decode.workers, processes=decode.processes,
                           leaves=exp.data.tree_leaves, order=exp.data.tree_order,
                           constrained=decode.constrained)
            seconds = time.perf_counter() - begun
            out_file = run_dir / "parses" / f"{split}.{name}.trees"
            out_file.parent.mkdir(parents=True, exist_ok=True)
            out_file.write_text("".join((p.tree.to_string() if p else "") + "\n"
                                        for p in parsed), encoding="utf-8")
            scores = score_trees([p.tree if p else None for p in parsed], gold.trees)
            repairs = Counter(r for p in parsed if p for r in p.repairs)
            n_repaired = sum(bool(p and p.repaired) for p in parsed)
            r = {**scores.to_dict(), "repaired": n_repaired / len(parsed),
                 "repairs": dict(repairs), "sentences_per_s": len(parsed) / seconds,
                 "seconds": seconds, "output": str(out_file)}
            results[f"{split}.{name}"] = r
            console.print(f"{split} ({name}) beam {decode.beam}, α {decode.alpha:g}: F1 "
                          f"{scores.all.f1:.2f} (≤{CUTOFF_LEN} words {scores.short.f1:.2f}) · "
                          f"exact match {scores.all.exact_match:.2f}% · repaired "
                          f"{n_repaired}/{len(parsed)} · {r['sentences_per_s']:.1f} sentences/s")
    if results:
        console.print(f"[dim]EVALB rules (COLLINS.prm); {NOT_COMPARABLE}[/dim]")
    results["note"] = NOT_COMPARABLE
    return results
