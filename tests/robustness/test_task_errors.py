"""Bad input to the task commands (``parse``, ``parse-eval``, ``classify``, ``answer``,
``fill-mask``, ``eval`` of a BERT) and to
the starts of a run (``train.init_from``, ``train.resume_from``, ``--resume``): every case is exit
status 2, exactly one line on stderr, no traceback, every file kept (as in
``test_one_line_errors.py``).

Cases: starts from damaged checkpoints (a flipped bit, NaN or infinite weights, a tokenizer of
another model), each task's metadata (``meta.json`` beyond the model: labels, the span settings,
the tree vocabulary), text that is not UTF-8 (arguments, standard input), numbers that are not
finite, and trees nested deeper than Python's recursion limit.
"""

from __future__ import annotations

import io
import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.robustness.conftest import LABELS, Sandbox
from tests.robustness.damage import MODEL, STATE, TOKENIZER, edit_meta, flip_byte, poison, rewrite
from tests.robustness.test_one_line_errors import Case, check_case, s


def classify_config(sb: Sandbox, init_from: Path) -> Path:
    """A fine-tuning experiment (``task: classify``) starting from ``init_from``."""
    rows = [{"text_a": f"line {i}", "text_b": "a line", "label": LABELS[i % 3]} for i in range(12)]
    (sb.root / "pairs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    path = sb.root / "cls.yaml"
    path.write_text(
        f"name: cls\ntask: classify\nout_dir: {sb.root / 'runs'}\n"
        f"data: {{root: {sb.root}, train: pairs.jsonl}}\n"
        f"train: {{init_from: {init_from}, steps: 2, batch_size: 4, threads: 1}}\n"
    )
    return path


def fine_tune(damage: Callable[[Sandbox], object]) -> Callable[[Sandbox], list[str]]:
    """Damage the sandbox, then fine-tune from its classifier checkpoint."""

    def argv(sb: Sandbox) -> list[str]:
        damage(sb)
        return ["train", s(classify_config(sb, sb.classify)), "--quiet"]

    return argv


def every_step(damage: Callable[[Path], object]) -> Callable[[Sandbox], object]:
    return lambda sb: [damage(c) for c in (sb.older, sb.newest)]


def other_tokenizer(ckpt: Path, donor: Path) -> Path:
    """Give ``ckpt`` the tokenizer of ``donor`` (its checksum recorded, as if written so);
    ``ckpt``."""
    rewrite(ckpt, TOKENIZER, (donor / TOKENIZER).read_bytes())
    return ckpt


STARTS = [
    Case(
        "init_from a missing path",
        lambda sb: ["train", s(classify_config(sb, sb.root / "nope")), "--quiet"],
        r"train\.init_from: .*nope: no such checkpoint or run directory",
    ),
    Case(
        "init_from a flipped bit",
        fine_tune(lambda sb: flip_byte(sb.classify / MODEL)),
        r"train\.init_from: .*model\.safetensors: SHA-256 does not match",
    ),
    Case(
        "init_from NaN weights",
        fine_tune(lambda sb: poison(sb.classify)),
        r"train\.init_from: .*model\.safetensors: tensor '.*' holds NaN or infinite values",
    ),
    Case(
        "init_from infinite weights",
        fine_tune(lambda sb: poison(sb.classify, value=float("inf"))),
        r"holds NaN or infinite values",
    ),
    Case(
        "init_from a tokenizer of another model",
        fine_tune(lambda sb: other_tokenizer(sb.classify, sb.mt)),
        r"train\.init_from: .*tokenizer\.json: \d+ tokens but the model reads \d+",
    ),
    Case(
        "init_from labels of another head",
        fine_tune(lambda sb: edit_meta(sb.classify, lambda m: m.update(labels=["yes", "no"]))),
        r"train\.init_from: .*2 labels \(yes, no\) for a classifier of 3 classes",
    ),
    Case(
        "init_from beside data.tokenizer_file",
        lambda sb: [
            "train",
            s(classify_config(sb, sb.classify)),
            f"data.tokenizer_file={sb.classify / TOKENIZER}",
        ],
        r"data\.tokenizer_file and train\.init_from both give a tokenizer; drop data\.tokenizer_file",
    ),
    Case(
        "init_from a truncated tokenizer",
        fine_tune(lambda sb: (sb.classify / TOKENIZER).write_bytes(b"{")),
        r"train\.init_from: .*tokenizer\.json: [\d,]+ bytes where [\d,]+ were written",
    ),
    Case(
        "--resume from NaN weights",
        lambda sb: (every_step(poison)(sb), ["train", s(sb.config), "--resume", "--quiet"])[1],
        r"no checkpoint can be resumed from \(the newest: step-00000004 cannot be resumed from: "
        r".*holds NaN",
    ),
    Case(
        "--resume from NaN optimizer state",
        lambda sb: (every_step(lambda c: poison(c, STATE))(sb), ["train", s(sb.config), "--resume"])[1],
        r"optimizer\.safetensors: tensor 'optim\..*' holds NaN",
    ),
    Case(
        "train.resume_from NaN weights",
        lambda sb: (
            poison(sb.older),
            ["train", s(sb.config), "--quiet", "train.steps=4", f"train.resume_from={sb.older}"],
        )[1],
        r"step-00000002/model\.safetensors: tensor .* holds NaN or infinite values",
    ),
    Case(
        "generate with NaN weights",
        lambda sb: (poison(sb.newest), ["generate", s(sb.run), "--max-new-tokens", "3"])[1],
        r"holds NaN or infinite values",
    ),
    Case(
        "translate with infinite weights",
        lambda sb: (poison(sb.mt, value=float("-inf")), ["translate", s(sb.mt)])[1],
        r"mt/model\.safetensors: tensor .* holds NaN",
        stdin=b"a cat\n",
    ),
    Case(
        "average NaN weights",
        lambda sb: (poison(sb.older), ["average", s(sb.run), "--last", "2", "-o", s(sb.root / "avg")])[1],
        r"holds NaN",
    ),
    Case(
        "verify NaN weights",
        lambda sb: (poison(sb.newest), ["verify", s(sb.newest)])[1],
        r"1 of 1 checks failed",
    ),
    Case(
        "verify a tokenizer of another model",
        lambda sb: ["verify", s(other_tokenizer(sb.mt, sb.classify))],
        r"1 of 1 checks failed",
    ),
]


def edited(name: str, edit: Callable[[dict], object], *command: str) -> Callable[[Sandbox], list[str]]:
    """Edit the ``meta.json`` of checkpoint ``name``, then run ``command`` (``CKPT`` is it)."""

    def argv(sb: Sandbox) -> list[str]:
        ckpt = getattr(sb, name)
        edit_meta(ckpt, edit)
        (sb.root / "context.txt").write_text("The king spoke first. Then the queen spoke.\n")
        return [{"CKPT": s(ckpt), "CONTEXT": s(sb.root / "context.txt")}.get(a, a) for a in command]

    return argv


def two_classes(meta: dict) -> None:
    """A classifier's meta.json made to say 2 classes, with 2 labels: consistent in itself."""
    meta["model"]["n_classes"] = 2
    meta["labels"] = meta["labels"][:2]


CLASSIFY = ("classify", "CKPT")
ANSWER = ("answer", "CKPT", "--context", "CONTEXT", "--question", "who spoke first?")
PARSE = ("parse", "CKPT")
VERIFY = ("verify", "CKPT")


def squad(**settings: object) -> Callable[[dict], object]:
    return lambda m: m["squad"].update(settings)


TASK_METADATA = [
    Case(
        "classify: 2 labels for a 3-way head",
        edited("classify", lambda m: m.update(labels=["entailment", "neutral"]), *CLASSIFY),
        r"meta\.json: 2 labels \(entailment, neutral\) for a classifier of 3 classes",
        stdin=b"a\tb\n",
    ),
    Case(
        "classify: 4 labels for a 3-way head",
        edited("classify", lambda m: m["labels"].append("other"), *CLASSIFY),
        r"4 labels .* for a classifier of 3 classes",
        stdin=b"a\n",
    ),
    Case(
        "classify: labels a string",
        edited("classify", lambda m: m.update(labels="abc"), *CLASSIFY),
        r"labels = 'abc': should be a valid list",
        stdin=b"a\n",
    ),
    Case(
        "classify: no labels",
        edited("classify", lambda m: m.pop("labels"), *CLASSIFY),
        r"missing key 'labels'",
        stdin=b"a\n",
    ),
    Case(
        "classify: a label twice",
        edited("classify", lambda m: m.update(labels=["a", "b", "a"]), *CLASSIFY),
        r"labels: 'a' appears twice",
        stdin=b"a\n",
    ),
    Case(
        "classify: a label with a TAB",
        edited("classify", lambda m: m.update(labels=["a", "b\tc", "d"]), *CLASSIFY),
        r"labels: 'b\\tc' is not a label",
        stdin=b"a\n",
    ),
    Case(
        "classify: a number for a label",
        edited("classify", lambda m: m.update(labels=["a", 2, "c"]), *CLASSIFY),
        r"labels\.1 = 2: should be a valid string",
        stdin=b"a\n",
    ),
    Case(
        "classify a span model",
        lambda sb: ["classify", s(sb.squad)],
        r"needs a checkpoint of a `task: classify` run .*task='squad'",
        stdin=b"a\n",
    ),
    Case(
        "answer: n_best 0",
        edited("squad", squad(n_best=0), *ANSWER),
        r"squad\.n_best = 0: should be greater than 0",
    ),
    Case(
        "answer: max_answer_len -1",
        edited("squad", squad(max_answer_len=-1), *ANSWER),
        r"squad\.max_answer_len = -1: should be greater than 0",
    ),
    Case(
        "answer: doc_stride a string",
        edited("squad", squad(doc_stride="8"), *ANSWER),
        r"squad\.doc_stride = '8': should be a valid integer",
    ),
    Case(
        "answer: doc_stride 2.5",
        edited("squad", squad(doc_stride=2.5), *ANSWER),
        r"squad\.doc_stride = 2\.5: should be a valid integer",
    ),
    Case(
        "answer: settings a list",
        edited("squad", lambda m: m.update(squad=[8]), *ANSWER),
        r"squad = \[8\]: should be a valid dictionary",
    ),
    Case(
        "answer: an unknown setting",
        edited("squad", squad(stride=8), *ANSWER),
        r"unknown key 'squad\.stride'|squad\.stride",
    ),
    Case(
        "answer: a model without a span head",
        edited("classify", lambda m: m.update(task="squad", squad={}), *ANSWER),
        r"task 'squad' but the model has no span head",
    ),
    Case(
        "answer a classifier",
        lambda sb: edited("classify", lambda m: None, *ANSWER)(sb),
        r"needs a checkpoint of a `task: squad` run .*task='classify'",
    ),
    Case(
        "parse: tree_leaves unknown",
        edited("parse", lambda m: m.update(tree_leaves="leaf"), *PARSE),
        r"tree_leaves = 'leaf': should be 'placeholder' or 'word'",
        stdin=b"a b\n",
    ),
    Case(
        "parse: tree_order a number",
        edited("parse", lambda m: m.update(tree_order=1), *PARSE),
        r"tree_order = 1: should be 'top_down' or 'in_order'",
        stdin=b"a b\n",
    ),
    Case(
        "parse: no tree vocabulary",
        edited("parse", lambda m: m.pop("tree_tokenizer"), *PARSE),
        r"missing key 'tree_tokenizer'",
        stdin=b"a b\n",
    ),
    Case(
        "parse: a tree vocabulary that is not JSON",
        edited("parse", lambda m: m.update(tree_tokenizer="{"), *PARSE),
        r"\(tree_tokenizer\): not a valid tokenizer\.json",
        stdin=b"a b\n",
    ),
    Case(
        "parse: a tree vocabulary of another size",
        lambda sb: edited(
            "parse", lambda m: m.update(tree_tokenizer=(sb.mt / TOKENIZER).read_text()), *PARSE
        )(sb),
        r"the tree vocabulary holds \d+ symbols but the decoder \d+",
        stdin=b"a b\n",
    ),
    Case(
        "parse a translation checkpoint",
        lambda sb: ["parse", s(sb.mt)],
        r"not a parsing checkpoint \(task='mt'",
        stdin=b"a b\n",
    ),
    Case(
        "an unknown task in meta.json",
        edited("mt", lambda m: m.update(task="translation"), "translate", "CKPT"),
        r"task = 'translation': should be 'lm', 'mt', 'parse'",
        stdin=b"a\n",
    ),
    *(
        Case(f"verify: {name}", edited(ckpt, edit, *VERIFY), r"1 of 1 checks failed")
        for name, ckpt, edit in (
            ("2 labels for a 3-way head", "classify", lambda m: m["labels"].pop()),
            ("n_best 0", "squad", squad(n_best=0)),
            ("tree_leaves unknown", "parse", lambda m: m.update(tree_leaves="leaf")),
            ("an unknown task", "mt", lambda m: m.update(task="translation")),
            ("a classifier of 2 classes, 2 labels, over a 3-way head", "classify", two_classes),
            (
                "a feed-forward width the weights do not have",
                "classify",
                lambda m: m["model"].update(d_ff=36),
            ),
        )
    ),
    Case(
        "classify: a model config that does not describe the weights",
        edited("classify", two_classes, *CLASSIFY),
        r"its model config does not describe model\.safetensors \(tensor 'classifier\.weight' has "
        r"shape \(3, 24\) but the model expects \(2, 24\)\)",
        stdin=b"a\tb\n",
    ),
]


def text_file(sb: Sandbox, text: str | bytes) -> str:
    """``text`` in the sandbox's ``text.txt``; its path."""
    path = sb.root / "text.txt"
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    return s(path)


def context(sb: Sandbox) -> str:
    (sb.root / "context.txt").write_text("The king spoke first. Then the queen spoke.\n")
    return s(sb.root / "context.txt")


def deep(depth: int, word: str = "a") -> str:
    return "(S " * depth + f"(NN {word})" + ")" * depth


def trees(hyp: str, ref: str) -> Callable[[Sandbox], list[str]]:
    def argv(sb: Sandbox) -> list[str]:
        (sb.root / "hyp.txt").write_text(hyp + "\n")
        (sb.root / "ref.txt").write_text(ref + "\n")
        return ["parse-eval", s(sb.root / "hyp.txt"), "--ref", s(sb.root / "ref.txt")]

    return argv


TEXT_AND_NUMBERS = [
    Case(
        "classify stdin not UTF-8",
        lambda sb: ["classify", s(sb.classify)],
        r"<stdin>:2: not valid UTF-8 \(byte 0xe9 at column 4\)",
        stdin=b"a\tb\ncaf\xe9\tb\n",
    ),
    Case(
        "classify --input not UTF-8",
        lambda sb: (
            (sb.root / "in.txt").write_bytes(b"ok\n\xff\n"),
            ["classify", s(sb.classify), "--input", s(sb.root / "in.txt")],
        )[1],
        r"in\.txt:2: not valid UTF-8",
    ),
    Case(
        "classify three TAB-separated fields",
        lambda sb: ["classify", s(sb.classify)],
        r"one text or two TAB-separated texts",
        stdin=b"a\tb\tc\n",
    ),
    Case(
        "answer --question not UTF-8",
        lambda sb: [
            "answer",
            s(sb.squad),
            "--context",
            context(sb),
            "--question",
            os.fsdecode(b"who spoke caf\xe9?"),
        ],
        r"--question: not valid UTF-8 \(byte 0xe9 at character 14\)",
    ),
    Case(
        "answer a second --question not UTF-8",
        lambda sb: [
            "answer",
            s(sb.squad),
            "--context",
            context(sb),
            "--question",
            "who?",
            "--question",
            os.fsdecode(b"\xff"),
        ],
        r"--question: not valid UTF-8 \(byte 0xff at character 1\)",
    ),
    Case(
        "answer --context not UTF-8",
        lambda sb: (
            (sb.root / "ctx.txt").write_bytes(b"The king\n\xfe\n"),
            ["answer", s(sb.squad), "--context", s(sb.root / "ctx.txt"), "--question", "who?"],
        )[1],
        r"ctx\.txt:2: not valid UTF-8",
    ),
    Case(
        "answer an empty question",
        lambda sb: ["answer", s(sb.squad), "--context", context(sb), "--question", ""],
        r"--question is empty; ask a question",
    ),
    Case(
        "answer a question of spaces",
        lambda sb: [
            "answer",
            s(sb.squad),
            "--context",
            context(sb),
            "--question",
            "who?",
            "--question",
            "   ",
        ],
        r"--question is empty",
    ),
    Case(
        "answer an empty context",
        lambda sb: (
            (sb.root / "ctx.txt").write_text("\n  \n"),
            ["answer", s(sb.squad), "--context", s(sb.root / "ctx.txt"), "--question", "who?"],
        )[1],
        r"ctx\.txt: the file holds only whitespace",
    ),
    Case(
        "fill-mask stdin not UTF-8",
        lambda sb: ["fill-mask", s(sb.bert)],
        r"<stdin>:2: not valid UTF-8 \(byte 0xe9 at column 4\)",
        stdin=b"a [MASK]\ncaf\xe9 [MASK]\n",
    ),
    Case(
        "fill-mask a line without [MASK]",
        lambda sb: ["fill-mask", s(sb.bert)],
        r"<stdin>:3: no \[MASK\]; mark each word to predict with it",
        stdin=b"the [MASK] spoke\n\nthe king spoke\n",
    ),
    Case(
        "fill-mask a line longer than the model",
        lambda sb: ["fill-mask", s(sb.bert)],
        r"<stdin>:1: \d+ tokens, more than the model's seq_len=32; shorten it",
        stdin=b"the king " * 40 + b"[MASK]\n",
    ),
    Case(
        "fill-mask --top-k 0",
        lambda sb: ["fill-mask", s(sb.bert), "--top-k", "0"],
        r"argument --top-k: must be at least 1, got 0",
        stdin=b"a [MASK]\n",
    ),
    Case(
        "fill-mask --batch-size -1",
        lambda sb: ["fill-mask", s(sb.bert), "--batch-size", "-1"],
        r"argument --batch-size: must be at least 1, got -1",
        stdin=b"a [MASK]\n",
    ),
    Case(
        "fill-mask a classifier",
        lambda sb: ["fill-mask", s(sb.classify)],
        r"needs an encoder with its masked-LM head .*task='classify'",
        stdin=b"a [MASK]\n",
    ),
    Case(
        "fill-mask a translation checkpoint",
        lambda sb: ["fill-mask", s(sb.mt)],
        r"needs an encoder with its masked-LM head .*task='mt'",
        stdin=b"a [MASK]\n",
    ),
    Case(
        "fill-mask --input missing",
        lambda sb: ["fill-mask", s(sb.bert), "--input", s(sb.root / "nope.txt")],
        r"nope\.txt",
    ),
    Case(
        "eval a classifier",
        lambda sb: ["eval", s(sb.classify), "--data", text_file(sb, "The king spoke. The queen spoke.\n")],
        r"this encoder has no masked-LM head \(task='classify'\)",
    ),
    Case(
        "eval --format for a language model",
        lambda sb: ["eval", s(sb.run), "--data", text_file(sb, "a b\n"), "--format", "blocks"],
        r"--format: only for a BERT checkpoint",
    ),
    Case(
        "eval a BERT on an empty file",
        lambda sb: ["eval", s(sb.bert), "--data", text_file(sb, "\n\n")],
        r"text\.txt: no document with tokens",
    ),
    Case(
        "eval a BERT on documents of one sentence",
        lambda sb: ["eval", s(sb.bert), "--data", text_file(sb, "The king spoke.\n\nThe queen spoke.\n")],
        r"text\.txt: no document with tokens \(2 of one sentence left out\)",
    ),
    Case(
        "eval a next-sentence BERT on one document",
        lambda sb: ["eval", s(sb.bert), "--data", text_file(sb, "The king spoke. The queen spoke.\n")],
        r"text\.txt: 1 document of two or more sentences; next-sentence prediction .* needs at least two",
    ),
    Case(
        "eval a BERT on a file not UTF-8",
        lambda sb: ["eval", s(sb.bert), "--data", text_file(sb, b"The king. Caf\xe9 spoke.\n")],
        r"text\.txt:1: not valid UTF-8",
    ),
    Case(
        "eval a BERT with --format wikiextractor on plain text",
        lambda sb: [
            "eval",
            s(sb.bert),
            "--data",
            text_file(sb, "The king spoke. The queen spoke.\n"),
            "--format",
            "wikiextractor",
        ],
        r"text\.txt:1: text outside <doc …> … </doc>",
    ),
    Case(
        "parse stdin not UTF-8",
        lambda sb: ["parse", s(sb.parse)],
        r"<stdin>:3: not valid UTF-8",
        stdin=b"a b\n\nc \xc3(\n",
    ),
    Case(
        "parse --alpha nan",
        lambda sb: ["parse", s(sb.parse), "--alpha", "nan"],
        r"argument --alpha: must be a finite number, got nan",
        stdin=b"a\n",
    ),
    Case(
        "parse --alpha=-inf",
        lambda sb: ["parse", s(sb.parse), "--alpha=-inf"],
        r"argument --alpha: must be a finite number, got -inf",
        stdin=b"a\n",
    ),
    Case(
        "parse --alpha -inf",
        lambda sb: ["parse", s(sb.parse), "--alpha", "-inf"],
        r"argument --alpha: must be a finite number, got -inf",
        stdin=b"a\n",
    ),
    Case(
        "parse --max-len-a inf",
        lambda sb: ["parse", s(sb.parse), "--max-len-a", "inf"],
        r"argument --max-len-a: must be a finite number",
        stdin=b"a\n",
    ),
    Case(
        "parse --max-len-a a word",
        lambda sb: ["parse", s(sb.parse), "--max-len-a", "one"],
        r"argument --max-len-a: must be a number, got 'one'",
        stdin=b"a\n",
    ),
    Case(
        "translate --alpha NaN",
        lambda sb: ["translate", s(sb.mt), "--alpha", "NaN"],
        r"argument --alpha: must be a finite number",
        stdin=b"a\n",
    ),
    Case(
        "a checkpoint argument not UTF-8",
        lambda sb: ["classify", os.fsdecode(s(sb.root).encode() + b"/caf\xe9")],
        r"checkpoint: not valid UTF-8 \(byte 0xe9",
        stdin=b"a\n",
    ),
    Case(
        "an override's value not UTF-8",
        lambda sb: ["train", s(sb.config), os.fsdecode(b"name=caf\xe9")],
        r"override 'name': not valid UTF-8 \(byte 0xe9 at character 4\)",
    ),
    Case(
        "an override's key not UTF-8",
        lambda sb: ["train", s(sb.config), os.fsdecode(b"train.st\xe9ps=3")],
        r"an override's key: not valid UTF-8",
    ),
    Case(
        "parse-eval a file name not UTF-8",
        lambda sb: ["parse-eval", os.fsdecode(b"hyp\xff.txt"), "--ref", "ref.txt"],
        r"hyp: not valid UTF-8 \(byte 0xff at character 4\)",
    ),
]

TREES = [
    Case(
        "parse-eval 5,000 unclosed brackets",
        trees("(S " * 5000, "(S (NN a))"),
        r"hyp\.txt line 1: a bracket opened here is never closed",
    ),
    Case(
        "parse-eval 5,000 nested brackets over other words",
        trees(deep(5000, "b"), deep(3)),
        r"hyp\.txt line 1: the tree's 1 words differ from the reference's 1 at word 1 "
        r"\('b' against 'a'\)",
    ),
    Case(
        "parse-eval a reference nested 100,000 deep, unbalanced",
        trees("(S (NN a))", "(S " * 100_000 + "(NN a)" + ")" * 99_999 + "))"),
        r"ref\.txt line 1: '\)' closes no bracket",
    ),
    Case(
        "parse-eval a word holding brackets",
        trees("(S (XX (a)))", "(S (NN -LRB-a-RRB-))"),
        r"hyp\.txt line 1: the bracket '\(a' has nothing inside",
    ),
    Case(
        "parse-eval two trees on a line",
        trees("(S (NN a)) (S (NN a))", "(S (NN a))"),
        r"hyp\.txt line 1: 2 trees on one line",
    ),
]

ALL = STARTS + TASK_METADATA + TEXT_AND_NUMBERS + TREES


@pytest.mark.parametrize("case", ALL, ids=[c.name for c in ALL])
def test_one_line_error_and_nothing_lost(case, sandbox, capsys, monkeypatch):
    check_case(case, sandbox, capsys, monkeypatch)


def test_every_float_option_of_every_command_is_checked_finite():
    import argparse

    from fullrank.cli import COMMANDS, build_parser
    from fullrank.cli.arguments import finite_float

    floats = []
    for command in COMMANDS:
        parser = build_parser(command).command_parser
        assert parser is not None
        for action in parser._actions:
            assert action.type is not float, f"fullrank {command} {action.option_strings}"
            floats += [action] if action.type is finite_float else []
    assert len(floats) >= 5  # translate and parse --alpha, --max-len-a; generate --temperature
    for text in ("nan", "inf", "-inf", "NaN", "1e400"):
        with pytest.raises(argparse.ArgumentTypeError, match="finite"):
            finite_float(text)
    assert finite_float("0.6") == 0.6


def test_a_negative_number_is_a_value_and_an_option_stays_an_option():
    from fullrank.cli import build_parser

    parser = build_parser("translate")
    args = parser.parse_args(["translate", "ckpt", "--alpha", "-1e-2", "-i", "in.txt", "--max-len-a", "-.5"])
    assert args.alpha == -0.01 and args.input == "in.txt" and args.max_len_a == -0.5
    args = parser.parse_args(["translate", "ckpt", "-iin.txt"])  # a short option with its value
    assert args.input == "in.txt"


def test_the_tree_settings_parse_reads_are_the_ones_the_schema_checks():
    from fullrank.inference.parse import TREE_LEAVES, TREE_ORDER, TREE_VOCABULARY
    from fullrank.training.integrity import ParseMeta

    assert {TREE_VOCABULARY, TREE_LEAVES, TREE_ORDER} <= set(ParseMeta.model_fields)


def test_the_undamaged_checkpoints_work_so_each_error_above_is_the_damage(sandbox, capsys, monkeypatch):
    from fullrank.cli import main
    from fullrank.data.treebank import read_tree_line

    for ckpt in (sandbox.mt, sandbox.parse, sandbox.classify, sandbox.squad, sandbox.bert, sandbox.run):
        assert main(["verify", s(ckpt)]) == 0, capsys.readouterr()
    capsys.readouterr()
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b"")))
    (sandbox.root / "in.txt").write_text("a\tb\nthe king\tthe queen\n")
    assert main(["classify", s(sandbox.classify), "--input", s(sandbox.root / "in.txt")]) == 0
    rows = capsys.readouterr().out.splitlines()
    assert len(rows) == 2 and all(r.split("\t")[0] in LABELS for r in rows)
    assert [f.split("=")[0] for f in rows[0].split("\t")[1:]] == LABELS
    assert (
        main(["answer", s(sandbox.squad), "--context", context(sandbox), "--question", "who spoke first?"])
        == 0
    )
    capsys.readouterr()
    docs = "The king spoke first. Then the queen spoke.\n\nA second story. It has two sentences.\n"
    assert main(["eval", s(sandbox.bert), "--data", text_file(sandbox, docs)]) == 0
    assert "MLM accuracy" in capsys.readouterr().out
    (sandbox.root / "masked.txt").write_text("the [MASK] spoke\n\n[MASK] king [MASK]\n")
    assert (
        main(["fill-mask", s(sandbox.bert), "--input", s(sandbox.root / "masked.txt"), "--top-k", "3"]) == 0
    )
    rows = capsys.readouterr().out.split("\n")
    assert len(rows) == 4 and rows[1] == "" and [len(r.split("\t")) for r in (rows[0], rows[2])] == [2, 3]
    # a word holding brackets is written so that the tree reads back, word for word
    (sandbox.root / "words.txt").write_text("(a) b )\n")
    assert (
        main(
            [
                "parse",
                s(sandbox.parse),
                "--input",
                s(sandbox.root / "words.txt"),
                "--beam",
                "2",
                "-o",
                s(sandbox.root / "trees.txt"),
            ]
        )
        == 0
    )
    line = (sandbox.root / "trees.txt").read_text().splitlines()[0]
    tree = read_tree_line(line, source="x", line_number=1)
    assert tree is not None and tree.leaves() == ["-LRB-a-RRB-", "b", "-RRB-"]
    assert main(["parse-eval", s(sandbox.root / "trees.txt"), "--ref", s(sandbox.root / "trees.txt")]) == 0
    assert "100.00" in capsys.readouterr().out
    assert main(["train", s(classify_config(sandbox, sandbox.classify)), "--quiet"]) == 0


def test_parse_eval_scores_trees_nested_beyond_the_recursion_limit(sandbox, capsys):
    from fullrank.cli import main

    assert main(trees(deep(5000), deep(5000))(sandbox)) == 0
    assert "100.00" in capsys.readouterr().out
