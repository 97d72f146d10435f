"""A tiny parsing run through the CLI: train → parse → parse-eval, and bad input as one line."""

from __future__ import annotations

import io
import json
import random
import sys

import pytest

from fullrank.cli import main
from fullrank.data.treebank import Tree, read_tree_line
from fullrank.training.checkpoints import read_meta

NOUNS = "dog cat man house car".split()


def one_tree(line: str, *, source: str, line_number: int) -> Tree:
    """The tree on a line that is not empty (where read_tree_line gives None)."""
    tree = read_tree_line(line, source=source, line_number=line_number)
    assert tree is not None
    return tree


def noun_phrase(rng: random.Random, tag: str = "NP") -> str:
    if rng.random() < 0.3:
        return f"({tag} (NNP {rng.choice(['John', 'Mary'])}))"
    adj = f" (JJ {rng.choice(['big', 'red'])})" if rng.random() < 0.3 else ""
    return f"({tag} (DT {rng.choice(['the', 'a'])}){adj} (NN {rng.choice(NOUNS)}))"


def sentence(rng: random.Random) -> str:
    """A random treebank-style tree: function tags, an occasional trace, final punctuation."""
    verb = rng.choice(["sees", "likes", "runs"])
    vp = f"(VP (VBZ {verb})"
    if verb != "runs":
        vp += " " + noun_phrase(rng)
    if rng.random() < 0.4:
        vp += f" (PP-LOC (IN {rng.choice(['in', 'with'])}) {noun_phrase(rng)})"
    if rng.random() < 0.2:
        vp += " (S (-NONE- *T*-1))"
    return f"( (S {noun_phrase(rng, 'NP-SBJ')} {vp}) (. .)) )"


def write_treebank(root, n_files: int = 10, per_file: int = 30) -> None:
    rng = random.Random(0)
    for f in range(1, n_files + 1):
        trees = [sentence(rng) for _ in range(per_file)]
        (root / f"wsj_{f:04d}.mrg").write_text("\n".join(trees) + "\n")


CONFIG = """
name: tiny_parse
task: parse
out_dir: {out}
model: {{d_model: 24, n_heads: 3, d_head: 10, d_value: 6, d_ff: 37, n_layers: 1,
         n_decoder_layers: 2, max_len: 48, seq_len: 16, dropout: 0.0}}
data: {{root: {root}, train: "wsj_{{0001..0008}}.mrg", valid: wsj_0009.mrg, test: wsj_0010.mrg,
        tokenizer: word, min_frequency: 2, max_tokens: 512, max_sentence_len: 40,
        cache_dir: {out}/cache}}
train: {{steps: 12, lr: 2.0, schedule: noam, warmup: 6, label_smoothing: 0.1, eval_every: 6,
         save_every: 4, keep_last: 3, log_every: 4, threads: 1}}
decode: {{beam: 4, alpha: 0.3, b: 300, average_last: 3, batch_size: 7}}
"""


def assert_trees_over_the_words(run, n: int | None = None) -> None:
    """Every test-file output of ``run`` is a tree over its gold tree's words."""
    gold = (run / "data" / "test.gold").read_text().splitlines()
    parsed = (run / "parses" / "test.last.trees").read_text().splitlines()
    assert len(gold) == len(parsed) == (n or len(gold))
    for g, p in zip(gold, parsed):
        ours, theirs = (read_tree_line(x, source=w, line_number=1) for x, w in ((p, "out"), (g, "gold")))
        assert ours is not None and theirs is not None and ours.leaves() == theirs.leaves()


@pytest.fixture(scope="module")
def parse_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("treebank")
    write_treebank(root)
    cfg = root / "parse.yaml"
    cfg.write_text(CONFIG.format(out=root / "runs", root=root))
    assert main(["train", str(cfg), "--quiet"]) == 0
    return root, root / "runs" / "tiny_parse"


