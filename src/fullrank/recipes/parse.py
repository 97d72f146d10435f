"""The parsing task ([V17] §6.3): Penn Treebank files → cleaned trees → (words, linearized tree)
pairs → the encoder-decoder of translation with a vocabulary for each side → beam search
(beam 21, α 0.3, input length + 300; constrained to well-formed trees) on the last checkpoint
and the average of the last K → EVALB-rule F1, exact match and the share of outputs that needed
repair, for the dev and test files.

Training is translation's (:func:`fullrank.recipes.mt.pair_setup`); this module turns trees
into pairs and parses into scores. The run directory keeps what it scored: ``data/`` (the pairs
and the gold trees, one per line) and ``parses/`` (the output trees), so ``fullrank parse-eval
RUN/parses/test.last.trees --ref RUN/data/test.gold`` prints the table again.
:func:`ensemble_scores` scores several runs' models as one ensemble (``fullrank sweep``).
"""

from __future__ import annotations

import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from torch import nn

from fullrank.data.linearize import PLACEHOLDER, Leaves, Order, is_bracket, linearize
from fullrank.data.tokenizers import Tokenizer, ensure_vocab_matches
from fullrank.data.translation import ParallelBatches, encode_pairs
from fullrank.data.treebank import TreebankSplit, load_treebank
from fullrank.data.unknown_words import SignatureDropout, known_word, rare_to_signatures
from fullrank.errors import ConfigError, DataError
from fullrank.evaluation.parse_eval import CUTOFF_LEN, score_trees
from fullrank.inference.parse import (
    TREE_LEAVES,
    TREE_ORDER,
    TREE_VOCABULARY,
    parse,
    tell_words,
    tree_leaves,
    tree_order,
    tree_vocabulary,
)
from fullrank.inference.translate import first_too_long
from fullrank.models import EncoderDecoderConfig, ModelConfig
from fullrank.paths import write_text_atomic
from fullrank.recipes.config import ParseData, ParseDecode, ParseExperiment
from fullrank.recipes.init import planned_config
from fullrank.recipes.mt import check_pair_lengths, final_validation, not_scored, pair_setup, scored_models
from fullrank.recipes.recipe import Recipe, Run, RunReport, Setup, planned_once
from fullrank.training.checkpoints import load_checkpoint, read_meta

# said beside every figure: these are not [V17]'s Table 4 conditions
NOT_COMPARABLE = (
    "NLTK's sample of WSJ files 0001–0199, not WSJ section 23: not comparable with [V17]'s 91.3 F1"
)
SPLITS = ("train", "valid", "test")


