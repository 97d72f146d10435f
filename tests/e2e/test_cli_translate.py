"""A tiny translation run through the CLI: train → translate → average → bleu."""

from __future__ import annotations

import json
import random

import pytest
import torch

from fullrank.cli import main
from tests.robustness.damage import write_meta

WORDS = "the a man woman dog cat sees runs big small red blue house car".split()


def write_corpus(root, splits) -> None:
    """Write ``root/{split}.en`` and ``.de`` for each ``(split, n_pairs, seed)``: random word
    sequences and their reversal (the "translation")."""
    for split, n, seed in splits:
        rng = random.Random(seed)
        src = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 6))) for _ in range(n)]
        tgt = [" ".join(reversed(s.split())) for s in src]
        (root / f"{split}.en").write_text("\n".join(src) + "\n")
        (root / f"{split}.de").write_text("\n".join(tgt) + "\n")


def test_train_translate_average_bleu(tmp_path, capsys, monkeypatch, two_threads):
    write_corpus(tmp_path, (("train", 600, 0), ("val", 40, 1), ("test", 30, 2), ("other", 9, 3)))
    cfg = tmp_path / "mt.yaml"
    cfg.write_text(f"""
name: tiny_mt
task: mt
out_dir: {tmp_path / "runs"}
model: {{d_model: 24, n_heads: 3, d_head: 10, d_value: 6, d_ff: 37, n_layers: 1,
         n_decoder_layers: 2, max_len: 64, seq_len: 8, dropout: 0.0}}
data: {{root: {tmp_path}, train: train, valid: val, test: test, src_lang: en, tgt_lang: de,
        tokenizer: bpe, vocab_size: 60, max_tokens: 256, max_sentence_len: 20,
        cache_dir: {tmp_path / "cache"}, eval_sets: {{other: other}}}}
train: {{steps: 16, lr: 2.0, schedule: noam, warmup: 8, label_smoothing: 0.1, eval_every: 8,
         save_every: 4, keep_last: 3, log_every: 4, threads: 1}}
decode: {{beam: 3, alpha: 0.6, average_last: 3, splits: [test, other], batch_size: 7,
         workers: 2, processes: true}}
""")
    assert main(["train", str(cfg), "--quiet"]) == 0
    assert torch.get_num_threads() == 2  # train.threads=1 held for the run only
    out = capsys.readouterr().out
    assert "test (last)" in out and "test (avg3)" in out and "nrefs:1|case:mixed" in out
    run = tmp_path / "runs" / "tiny_mt"
    results = json.loads((run / "results.json").read_text())
    assert {"test.last", "test.avg3", "other.last", "other.avg3"} <= set(results["extra"]["bleu"])
    # an evaluation-only set is translated in full, in order
    assert "other (avg3)" in out
    assert len((run / "translations" / "other.last.de").read_text().splitlines()) == 9

    # translate: one output line per input line, empty lines stay empty, order kept
    lines = ["the big dog", "", "a red car sees the small house", "cat"]
    (tmp_path / "in.txt").write_text("\n".join(lines) + "\n")
    assert (
        main(
            [
                "translate",
                str(run),
                "-i",
                str(tmp_path / "in.txt"),
                "-o",
                str(tmp_path / "out.txt"),
                "--beam",
                "4",
                "--batch-size",
                "2",
            ]
        )
        == 0
    )
    outputs = (tmp_path / "out.txt").read_text().split("\n")[:-1]
    assert len(outputs) == 4 and outputs[1] == ""
    # two workers (two batches decoded side by side in threads): the same translations
    assert (
        main(
            [
                "translate",
                str(run),
                "-i",
                str(tmp_path / "in.txt"),
                "-o",
                str(tmp_path / "workers.txt"),
                "--beam",
                "4",
                "--batch-size",
                "1",
                "--workers",
                "2",
            ]
        )
        == 0
    )
    assert (tmp_path / "workers.txt").read_text() == (tmp_path / "out.txt").read_text()
    # ... and in two forked processes, the three lines (more than one batch at --batch-size 2)
    # shared out between them as batches of 2 and 1
    assert (
        main(
            [
                "translate",
                str(run),
                "-i",
                str(tmp_path / "in.txt"),
                "-o",
                str(tmp_path / "processes.txt"),
                "--beam",
                "4",
                "--batch-size",
                "2",
                "--workers",
                "2",
                "--processes",
            ]
        )
        == 0
    )
    assert (tmp_path / "processes.txt").read_text() == (tmp_path / "out.txt").read_text()
    # each line translated alone gives the same result (batching and sorting are invisible)
    for i, line in enumerate(lines):
        (tmp_path / "one.txt").write_text(line + "\n")
        main(
            [
                "translate",
                str(run),
                "-i",
                str(tmp_path / "one.txt"),
                "-o",
                str(tmp_path / "o.txt"),
                "--overwrite",
            ]
        )
        assert (tmp_path / "o.txt").read_text() == outputs[i] + "\n"

    # --compile: one step function for the whole input, used for every step, and the same
    # translations. The function is the model's own decode here: that compiled decoding equals
    # eager decoding under the engine's decoder is tests/fast/test_decoders.py's (tracing this
    # model would take a minute), and code generation bench/decode.py --compile's
    import fullrank.inference.translate as translate_module

    compiled: list[object] = []
    steps = [0]

    def traced(model):
        compiled.append(model)

        def decode(*args, **kwargs):
            steps[0] += 1
            return model.decode(*args, **kwargs)

        return decode

    monkeypatch.setattr(translate_module, "compiled_decode", traced)
    assert (
        main(
            [
                "translate",
                str(run),
                "-i",
                str(tmp_path / "in.txt"),
                "-o",
                str(tmp_path / "compiled.txt"),
                "--beam",
                "4",
                "--compile",
            ]
        )
        == 0
    )
    assert len(compiled) == 1 and steps[0] > 0  # one step function for the whole input, used
    assert (
        main(
            [
                "translate",
                str(run),
                "-i",
                str(tmp_path / "in.txt"),
                "-o",
                str(tmp_path / "eager.txt"),
                "--beam",
                "4",
            ]
        )
        == 0
    )
    assert (tmp_path / "compiled.txt").read_text() == (tmp_path / "eager.txt").read_text()

    assert main(["average", str(run), "--last", "3", "-o", str(tmp_path / "avg")]) == 0
    assert "averaged 3 checkpoints" in capsys.readouterr().out
    assert (
        main(
            [
                "translate",
                str(tmp_path / "avg"),
                "-i",
                str(tmp_path / "in.txt"),
                "-o",
                str(tmp_path / "avg.txt"),
                "--n-best",
                "2",
            ]
        )
        == 0
    )
    assert all(len(x.split("\t")) == 2 for x in (tmp_path / "avg.txt").read_text().splitlines() if x)

    # an ensemble: a model with itself finds the model's own n-best lists (16 steps of training
    # make the best translation mostly empty; the n-best lists are not); with another model, one
    # line of n-best translations per input line
    nbest = ["-i", str(tmp_path / "in.txt"), "--beam", "4", "--n-best", "3"]
    assert main(["translate", str(run), *nbest, "-o", str(tmp_path / "alone.txt")]) == 0
    assert main(["translate", str(run), str(run), *nbest, "-o", str(tmp_path / "self.txt")]) == 0
    alone = (tmp_path / "alone.txt").read_text()
    assert (tmp_path / "self.txt").read_text() == alone and alone.replace("\t", "").strip()
    assert main(["translate", str(run), str(tmp_path / "avg"), *nbest, "-o", str(tmp_path / "ens.txt")]) == 0
    ensembled = (tmp_path / "ens.txt").read_text().split("\n")[:-1]
    assert len(ensembled) == 4 and all(len(x.split("\t")) == 3 for x in ensembled)
    # members with different tokenizers: a one-line error naming both
    import shutil

    from fullrank.data.tokenizers import Tokenizer
    from fullrank.training.integrity import digest

    other = tmp_path / "other_tok"
    shutil.copytree(tmp_path / "avg", other)
    # another tokenizer of the model's size (a smaller one is refused when the checkpoint loads)
    lowercased = Tokenizer.train("bpe", sorted(tmp_path.glob("train.*")), vocab_size=60, lowercase=True)
    assert lowercased.vocab_size == 60
    lowercased.save(other / "tokenizer.json")
    meta = json.loads((other / "meta.json").read_text())  # recorded, as a re-saved checkpoint
    meta["files"]["tokenizer.json"] = digest(other / "tokenizer.json")
    write_meta(other, meta)
    capsys.readouterr()
    assert main(["translate", str(run), str(other), "-i", str(tmp_path / "in.txt")]) == 2
    err = capsys.readouterr().err
    assert "different tokenizers" in err and "other_tok" in err

    assert main(["bleu", str(tmp_path / "out.txt"), "--ref", str(tmp_path / "in.txt")]) == 0
    printed = capsys.readouterr()
    assert "sacreBLEU" in printed.out and "chrF" in printed.out
    assert "tokenized BLEU, lowercased" in printed.out
    # in.txt names no language: the Moses tokenizer's English rules, and a note saying so
    assert "Moses-tokenized BLEU, lowercased" in printed.out and "-l en" in printed.out
    assert "--lang" in printed.err
    assert main(["bleu", str(tmp_path / "out.txt"), "--ref", str(tmp_path / "in.txt"), "--lang", "de"]) == 0
    printed = capsys.readouterr()
    assert "-l de" in printed.out and printed.err == ""
    assert (
        main(
            [
                "bleu",
                str(tmp_path / "out.txt"),
                "--ref",
                str(tmp_path / "in.txt"),
                "--lang",
                "de",
                "--baseline",
                str(tmp_path / "in.txt"),
                "--resamples",
                "50",
            ]
        )
        == 0
    )
    printed = capsys.readouterr().out
    assert "paired bootstrap against" in printed and "bs:50" in printed
    (tmp_path / "one_line.txt").write_text("ein satz\n")
    assert (
        main(
            [
                "bleu",
                str(tmp_path / "out.txt"),
                "--ref",
                str(tmp_path / "in.txt"),
                "--baseline",
                str(tmp_path / "one_line.txt"),
            ]
        )
        == 2
    )
    printed = capsys.readouterr()  # refused before any score is printed
    assert "has 1 lines and" in printed.err and "line by line" in printed.err and printed.out == ""
    bleu = ["bleu", str(tmp_path / "out.txt"), "--ref", str(tmp_path / "in.txt")]
    assert main([*bleu, "--resamples", "5"]) == 2
    assert "give --baseline too" in capsys.readouterr().err
    assert main([*bleu, "--baseline", str(tmp_path / "out.txt"), "--resamples", "0"]) == 2
    assert "--resamples must be from 1 to 1,000,000" in capsys.readouterr().err
    assert main(["translate", str(tmp_path / "runs"), "-i", str(tmp_path / "in.txt")]) == 2