def test_the_recipe_scores_dev_and_test_with_the_last_and_averaged_models(parse_run, capsys):
    _, run = parse_run
    results = json.loads((run / "results.json").read_text())["extra"]["parse"]
    assert {"valid.last", "valid.avg3", "test.last", "test.avg3"} <= set(results)
    test = results["test.last"]
    assert 0.0 <= test["all"]["f1"] <= 100.0 and "len<=40" in test
    assert test["repaired"] == 0.0 and test["sentences_per_s"] > 0  # constrained search
    assert "not WSJ section 23" in results["note"]
    assert_trees_over_the_words(run, 30)


def test_parse_writes_one_tree_per_line_and_keeps_empty_lines(parse_run, tmp_path, capsys, monkeypatch):
    _, run = parse_run
    lines = ["the dog sees a cat .", "", "Zork ( runs ) quickly .", "John runs ."]
    monkeypatch.setattr(sys, "stdin", io.StringIO("\n".join(lines) + "\n"))
    assert main(["parse", str(run), "--beam", "3"]) == 0
    captured = capsys.readouterr()
    out = captured.out.split("\n")[:-1]
    assert len(out) == 4 and out[1] == ""
    for line, tree in zip(lines, out):
        if line:
            words = [{"(": "-LRB-", ")": "-RRB-"}.get(w, w) for w in line.split()]
            assert one_tree(tree, source="out", line_number=1).leaves() == words
    assert "parsed 3 sentences" in captured.err
    # the [V17] settings by default (beam 21, α 0.3, +300), from and to files
    (tmp_path / "in.txt").write_text("a man likes the house .\n")
    assert main(["parse", str(run), "-i", str(tmp_path / "in.txt"), "-o", str(tmp_path / "out.txt")]) == 0
    assert (tmp_path / "out.txt").read_text().startswith("(")


def test_the_word_scheme_and_unconstrained_search(parse_run, tmp_path, capsys, monkeypatch):
    root, run = parse_run
    assert (
        main(
            [
                "train",
                str(root / "parse.yaml"),
                "data.tree_leaves=word",
                "name=tiny_words",
                "decode.average_last=0",
                "--quiet",
            ]
        )
        == 0
    )
    words_run = root / "runs" / "tiny_words"
    latest = (words_run / "checkpoints" / "latest").read_text().strip()
    assert read_meta(words_run / "checkpoints" / latest)["tree_leaves"] == "word"
    sources = (words_run / "data" / "train.words").read_text().splitlines()
    targets = (words_run / "data" / "train.trees").read_text().splitlines()
    for s, t in zip(sources, targets):  # the words in order where the tags were
        assert [w for w in t.split() if w[0] not in "()"] == s.split()
    results = json.loads((words_run / "results.json").read_text())["extra"]["parse"]
    assert results["test.last"]["repaired"] == 0.0
    assert_trees_over_the_words(words_run)
    capsys.readouterr()
    # both checkpoints parse freely too; stderr counts the outputs that needed repair
    for r in (run, words_run):
        monkeypatch.setattr(sys, "stdin", io.StringIO("the dog sees a cat .\nJohn runs .\n"))
        assert main(["parse", str(r), "--unconstrained", "--beam", "2"]) == 0
        captured = capsys.readouterr()
        assert len(captured.out.splitlines()) == 2 and "parsed 2 sentences;" in captured.err
        for line, tree in zip(["the dog sees a cat .", "John runs ."], captured.out.splitlines()):
            assert one_tree(tree, source="out", line_number=1).leaves() == line.split()