class ParsingRecipe(Recipe[ParseExperiment]):
    """``task: parse``."""

    metrics = {
        "test_f1": (("extra", "parse", "test.{model}", "all", "f1"), "test F1", False),
        "valid_f1": (("extra", "parse", "valid.{model}", "all", "f1"), "validation F1", False),
        "test_exact": (
            ("extra", "parse", "test.{model}", "all", "exact_match"),
            "test exact match (%)",
            False,
        ),
        "valid_ppl": (("valid", "ppl"), "validation perplexity", True),
    }
    ensembles = True

    def setup(self, run: Run[ParseExperiment]) -> Setup:
        exp = run.exp
        data = exp.data
        data_dir = run.run_dir / "data"
        splits = load_splits(data)
        pairs = {name: pairs_of(split, data.tree_leaves, data.tree_order) for name, split in splits.items()}
        sources = data_dir / ("train.source" if data.unknown_words == "signature" else "train.words")
        run.first(lambda: write_data(data, data_dir, splits, pairs))
        if run.start:
            same_trees(data, run.start.path)
        words = run.tokenizer(lambda: [sources])
        pairs = with_known_words(pairs, words, data)
        run.first(lambda: write_targets(data_dir, pairs))
        trees = self.tree_tokenizer(run, data_dir / "train.trees", words)
        specials = ("pad_id", "bos_id", "eos_id")
        if any(getattr(words, s) != getattr(trees, s) for s in specials):
            raise ConfigError(
                f"data.tokenizer '{words.kind}' numbers its special tokens unlike "
                f"the tree vocabulary ({', '.join(specials)}); use "
                f"data.tokenizer: word"
            )
        model_cfg = run.model_config(trees, src_vocab_size=words.vocab_size)
        assert isinstance(model_cfg, EncoderDecoderConfig)  # what task: parse builds
        source_vocab = model_cfg.src_vocab_size or model_cfg.vocab_size  # None: shared with the trees
        ensure_vocab_matches(words, source_vocab, f"model.src_vocab_size in {exp.name}")
        for split in exp.decode.splits:  # a sentence too long fails now, not after training
            long = first_too_long(words.encode_batch([s for s, _ in pairs.get(split, [])]), model_cfg.max_len)
            if long is not None:
                file, line = splits[split].origins[long[0]]
                raise DataError(
                    f"decode.splits: the '{split}' tree of {file} line {line} has "
                    f"{long[1]} source tokens, more than model.max_len="
                    f"{model_cfg.max_len}; raise model.max_len"
                )
        limit = data.max_sentence_len
        train_pairs = encode_pairs(pairs["train"], words, max_len=limit, target=trees)
        sampler = None
        if data.word_dropout:
            dropout = SignatureDropout(
                [pairs["train"][i][0] for i in train_pairs.kept],
                train_pairs.src,
                train_pairs.tgt,
                words,
                trees if data.tree_leaves == "word" else None,
                data.word_dropout,
                seed=exp.train.seed,
            )
            sampler = dropout.epoch
        valid_pairs = (
            encode_pairs(pairs["valid"], words, max_len=limit, target=trees) if "valid" in pairs else None
        )
        max_len = model_cfg.max_len
        # a pair too long for the model fails now, not mid-training or at the final validation
        for split, encoded in (("train", train_pairs), ("valid", valid_pairs)):
            if encoded is not None:
                check_pair_lengths(
                    split,
                    encoded,
                    max_len,
                    limit,
                    tree_line(splits[split]),
                    sides=("sentence", "linearized tree"),
                )
        self.splits, self.trees, self.dropped = splits, trees, train_pairs.n_dropped
        setup, self.exact_valid = pair_setup(
            run,
            model_cfg,
            words,
            train_pairs,
            valid_pairs,
            sampler=sampler,
            vocabulary=f"{words.vocab_size} words ({words.kind}), {trees.vocab_size} tree symbols",
            meta={
                TREE_VOCABULARY: trees.to_str(),
                TREE_LEAVES: data.tree_leaves,
                TREE_ORDER: data.tree_order,
            },
            prepare=lambda m: tell_words(m, trees),
        )
        batches = setup.batches
        assert isinstance(batches, ParallelBatches)
        held = " · ".join(
            f"{name} {len(s):,} trees from {s.n_files} files" for name, s in splits.items() if name != "train"
        )
        setup.data_line = (
            f"data: {len(train_pairs):,} training trees from {splits['train'].n_files} files "
            f"({train_pairs.n_dropped} longer than {limit} tokens dropped) · {held}; "
            f"{len(batches):,} batches of ≤{data.max_tokens} tokens per epoch, padding "
            f"{100 * batches.padding_ratio():.1f}%"
            + (f"; word dropout to signatures, α={data.word_dropout:g}" if sampler else "")
        )
        return setup

    def tree_tokenizer(self, run: Run, targets: Path, words: Tokenizer) -> Tokenizer:
        """The tree symbols' vocabulary: the ``train.init_from`` checkpoint's, or
        :func:`tree_symbols` of the training targets (rank 0 builds and saves
        ``RUN/tree_tokenizer.json``; a resumed run loads it)."""
        saved = run.run_dir / "tree_tokenizer.json"

        def build() -> None:
            if run.resume_from is not None and saved.is_file():
                return
            if run.start:
                tok = tree_vocabulary(read_meta(run.start.path), f"train.init_from: {run.start.path}")
            else:
                tok = tree_symbols(targets, words)
            tok.save(saved)

        run.first(build)
        return Tokenizer.load(saved)

    def evaluate(self, run: Run[ParseExperiment], setup: Setup, model: nn.Module, report: RunReport) -> None:
        exp = run.exp
        final_validation(run, self.exact_valid, model, report)
        report.extra["dropped_pairs"] = self.dropped
        models = scored_models(run, model, exp.decode.average_last)
        results: dict[str, Any] = {}
        for split in exp.decode.splits:
            if split not in self.splits:
                not_scored(run, split)
                continue
            for name, m in models.items():
                out_file = run.run_dir / "parses" / f"{split}.{name}.trees"
                results[f"{split}.{name}"], line = score_parses(
                    m,
                    setup.tokenizer,
                    self.trees,
                    self.splits[split],
                    exp.data,
                    exp.decode,
                    out_file,
                    run.progress,
                )
                run.say(f"{split} ({name}) beam {exp.decode.beam}, α {exp.decode.alpha:g}: " + line)
        if results:
            run.say(f"EVALB rules (COLLINS.prm); {NOT_COMPARABLE}")
        results["note"] = NOT_COMPARABLE
        report.extra["parse"] = results

    def ensemble(
        self, exp: ParseExperiment, runs: Sequence[Path], out: Path, say: Callable[[str], None]
    ) -> dict[str, Any]:
        """The ensemble of the runs' averaged models (``decode.average_last`` > 1; else their
        last checkpoints), as :func:`ensemble_scores`; results under ``extra.parse`` as a
        run's."""
        k = exp.decode.average_last
        model = f"avg{k}" if k > 1 and all((r / f"averaged-last{k}").is_dir() for r in runs) else "last"
        scores = ensemble_scores(exp, runs, out, model, say)
        return {
            "extra": {
                "parse": {
                    f"{split}.{model}": scores[split] for split in exp.decode.splits if split in scores
                },
                "members": scores["members"],
            }
        }

    def plan_model(
        self, exp: ParseExperiment, out: Path, cache: dict[str, Any], base: ModelConfig | None
    ) -> tuple[ModelConfig, list[str]]:
        if base is not None:
            return planned_config(exp, 0, base), []
        data = exp.data
        parts = [
            exp.task,
            str(Path(data.root).resolve()),
            *(str(getattr(data, s)) for s in SPLITS),
            data.tokenizer,
            str(data.vocab_size),
            str(data.lowercase),
            str(data.min_frequency),
            data.unknown_words,
            data.tree_leaves,
            data.tree_order,
            str(data.tokenizer_file),
        ]
        trees = "trees:" + "\0".join(parts)  # the tree vocabulary's size, by the settings
        if trees not in cache:
            with tempfile.TemporaryDirectory() as tmp:
                data_dir = Path(tmp)
                splits = load_splits(data, only=("train",))
                pairs = {"train": pairs_of(splits["train"], data.tree_leaves, data.tree_order)}
                write_data(data, data_dir, splits, pairs)
                source = "train.source" if data.unknown_words == "signature" else "train.words"
                words, overrides = (
                    (Tokenizer.load(data.path(data.tokenizer_file)), [])
                    if data.tokenizer_file
                    else planned_once(
                        "tokenizer",
                        parts,
                        out,
                        cache,
                        lambda: Tokenizer.train(
                            data.tokenizer,
                            [data_dir / source],
                            data.vocab_size,
                            min_frequency=data.min_frequency,
                            lowercase=data.lowercase,
                        ),
                    )
                )
                write_targets(data_dir, with_known_words(pairs, words, data))
                cache[trees] = (
                    words.vocab_size,
                    tree_symbols(data_dir / "train.trees", words).vocab_size,
                    overrides,
                )
        n_words, n_trees, overrides = cache[trees]
        return planned_config(exp, n_trees, None, src_vocab_size=n_words), overrides