def small_config(tmp_path, *, test: bool = True, data: str = "", rest: str = ""):
    """A tiny translation config over ``write_corpus``'s files; ``data`` adds keys to its data
    section, ``rest`` adds sections."""
    cfg = tmp_path / "mt.yaml"
    cfg.write_text(f"""
name: tiny_mt
task: mt
out_dir: {tmp_path / "runs"}
model: {{d_model: 16, n_heads: 2, d_ff: 32, n_layers: 1, max_len: 64, seq_len: 8}}
data: {{root: {tmp_path}, train: train, valid: val, {"test: test, " if test else ""}src_lang: en,
        tgt_lang: de, tokenizer: bpe, vocab_size: 60, cache_dir: {tmp_path / "cache"}{data}}}
train: {{steps: 4, threads: 1}}
{rest}
""")
    return cfg


def test_a_missing_evaluation_set_fails_before_training(tmp_path, capsys):
    write_corpus(tmp_path, (("train", 50, 0), ("val", 5, 1), ("test", 5, 2)))
    cfg = small_config(
        tmp_path, data=", eval_sets: {news: wmt/newstest2013}", rest="decode: {splits: [test, news]}"
    )
    assert main(["train", str(cfg), "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "newstest2013.en" in err[0]
    assert not (tmp_path / "runs" / "tiny_mt").exists()


def test_a_split_without_data_is_reported_not_silently_skipped(tmp_path, capsys):
    write_corpus(tmp_path, (("train", 50, 0), ("val", 5, 1)))
    cfg = small_config(tmp_path, test=False, rest="decode: {average_last: 1}")
    assert main(["train", str(cfg), "--quiet"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "valid (last)" in out
    assert "not scored: decode.splits names 'test'" in out and "set data.test" in out


def test_a_source_too_long_to_translate_fails_before_training(tmp_path, capsys):
    write_corpus(tmp_path, (("train", 50, 0), ("val", 5, 1), ("test", 5, 2)))
    with open(tmp_path / "test.en", "a") as f:  # one long source line, and its reference
        f.write("the big dog sees a red car " * 12 + "\n")
    with open(tmp_path / "test.de", "a") as f:
        f.write("x\n")
    cfg = small_config(tmp_path)
    assert main(["train", str(cfg), "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "'test' line 6" in err[0] and "model.max_len=64" in err[0]
    assert not list((tmp_path / "runs" / "tiny_mt").glob("checkpoints/*"))
    # with the long line left out of the scored splits, the same config trains
    assert main(["train", str(cfg), "--quiet", "decode.splits=[valid]"]) == 0


def test_alpha_is_chosen_on_valid_and_applied_to_the_other_splits(tmp_path, capsys):
    write_corpus(tmp_path, (("train", 300, 0), ("val", 12, 1), ("test", 8, 2)))
    cfg = small_config(tmp_path, rest="decode: {average_last: 1, beam: 3, tune_alpha: [0.0, 0.6, 3.0, 0.6]}")
    # trained enough that the length penalty changes the outputs
    assert main(["train", str(cfg), "--quiet", "train.steps=40", "train.lr=2.0", "train.warmup=8"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    run = tmp_path / "runs" / "tiny_mt"
    bleu = json.loads((run / "results.json").read_text())["extra"]["bleu"]
    tuned = bleu["valid.last.tune_alpha"]
    dev = tuned["bleu"]
    assert list(dev) == ["0", "0.6", "3"]  # each α once, in the order given
    # decode.alpha's valid result is reused, not decoded again
    assert dev["0.6"] == bleu["valid.last"]["tokenized_lowercased"]
    assert {f.name for f in (run / "translations").glob("valid.last.alpha*")} == {
        "valid.last.alpha0.de",
        "valid.last.alpha3.de",
    }
    assert tuned["best"] == [0.0, 0.6, 3.0][list(dev.values()).index(max(dev.values()))]
    assert f"→ α {tuned['best']:g}" in out and "chosen on valid" in out
    assert "valid.last.tuned" not in bleu and bleu["test.last.tuned"]["alpha"] == tuned["best"]
    # the tuned test output is what `translate` gives at that α
    assert (
        main(
            [
                "translate",
                str(run),
                "-i",
                str(tmp_path / "test.en"),
                "-o",
                str(tmp_path / "t.de"),
                "--beam",
                "3",
                "--alpha",
                str(tuned["best"]),
            ]
        )
        == 0
    )
    assert (run / "translations" / "test.last.tuned.de").read_text() == (tmp_path / "t.de").read_text()


def test_alpha_tuning_needs_a_valid_split_and_exponents_at_least_zero(tmp_path, capsys):
    write_corpus(tmp_path, (("train", 50, 0), ("val", 5, 1), ("test", 5, 2)))
    cfg = small_config(tmp_path, rest="decode: {tune_alpha: [0.6, -1.0]}")
    assert main(["train", str(cfg), "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "decode.tune_alpha" in err[0] and "-1.0" in err[0]
    cfg = small_config(tmp_path, rest="decode: {tune_alpha: [0.6, 1.0]}")
    assert main(["train", str(cfg), "--quiet", "data.valid="]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "data.valid is not set" in err[0]


def test_a_tuned_alpha_equal_to_decode_alpha_reuses_the_decoded_splits(tmp_path, capsys, monkeypatch):
    import fullrank.recipes.mt as mt

    calls = []
    real = mt.evaluate_bleu

    def evaluate_bleu(*a, **k):
        calls.append(a[-2].name)
        return real(*a, **k)

    monkeypatch.setattr(mt, "evaluate_bleu", evaluate_bleu)
    write_corpus(tmp_path, (("train", 50, 0), ("val", 6, 1), ("test", 5, 2)))
    cfg = small_config(tmp_path, rest="decode: {average_last: 1, tune_alpha: [0.6]}")
    assert main(["train", str(cfg), "--quiet", "train.steps=4"]) == 0
    run = tmp_path / "runs" / "tiny_mt"
    bleu = json.loads((run / "results.json").read_text())["extra"]["bleu"]
    assert bleu["valid.last.tune_alpha"]["best"] == 0.6
    assert bleu["test.last.tuned"] == {**bleu["test.last"], "alpha": 0.6}
    assert sorted(calls) == ["test.last.de", "valid.last.de"]  # each split decoded once
    assert (run / "translations" / "test.last.tuned.de").read_text() == (
        run / "translations" / "test.last.de"
    ).read_text()


def test_no_decode_splits_means_nothing_is_decoded_or_tuned(tmp_path, capsys, monkeypatch):
    import fullrank.recipes.mt as mt

    calls = []
    monkeypatch.setattr(mt, "evaluate_bleu", lambda *a, **k: calls.append(a[-2].name))
    write_corpus(tmp_path, (("train", 50, 0), ("val", 6, 1), ("test", 5, 2)))
    cfg = small_config(tmp_path, rest="decode: {average_last: 1, tune_alpha: [0.6, 1.0]}")
    # it used to tune α on valid anyway, then fail on the tuning table's missing signature
    assert main(["train", str(cfg), "--quiet", "train.steps=4", "decode.splits=[]"]) == 0
    run = tmp_path / "runs" / "tiny_mt"
    assert json.loads((run / "results.json").read_text())["extra"]["bleu"] == {}
    assert calls == [] and "signature" not in capsys.readouterr().out


@pytest.mark.parametrize(
    "argv, message",
    [
        (["translate", "CKPT", "--beam", "0"], "--beam must be >= 1"),
        (["translate", "CKPT", "--beam", "2", "--n-best", "3"], "--n-best must be between 1 and --beam"),
        (["translate", "CKPT", "--max-len-b", "0"], "--max-len-b must be >= 1"),
        (["translate", "CKPT", "--max-len-a", "-1"], "--max-len-a must be a number from 0 to 1000"),
        (["generate", "CKPT", "--top-k", "0"], "--top-k must be a positive integer"),
        (["generate", "CKPT", "--temperature", "-1"], "--temperature must be a finite number ≥ 0"),
    ],
)
def test_bad_decoding_options_are_named_as_typed_before_any_checkpoint_is_read(argv, message, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and err.count("\n") == 0 and "CKPT" not in err


def test_bpe_dropout_trains_and_resumes_exactly(tmp_path, capsys):
    from safetensors.torch import load_file

    # several batches per epoch, several epochs; max_sentence_len + 1 within the budget, as BPE-dropout needs
    data = ", bpe_dropout: 0.3, max_tokens: 48, max_sentence_len: 47"
    rest = "decode: {splits: [], tune_alpha: []}"

    def final(run):
        ckpt = run / "checkpoints" / (run / "checkpoints" / "latest").read_text().strip()
        return load_file(str(ckpt / "model.safetensors"))

    straight, halves = tmp_path / "a", tmp_path / "b"
    for d in (straight, halves):
        d.mkdir()
        write_corpus(d, (("train", 60, 0), ("val", 5, 1)))
    args = ["--quiet", "train.save_every=2", "train.eval_every=100"]
    assert (
        main(
            ["train", str(small_config(straight, test=False, data=data, rest=rest)), *args, "train.steps=24"]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "BPE-dropout p=0.3: 16 segmentations drawn per word" in out
    cfg = small_config(halves, test=False, data=data, rest=rest)
    assert main(["train", str(cfg), *args, "train.steps=11"]) == 0
    assert main(["train", str(cfg), *args, "train.steps=24", "--resume"]) == 0
    a, b = final(straight / "runs" / "tiny_mt"), final(halves / "runs" / "tiny_mt")
    assert a.keys() == b.keys() and all((a[k] == b[k]).all() for k in a)