def test_unknown_words_go_in_as_their_signatures(parse_run, tmp_path, capsys, monkeypatch):
    root, _ = parse_run
    assert (
        main(
            [
                "train",
                str(root / "parse.yaml"),
                "data.tree_leaves=word",
                "name=tiny_sigs",
                "data.unknown_words=signature",
                "data.min_frequency=100",
                "data.word_dropout=0.25",
                "decode.average_last=0",
            ]
        )
        == 0
    )
    assert "word dropout to signatures, α=0.25" in capsys.readouterr().out
    run = root / "runs" / "tiny_sigs"
    data = run / "data"
    # the sentences stay as they are; the vocabulary's text and the trees hold the signatures
    words = (data / "train.words").read_text().splitlines()
    assert not any("<unk" in line for line in words)
    sources = (data / "train.source").read_text().splitlines()
    assert len(sources) == len(words) and any("<unk-INITC>" in line for line in sources)
    vocab = json.loads((run / "tokenizer.json").read_text())["model"]["vocab"]
    assert "<unk-LC>" in vocab and "<unk-INITC>" in vocab
    targets = (data / "train.trees").read_text().splitlines()
    for w, s, t in zip(words, sources, targets):  # the leaves: the words as the model reads them
        assert [x for x in t.split() if x[0] not in "()"] == [
            sig if sig in vocab else word for word, sig in zip(w.split(), s.split())
        ]
    assert_trees_over_the_words(run)  # over the input's own words, not their signatures
    capsys.readouterr()
    monkeypatch.setattr(sys, "stdin", io.StringIO("Zorba likes the zebras .\n"))
    assert main(["parse", str(run), "--beam", "2"]) == 0
    tree = one_tree(capsys.readouterr().out.strip(), source="out", line_number=1)
    assert tree.leaves() == "Zorba likes the zebras .".split()


@pytest.fixture(scope="module", params=["placeholder", "word"])
def cursor_run(parse_run, request):
    """A run on in-order trees with ``XX`` (the recipe's) or the words as leaves, and a decoder
    told its next word; with what stands for each word in its trees."""
    root, _ = parse_run
    name = f"tiny_cursor_{request.param}"
    assert (
        main(
            [
                "train",
                str(root / "parse.yaml"),
                f"data.tree_leaves={request.param}",
                f"name={name}",
                "data.tree_order=in_order",
                "model.decoder_cursor=true",
                "decode.average_last=0",
                "--quiet",
            ]
        )
        == 0
    )
    return root / "runs" / name, request.param


def test_in_order_trees_and_a_decoder_told_its_next_word(parse_run, cursor_run, capsys, monkeypatch):
    root, (run, leaves) = parse_run[0], cursor_run
    latest = (run / "checkpoints" / "latest").read_text().strip()
    assert read_meta(run / "checkpoints" / latest)["tree_order"] == "in_order"
    sources = (run / "data" / "train.words").read_text().splitlines()
    for s, t in zip(sources, (run / "data" / "train.trees").read_text().splitlines()):
        first = s.split()[0] if leaves == "word" else "XX"
        assert t.split()[0] == first and t.split()[1][0] == "("  # the first word, named
    results = json.loads((run / "results.json").read_text())["extra"]["parse"]
    assert results["test.last"]["repaired"] == 0.0
    assert_trees_over_the_words(run)
    # the command reads the checkpoint's order: the same trees as the run's own scoring
    assert (
        main(
            [
                "parse",
                str(run),
                "-i",
                str(run / "data" / "test.words"),
                "-o",
                str(run / "again.trees"),
                "--beam",
                "4",
                "--batch-size",
                "7",
            ]
        )
        == 0
    )
    assert (run / "again.trees").read_text() == (run / "parses" / "test.last.trees").read_text()
    capsys.readouterr()
    monkeypatch.setattr(sys, "stdin", io.StringIO("the dog sees a cat .\n"))
    assert main(["parse", str(run), "--beam", "2"]) == 0
    tree = one_tree(capsys.readouterr().out.strip(), source="out", line_number=1)
    assert tree.leaves() == "the dog sees a cat .".split()
    # decoding freely, the model counts the words it wrote itself: a tree over the words
    monkeypatch.setattr(sys, "stdin", io.StringIO("the dog sees a cat .\n"))
    assert main(["parse", str(run), "--unconstrained"]) == 0
    tree = one_tree(capsys.readouterr().out.strip(), source="out", line_number=1)
    assert tree.leaves() == "the dog sees a cat .".split()
    # an ensemble needs one vocabulary and one kind of leaves
    monkeypatch.setattr(sys, "stdin", io.StringIO("the dog sees a cat .\n"))
    assert main(["parse", str(run), str(root / "runs" / "tiny_parse")]) == 2
    assert "different vocabularies or tree settings; an ensemble" in one_line_error(capsys)