# ------------------------------------------------------------------------ trees into pairs
def tree_line(split: TreebankSplit) -> Callable[[int, int], str]:
    """``(i, side) →`` where tree ``i`` of ``split`` is (its file and line), for either side."""

    def where(i: int, side: int) -> str:
        file, line = split.origins[i]
        return f"the tree of {file} line {line}"

    return where


def load_splits(data: ParseData, only: Sequence[str] = SPLITS) -> dict[str, TreebankSplit]:
    """The cleaned trees of each split the data section names."""
    return {name: load_treebank(data.root, pattern) for name in only if (pattern := getattr(data, name))}


def pairs_of(
    split: TreebankSplit, leaves: Leaves = "placeholder", order: Order = "top_down"
) -> list[tuple[str, str]]:
    """``(words, linearized tree)`` of each tree, as text."""
    return [(" ".join(t.leaves()), " ".join(linearize(t, leaves, order))) for t in split.trees]


def write_lines(path: Path, lines: Iterable[str]) -> None:
    """Write ``lines`` to ``path``, one per line (atomically)."""
    write_text_atomic(path, "".join(line + "\n" for line in lines))


def write_data(
    data: ParseData, out: Path, splits: dict[str, TreebankSplit], pairs: dict[str, list[tuple[str, str]]]
) -> None:
    """``NAME.words`` (the sentences) and ``NAME.gold`` (the cleaned trees, one per line) of each
    split under ``out``; with signatures also ``train.source``, the training sentences with their
    rare words as signatures: the text the source vocabulary is built from."""
    out.mkdir(parents=True, exist_ok=True)
    for name, split in splits.items():
        write_lines(out / f"{name}.words", (" ".join(t.leaves()) for t in split.trees))
        write_lines(out / f"{name}.gold", (t.to_string() for t in split.trees))
    if data.unknown_words == "signature":
        rare = rare_to_signatures((s for s, _ in pairs["train"]), data.min_frequency)
        write_lines(out / "train.source", (" ".join(map(rare, s.split())) for s, _ in pairs["train"]))


