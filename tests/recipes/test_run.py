"""The recipes' shared steps: the run's tokenizer follows the data section."""

from __future__ import annotations

import torch

from fullrank.recipes.config import load_experiment
from fullrank.recipes.recipe import prepare_tokenizer, trained_tokenizer
from fullrank.training.distributed import DistInfo

ONE = DistInfo(rank=0, world=1, local_rank=0, device=torch.device("cpu"))


def bpe_lm(tmp_path):
    """A tiny LM experiment with a BPE vocabulary of 60 trained on ``train.txt``; its file."""
    (tmp_path / "train.txt").write_text("Ein Mann fährt Rad.\nZwei Hunde spielen im Schnee.\n" * 5)
    cfg = tmp_path / "lm.yaml"
    cfg.write_text(
        f"name: lc\ntask: lm\nmodel: {{d_model: 8, n_heads: 2, d_ff: 16, n_layers: 1,"
        f" seq_len: 4}}\ndata: {{root: {tmp_path}, train: train.txt, tokenizer: bpe,"
        f" vocab_size: 60, cache_dir: {tmp_path / 'cache'}}}\n"
    )
    return cfg


def test_data_lowercase_reaches_the_tokenizer(tmp_path):
    cfg = bpe_lm(tmp_path)
    for lowercase, expected in ((None, "Ein Mann"), (True, "ein mann")):
        exp = load_experiment(cfg, [f"data.lowercase={'null' if lowercase is None else 'true'}"])
        run = tmp_path / f"run_{lowercase}"
        tok = prepare_tokenizer(exp.data, lambda: [tmp_path / "train.txt"], run, ONE, resuming=False)
        assert tok.decode(tok.encode("Ein Mann")) == expected
        assert (run / "tokenizer.json").is_file()


def test_a_kept_vocabulary_is_the_trained_one_and_is_retrained_when_its_key_or_file_changes(tmp_path):
    cfg = bpe_lm(tmp_path)
    data = load_experiment(cfg).data
    reads: list[str] = []
    said: list[str] = []

    def files():
        reads.append("read")
        return [tmp_path / "train.txt"]

    def vocabulary(key: str, **settings):
        exp = load_experiment(cfg, [f"data.{k}={v}" for k, v in settings.items()])
        return trained_tokenizer(exp.data, files, lambda: key, said.append)

    first = vocabulary("corpus A")
    assert len(reads) == 1 and "trained in" in said[-1]
    assert first.to_str() == trained_tokenizer(data, files).to_str()  # what training gives
    (kept,) = (tmp_path / "cache").glob("tokenizer-*.json")
    again = vocabulary("corpus A")
    assert len(reads) == 2 and again.to_str() == first.to_str() and "kept in" in said[-1]
    vocabulary("corpus B")  # another text: trained, kept beside the first
    vocabulary("corpus A", vocab_size=50)  # other settings: trained
    assert len(reads) == 4 and len(list((tmp_path / "cache").glob("tokenizer-*.json"))) == 3
    kept.write_text("{not json")  # a damaged file is trained again and replaced
    assert vocabulary("corpus A").to_str() == first.to_str()
    assert len(reads) == 5 and "cannot be used" in said[-2] and "trained in" in said[-1]
    assert kept.read_text() != "{not json"


def test_a_run_keeps_the_vocabulary_it_trains_under_its_files_checksums(tmp_path):
    import io

    from rich.console import Console

    from fullrank.data.document_cache import files_key
    from fullrank.recipes.recipe import Run

    cfg = bpe_lm(tmp_path)
    text = tmp_path / "train.txt"
    key = files_key([text])
    assert key == files_key([tmp_path / "." / "train.txt"])  # the bytes, not the name
    out = io.StringIO()

    def run_tokenizer(name: str):
        exp = load_experiment(cfg, [f"name={name}", f"out_dir={tmp_path / 'runs'}"])
        run = Run(exp, ONE, None, None, Console(file=out, width=200), progress=False)
        return run.tokenizer(lambda: [text])

    first = run_tokenizer("a")
    assert "trained in" in out.getvalue()
    (kept,) = (tmp_path / "cache").glob("tokenizer-*.json")
    assert run_tokenizer("b").to_str() == first.to_str() and "kept in" in out.getvalue().splitlines()[-1]
    text.write_text(text.read_text() + "Ein Hund.\n")  # another text: another key, trained again
    assert files_key([text]) != key
    run_tokenizer("c")
    assert "trained in" in out.getvalue().splitlines()[-1]
    assert len(list((tmp_path / "cache").glob("tokenizer-*.json"))) == 2