def test_attention_maps_and_head_statistics_of_a_parser(cursor_run, tmp_path, capsys):
    from fullrank.analysis.inputs import parse_batch
    from fullrank.models import EncoderDecoder
    from fullrank.training.checkpoints import load_checkpoint

    run, leaves = cursor_run
    words, gold = run / "data" / "test.words", run / "data" / "test.gold"
    # teacher-forced on the gold trees: the targets the model was trained on, and the next
    # word it counts at each of them
    ckpt = load_checkpoint(run)
    sentences = words.read_text().splitlines()[:5]
    trees = [one_tree(t, source="gold", line_number=1) for t in gold.read_text().splitlines()[:5]]
    batch, symbols = parse_batch(ckpt, sentences, trees, where=["gold"] * 5)
    expected = (run / "data" / "test.trees").read_text().splitlines()[:5]
    model = ckpt.model
    assert isinstance(model, EncoderDecoder) and batch.tgt is not None

    def token(i: int) -> str:
        t = symbols.id_to_token(i)
        assert t is not None
        return t

    for row, cursor, want in zip(batch.tgt, model.cursor(batch.tgt), expected):
        tokens = [token(int(i)) for i in row[1:] if i != symbols.pad_id]
        unk = token(symbols.unk_id)
        assert tokens == [t if symbols.token_to_id(t) is not None else unk for t in want.split()]
        placed = [0] + [
            sum(not t.startswith(("(", ")")) for t in tokens[: k + 1]) for k in range(len(tokens))
        ]
        assert cursor[: len(placed)].tolist() == placed  # BOS, then words placed so far

    maps = tmp_path / "cross.png"
    assert (
        main(
            [
                "attention",
                str(run),
                "--text",
                sentences[0],
                "--view",
                "cross",
                "--target",
                gold.read_text().splitlines()[0],
                "-o",
                str(maps),
            ]
        )
        == 0
    )
    assert f"(target: {expected[0]})" in capsys.readouterr().out
    assert maps.stat().st_size > 0 and (tmp_path / "cross-lines.png").stat().st_size > 0
    # by default the model's own greedy parse is teacher-forced
    assert (
        main(
            [
                "attention",
                str(run),
                "--text",
                "the dog sees a cat .",
                "--view",
                "decoder",
                "-o",
                str(tmp_path / "self.png"),
            ]
        )
        == 0
    )
    assert f"(target: {'the' if leaves == 'word' else 'XX'} " in capsys.readouterr().out
    out = tmp_path / "heads.png"
    assert (
        main(
            ["heads", str(run), "--data", str(words), "--ref", str(gold), "--sequences", "4", "-o", str(out)]
        )
        == 0
    )
    rows = out.with_suffix(".csv").read_text().splitlines()
    modules = {r.split(",")[0] for r in rows[1:]}
    assert {"encoder.0.self_attn", "decoder.0.self_attn", "decoder.0.cross_attn"} <= modules
    # bad input: one line each
    assert (
        main(
            [
                "attention",
                str(run),
                "--text",
                "the dog sees a cat .",
                "--target",
                "(S (NP (DT a) (NN cat)))",
                "-o",
                str(tmp_path / "x.png"),
            ]
        )
        == 2
    )
    assert "--target: the tree's words (a cat) are not the sentence's" in one_line_error(capsys)
    (tmp_path / "short.gold").write_text(gold.read_text().splitlines()[0] + "\n")
    assert (
        main(
            [
                "heads",
                str(run),
                "--data",
                str(words),
                "--ref",
                str(tmp_path / "short.gold"),
                "-o",
                str(out),
                "--overwrite",
            ]
        )
        == 2
    )
    assert "give one tree per sentence, in the same order" in one_line_error(capsys)