def with_known_words(
    pairs: dict[str, list[tuple[str, str]]], words: Tokenizer, data: ParseData
) -> dict[str, list[tuple[str, str]]]:
    """``pairs`` with each word the vocabulary ``words`` lacks as its signature
    (:mod:`fullrank.data.unknown_words`, ``data.unknown_words: signature``), in the sentence
    and, when the words are the tree's leaves, in the tree."""
    if data.unknown_words != "signature":
        return pairs
    known = known_word(lambda w: words.token_to_id(w) is not None)

    def tree(t: str) -> str:
        return t if data.tree_leaves != "word" or is_bracket(t) else known(t)

    return {
        name: [(" ".join(map(known, s.split())), " ".join(map(tree, t.split()))) for s, t in p]
        for name, p in pairs.items()
    }


def write_targets(out: Path, pairs: dict[str, list[tuple[str, str]]]) -> None:
    """``NAME.trees``: the linearized trees as the model learns them."""
    for name, p in pairs.items():
        write_lines(out / f"{name}.trees", (t for _, t in p))


def tree_symbols(targets: Path, words: Tokenizer) -> Tokenizer:
    """The tree symbols' vocabulary: every bracket and ``XX`` of the training ``targets``, and of
    their words those that ``words`` (the source vocabulary) keeps."""
    symbols = targets.with_suffix(".symbols")
    symbols.write_text(
        "".join(
            " ".join(
                t
                for t in line.split()
                if is_bracket(t) or t == PLACEHOLDER or words.token_to_id(t) not in (None, words.unk_id)
            )
            + "\n"
            for line in targets.read_text(encoding="utf-8").splitlines()
        ),
        encoding="utf-8",
    )
    return Tokenizer.train("word", [symbols])


def same_trees(data: ParseData, checkpoint: Path) -> None:
    """A one-line error unless the ``train.init_from`` checkpoint writes trees as ``data``
    says."""
    meta = read_meta(checkpoint)
    where = f"train.init_from: {checkpoint}"
    for setting, theirs in (
        ("tree_leaves", tree_leaves(meta, where)),
        ("tree_order", tree_order(meta, where)),
    ):
        if theirs != getattr(data, setting):
            raise ConfigError(
                f"{where} writes trees with data.{setting}={theirs}, this "
                f"experiment with {getattr(data, setting)}; set "
                f"data.{setting}: {theirs}"
            )


# ------------------------------------------------------------------------ parses into scores
def score_parses(
    model: nn.Module | list[nn.Module],
    words: Tokenizer,
    trees: Tokenizer,
    gold: TreebankSplit,
    data: ParseData,
    decode: ParseDecode,
    out_file: Path,
    progress: bool,
) -> tuple[dict[str, Any], str]:
    """Parse the sentences of ``gold`` (several models: as an ensemble), write the trees to
    ``out_file`` and score them: F1, precision, recall, exact match and crossing for all
    sentences and those of ≤ 40 words, the share of outputs that needed repair, speed; and
    the scores as one line."""
    sentences = [" ".join(t.leaves()) for t in gold.trees]
    begun = time.perf_counter()
    parsed = parse(
        model,
        words,
        trees,
        sentences,
        beam=decode.beam,
        alpha=decode.alpha,
        a=decode.a,
        b=decode.b,
        batch_size=decode.batch_size,
        progress=progress,
        workers=decode.workers,
        processes=decode.processes,
        leaves=data.tree_leaves,
        order=data.tree_order,
        constrained=decode.constrained,
    )
    seconds = time.perf_counter() - begun
    out_file.parent.mkdir(parents=True, exist_ok=True)
    write_lines(out_file, ((p.tree.to_string() if p else "") for p in parsed))
    scores = score_trees([p.tree if p else None for p in parsed], gold.trees)
    repairs = Counter(r for p in parsed if p for r in p.repairs)
    n_repaired = sum(bool(p and p.repaired) for p in parsed)
    record = {
        **scores.to_dict(),
        "repaired": n_repaired / len(parsed),
        "repairs": dict(repairs),
        "sentences_per_s": len(parsed) / seconds,
        "seconds": seconds,
        "output": str(out_file),
    }
    line = (
        f"F1 {scores.all.f1:.2f} (≤{CUTOFF_LEN} words {scores.short.f1:.2f}) · exact match "
        f"{scores.all.exact_match:.2f}% · repaired {n_repaired}/{len(parsed)} · "
        f"{record['sentences_per_s']:.1f} sentences/s"
    )
    return record, line


def ensemble_scores(
    exp: ParseExperiment, runs: Sequence[Path], out: Path, model: str, say: Callable[[str], None] = print
) -> dict[str, Any]:
    """Parse the ``decode.splits`` of ``exp`` with the ensemble of the ``model`` (``last``, or
    ``avgK``: its ``averaged-lastK``) of each of ``runs`` and score them; the trees go to
    ``out/SPLIT.trees``. The runs must share their vocabularies and tree settings (runs of
    ``exp`` that differ in their seed)."""
    paths = [r / f"averaged-last{model[3:]}" if model.startswith("avg") else r for r in runs]
    ckpts = [load_checkpoint(p) for p in paths]
    first = ckpts[0]
    trees = tree_vocabulary(first.meta, str(first.path))
    if first.tokenizer is None:
        raise ConfigError(f"{first.path}: no tokenizer.json; not a parsing checkpoint")
    for c in ckpts[1:]:
        if (
            c.tokenizer is None
            or c.tokenizer.fingerprint() != first.tokenizer.fingerprint()
            or tree_vocabulary(c.meta, str(c.path)).fingerprint() != trees.fingerprint()
        ):
            raise ConfigError(
                f"{c.path} and {first.path} have different vocabularies; an "
                f"ensemble needs parsers trained on the same trees"
            )
    results: dict[str, Any] = {"members": [str(p) for p in paths]}
    for split in exp.decode.splits:
        pattern = getattr(exp.data, split, None)
        if not pattern:
            continue
        gold = load_treebank(exp.data.root, pattern)
        results[split], line = score_parses(
            [c.model for c in ckpts],
            first.tokenizer,
            trees,
            gold,
            exp.data,
            exp.decode,
            out / f"{split}.trees",
            progress=False,
        )
        say(f"ensemble of {len(ckpts)} ({model}) {split}: {line}")
    return results