def test_several_checkpoints_parse_as_an_ensemble(parse_run, capsys, monkeypatch):
    _, run = parse_run
    lines = "the dog sees a cat .\nJohn runs .\n"
    outs = []
    for ckpts in ([run], [run, run], [run, run / "averaged-last3"]):
        monkeypatch.setattr(sys, "stdin", io.StringIO(lines))
        assert main(["parse", *map(str, ckpts), "--beam", "3"]) == 0
        outs.append(capsys.readouterr().out.splitlines())
    assert outs[1] == outs[0]  # an ensemble of one model twice is that model
    for line, tree in zip(lines.splitlines(), outs[2]):
        assert one_tree(tree, source="out", line_number=1).leaves() == line.split()


def test_parse_eval_prints_the_table(parse_run, capsys):
    _, run = parse_run
    gold = run / "data" / "test.gold"
    assert main(["parse-eval", str(run / "parses" / "test.last.trees"), "--ref", str(gold)]) == 0
    table = capsys.readouterr().out
    assert "F1" in table and "exact match" in table and "≤40 words" in table
    assert main(["parse-eval", str(gold), "--ref", str(gold), "--per-sentence"]) == 0
    out = capsys.readouterr().out
    assert "F1                      100.00      100.00" in out and "line" in out.splitlines()[0]


def one_line_error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err
    return err


def test_bad_input_is_one_line(parse_run, tmp_path, capsys, monkeypatch):
    root, run = parse_run
    gold = run / "data" / "test.gold"
    # a tree whose leaves are not the reference's sentence
    trees = gold.read_text().splitlines()
    wrong = one_tree(trees[4], source="gold", line_number=5)
    wrong.preterminals()[0].children = ["xyz"]
    trees[4] = wrong.to_string()
    (tmp_path / "hyp.txt").write_text("\n".join(trees) + "\n")
    assert main(["parse-eval", str(tmp_path / "hyp.txt"), "--ref", str(gold)]) == 2
    err = one_line_error(capsys)
    assert f"{tmp_path / 'hyp.txt'} line 5: the tree's" in err and "words differ" in err
    # a malformed tree in the file to score
    trees[4] = trees[4][:-1]
    (tmp_path / "hyp.txt").write_text("\n".join(trees) + "\n")
    assert main(["parse-eval", str(tmp_path / "hyp.txt"), "--ref", str(gold)]) == 2
    assert "hyp.txt line 5: a bracket opened here is never closed" in one_line_error(capsys)
    # a sentence longer than the model's max_len (48 positions)
    monkeypatch.setattr(sys, "stdin", io.StringIO("the dog runs .\n" + "dog " * 60 + "\n"))
    assert main(["parse", str(run)]) == 2
    assert "line 2: 61 source tokens exceed the model's max_len=48" in one_line_error(capsys)
    # a malformed tree in the training data: its file and line
    (root / "broken").mkdir()
    (root / "broken" / "wsj_0001.mrg").write_text(
        "( (S (NP (DT a) (NN b)) (VP (VBZ c))) )\n( (S (NP (DT a)) (VP (VBZ c)) (NN d e)) )\n"
    )
    cfg = root / "parse.yaml"
    assert (
        main(
            [
                "train",
                str(cfg),
                f"data.root={root / 'broken'}",
                "data.train=wsj_0001.mrg",
                "name=broken",
                "--quiet",
            ]
        )
        == 2
    )
    err = one_line_error(capsys)
    assert f"{root / 'broken' / 'wsj_0001.mrg'} line 2: two words under the tag 'NN'" in err
    # a checkpoint of another task
    from fullrank.errors import CheckpointError
    from fullrank.inference.parse import tree_vocabulary

    with pytest.raises(CheckpointError, match="not a parsing checkpoint"):
        tree_vocabulary({"task": "mt"}, "ckpt")
