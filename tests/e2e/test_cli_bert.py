"""BERT end to end through the CLI: pre-train → fine-tune (classify, SQuAD) → `fullrank classify`,
`fullrank answer` and `fullrank fill-mask`; exact resume; train.init_from (also after
`fullrank widen`); one-line errors."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from fullrank.cli import main
from tests.e2e.bert_fixture import write_configs
from tests.e2e.lm_fixture import tiny_experiment


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory):
    """The three runs, trained once for the module."""
    tmp = tmp_path_factory.mktemp("bert")
    cfgs = write_configs(tmp)
    for task in ("bert", "classify", "squad"):
        assert main(["train", str(cfgs[task]), "--quiet"]) == 0, task
    return tmp, cfgs


def test_pretraining_records_mlm_and_nsp_metrics(pipeline):
    tmp, _ = pipeline
    run = tmp / "runs" / "pre"
    results = json.loads((run / "results.json").read_text())
    assert {"mlm_acc", "mlm_ppl", "nsp_acc"} <= results["valid"].keys()
    valid = [
        json.loads(x)
        for x in (run / "metrics.jsonl").read_text().splitlines()
        if json.loads(x)["split"] == "valid"
    ]
    assert [r["step"] for r in valid] == [4, 8] and all("mlm_acc" in r for r in valid)
    assert (run / "curves.png").stat().st_size > 10_000 and (run / "tb").is_dir()
    assert (run / "checkpoints" / "latest").is_file()
    assert (run / "tokenizer.json").is_file()


def test_fine_tuning_reports_new_and_dropped_tensors_and_scores(pipeline, capsys):
    tmp, cfgs = pipeline
    cls = json.loads((tmp / "runs" / "cls" / "results.json").read_text())
    assert 0 <= cls["valid"]["accuracy"] <= 100 and "again" in cls["extra"]["eval_sets"]
    qa = json.loads((tmp / "runs" / "qa" / "results.json").read_text())
    assert {"em", "f1"} <= qa["test"].keys() and qa["test"]["questions"] == 12
    assert main(["train", str(cfgs["classify"]), "--quiet", "name=cls2", "train.steps=1"]) == 0
    out = capsys.readouterr().out
    lines = [x for x in out.splitlines() if "tensors" in x]
    assert lines[1].strip() == "new tensors (2): classifier.weight, classifier.bias"
    assert lines[2].strip().startswith("dropped tensors (7): mlm.bias,") and "nsp.weight" in lines[2]
    # the header shows the dropout the run trains with: the checkpoint's, or the experiment's
    assert main(["train", str(cfgs["classify"]), "name=cls3", "train.steps=1"]) == 0
    assert " · dropout 0.1 (attention 0.1, feed-forward 0) · " in capsys.readouterr().out
    args = ["name=cls4", "train.steps=1", "model.dropout=0", "model.attn_dropout=0"]
    assert main(["train", str(cfgs["classify"]), *args]) == 0
    assert " · dropout 0 · " in capsys.readouterr().out


def test_classify_and_answer_commands(pipeline, capsys, monkeypatch):
    tmp, _ = pipeline
    pairs = tmp / "pairs.tsv"
    pairs.write_text("Before we proceed any further\tBefore we proceed\nA man\tA dog barks\n")
    assert main(["classify", str(tmp / "runs" / "cls"), "--input", str(pairs)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2
    for line in lines:
        label, *probs = line.split("\t")
        assert label in ("same", "other")
        values = dict(p.split("=") for p in probs)
        assert set(values) == {"same", "other"} and abs(sum(map(float, values.values())) - 1) < 1e-3
        assert float(values[label]) == max(map(float, values.values()))
    # output line i answers input line i: an empty line stays empty; a pair too long is cut, said
    pairs.write_text("A man\tA dog barks\n\n" + "word " * 200 + "\tshort\n")
    assert main(["classify", str(tmp / "runs" / "cls"), "--input", str(pairs)]) == 0
    out, err = capsys.readouterr()
    lines = out.split("\n")
    assert len(lines) == 4 and lines[1] == "" and lines[3] == "" and lines[0] and lines[2]
    assert f"{pairs}:3: " in err and "tokens, more than the model's seq_len=" in err
    context = tmp / "context.txt"
    context.write_text("First Citizen: Before we proceed any further, hear me speak.")
    assert (
        main(["answer", str(tmp / "runs" / "qa"), "--context", str(context), "--question", "who speaks?"])
        == 0
    )
    answer = capsys.readouterr().out.strip()
    assert answer and answer in context.read_text()  # a span of the context, as it is written
    # a checkpoint of another task: one line, status 2
    assert main(["answer", str(tmp / "runs" / "cls"), "--context", str(context), "--question", "x"]) == 2
    err = capsys.readouterr().err.strip()
    assert "needs a checkpoint of a `task: squad` run" in err and "\n" not in err


def test_eval_scores_a_pretrained_bert_on_a_file_as_its_run_validated(pipeline, capsys):
    tmp, _ = pipeline
    run = tmp / "runs" / "pre"
    valid = json.loads((run / "results.json").read_text())["valid"]
    # another batch size than the run's (8): the masks are the data's, not the batches'
    assert main(["eval", str(run), "--data", str(tmp / "docs_valid.txt"), "--batch-size", "5"]) == 0
    out = capsys.readouterr().out
    assert f"MLM accuracy {valid['mlm_acc']:.2f}% · MLM perplexity {valid['mlm_ppl']:.2f}" in out
    assert f"NSP accuracy {valid['nsp_acc']:.2f}%" in out and f"{valid['predictions']:,} predictions" in out


def test_fill_mask_lists_the_masked_lm_heads_likeliest_pieces_padded_or_alone(pipeline, capsys):
    from fullrank.inference.fill_mask import fill_masks
    from fullrank.models import Encoder
    from fullrank.training.checkpoints import load_checkpoint

    tmp, _ = pipeline
    ckpt = load_checkpoint(tmp / "runs" / "pre")
    model, tok = ckpt.model, ckpt.tokenizer
    assert isinstance(model, Encoder) and tok is not None and tok.mask_id is not None
    special = [tok.pad_id, tok.cls_id, tok.sep_id, tok.mask_id]
    texts = [
        "before we [MASK] any further",
        "[MASK] me [MASK]",
        "you are all resolved rather to die than to [MASK]",
    ]
    batched = fill_masks(model, tok, texts, top_k=4, batch_size=3)  # padded to the longest
    for text, got in zip(texts, batched):
        row = torch.tensor([[tok.cls_id, *tok.encode(text), tok.sep_id]])
        with torch.no_grad():
            probs = model.mlm_logits(model(row))[0].double().softmax(-1)  # (T, V), the text alone
        at = (row[0] == tok.mask_id).nonzero().flatten().tolist()
        assert len(got.candidates) == len(at) == text.count("[MASK]")
        for pos, candidates in zip(at, got.candidates):
            listed = [c.prob for c in candidates]
            assert len(listed) == 4 and listed == sorted(listed, reverse=True)
            for c in candidates:
                assert c.id not in special and c.token == tok.id_to_token(c.id)
                assert abs(c.prob - float(probs[pos, c.id])) < 1e-5
            rest = probs[pos].clone()
            rest[special + [c.id for c in candidates]] = -1.0
            assert float(rest.max()) <= min(listed) + 1e-5  # none unlisted is likelier
        best = [c[0].id for c in got.candidates]
        filled = [best.pop(0) if t == tok.mask_id else t for t in row[0].tolist()]
        assert got.text == tok.decode(filled) and "[MASK]" not in got.text
        alone = fill_masks(model, tok, [text], top_k=4, batch_size=1)[0]
        assert alone.text == got.text
        assert [[c.id for c in m] for m in alone.candidates] == [[c.id for c in m] for m in got.candidates]
    path = tmp / "masked.txt"
    path.write_text("\n".join(texts[:2]) + "\n\n")
    assert main(["fill-mask", str(tmp / "runs" / "pre"), "--input", str(path), "--top-k", "4"]) == 0
    lines = capsys.readouterr().out.split("\n")
    assert lines[2:] == ["", ""]  # the empty line answered by an empty line
    for line, got in zip(lines[:2], batched):
        text, *fields = line.split("\t")
        assert text == got.text and len(fields) == len(got.candidates)
        for field, candidates in zip(fields, got.candidates):
            assert field == " ".join(f"{c.token}={c.prob:.4f}" for c in candidates)


def test_heads_and_attention_read_a_bert_segment_framed_as_in_pre_training(pipeline, capsys):
    from fullrank.analysis.inputs import encoder_frame, lm_batch
    from fullrank.training.checkpoints import load_checkpoint

    tmp, _ = pipeline
    run = tmp / "runs" / "pre"
    ckpt = load_checkpoint(run)
    tok, seq_len = ckpt.tokenizer, ckpt.config.seq_len
    assert tok is not None
    text = (tmp / "docs_valid.txt").read_text()
    batch = lm_batch(tok, text, seq_len=seq_len, n_sequences=2, eos_per_line=False, frame=encoder_frame(ckpt))
    pieces = tok.encode(text)
    assert batch.tokens.shape == (2, seq_len)
    assert (
        batch.tokens[:, 0].tolist() == [tok.cls_id] * 2 and batch.tokens[:, -1].tolist() == [tok.sep_id] * 2
    )
    assert batch.tokens[1, 1:-1].tolist() == pieces[seq_len - 2 : 2 * (seq_len - 2)]
    out = tmp / "bert_heads.png"
    assert (
        main(["heads", str(run), "--data", str(tmp / "docs_valid.txt"), "--sequences", "2", "-o", str(out)])
        == 0
    )
    assert f"measured on 2 sequences, n = {seq_len:.1f} keys" in capsys.readouterr().out
    maps = tmp / "bert_attention.png"
    assert main(["attention", str(run), "--text", "to be or not to be", "-o", str(maps)]) == 0
    assert maps.stat().st_size > 10_000 and maps.with_name("bert_attention-lines.png").exists()
    classifier = load_checkpoint(tmp / "runs" / "cls")
    assert encoder_frame(classifier) == (tok.cls_id, tok.sep_id)


def test_info_of_a_fine_tuning_config_is_the_model_its_run_trains(pipeline, capsys):
    import json

    tmp, cfgs = pipeline
    for task, run, head in (("classify", "cls", "classifier.weight"), ("squad", "qa", "span.weight")):
        assert main(["info", str(cfgs[task]), "--parameters"]) == 0
        out = capsys.readouterr().out
        params = json.loads((tmp / "runs" / run / "results.json").read_text())["params"]
        assert f"{params:,}" in out, task  # the total its run counted
        assert head in out and "mlm.transform.weight" not in out, task


def test_bad_inputs_are_one_line_errors(pipeline, capsys):
    tmp, cfgs = pipeline
    (tmp / "bad_labels.jsonl").write_text(
        '{"text_a": "a b", "text_b": "c", "label": "same"}\n'
        '{"text_a": "a b", "text_b": "c", "label": "maybe"}\n'
    )
    cases = [
        (
            [str(cfgs["classify"]), "name=e1", "data.labels=[same, other]", "data.valid=bad_labels.jsonl"],
            "bad_labels.jsonl:2: label 'maybe' is not one of same, other",
        ),
        ([str(cfgs["classify"]), "name=e2", "model.n_layers=3"], "has no tensor 'layers.2."),
        ([str(cfgs["classify"]), "name=e3", "model.d_ff=40"], "in this model; the model section changes"),
        (
            [str(cfgs["squad"]), "name=e4", f"train.init_from={tmp / 'runs' / 'cls'}"],
            None,
        ),  # an encoder of another task is fine: its heads are dropped
    ]
    for args, message in cases:
        status = main(["train", *args, "--quiet", "train.steps=1"])
        err = capsys.readouterr().err.strip()
        if message is None:
            assert status == 0, err
            continue
        assert status == 2 and message in err and "\n" not in err, err
    (tmp / "lm").mkdir(exist_ok=True)
    lm = tiny_experiment(tmp / "lm")
    assert main(["train", str(lm), "--quiet"]) == 0
    assert (
        main(["train", str(cfgs["classify"]), "name=e5", f"train.init_from={tmp / 'lm' / 'runs' / 'tiny'}"])
        == 2
    )
    err = capsys.readouterr().err.strip()
    assert (
        "holds a decoder_lm model (DecoderLMConfig), but task 'classify' trains a EncoderConfig" in err
        and "\n" not in err
    )


def final_weights(run: Path) -> dict:
    ckpt = run / "checkpoints" / (run / "checkpoints" / "latest").read_text().strip()
    return load_file(str(ckpt / "model.safetensors"))


@pytest.mark.parametrize("task", ["bert", "classify"])
def test_a_stopped_run_resumes_bitwise(pipeline, task, capsys):
    tmp, cfgs = pipeline
    over = ["train.steps=6", "train.save_every=2", "model.dropout=0.3"]
    if task == "bert":  # one vocabulary for both (WordPiece training may break ties differently)
        over.append(f"data.tokenizer_file={tmp / 'runs' / 'pre' / 'tokenizer.json'}")
    assert main(["train", str(cfgs[task]), "--quiet", f"name={task}_straight", *over]) == 0
    assert main(["train", str(cfgs[task]), "--quiet", f"name={task}_split", *over, "train.stop_after=3"]) == 0
    split = tmp / "runs" / f"{task}_split"
    shutil.rmtree(split / "checkpoints" / "step-00000003")  # as if killed after step 3: redo it
    (split / "checkpoints" / "latest").write_text("step-00000002")
    torch.manual_seed(1234)
    assert main(["train", str(cfgs[task]), "--quiet", f"name={task}_split", *over, "--resume"]) == 0
    a, b = final_weights(tmp / "runs" / f"{task}_straight"), final_weights(split)
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k


def test_a_widened_checkpoint_trains_on_with_init_from(tmp_path, capsys):
    cfg = tiny_experiment(tmp_path, steps=6)
    assert main(["train", str(cfg), "--quiet"]) == 0
    run = tmp_path / "runs" / "tiny"
    assert main(["widen", str(run), "--d-head", "16", "--d-value", "8", "-o", str(tmp_path / "wide")]) == 0
    capsys.readouterr()
    # the experiment file states d_head 10 and d_value 6: the run states the widened sizes
    assert (
        main(
            [
                "train",
                str(cfg),
                "--quiet",
                "name=wide_on",
                f"train.init_from={tmp_path / 'wide'}",
                "model.d_head=16",
                "model.d_value=8",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "tensors loaded" in out and "new tensors (0): none" in out and "dropped tensors (0): none" in out
    config = (tmp_path / "runs" / "wide_on" / "config.yaml").read_text()
    assert "d_head: 16" in config and "d_value: 8" in config
    # the first evaluation starts where the widened model is, not from scratch
    first = [
        json.loads(x) for x in (tmp_path / "runs" / "wide_on" / "metrics.jsonl").read_text().splitlines()
    ][0]
    scratch = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()][0]
    assert first["loss"] < scratch["loss"]
    # a model section that contradicts the checkpoint: one line
    assert main(["train", str(cfg), "--quiet", "name=wide_bad", f"train.init_from={tmp_path / 'wide'}"]) == 2
    err = capsys.readouterr().err.strip()
    assert (
        "layers.0.self_attn.qkv_proj.weight' is (120, 24) in" in err
        and "the model section changes the architecture" in err
        and "\n" not in err
    )


def test_a_wikiextractor_corpus_pretrains_without_next_sentence_from_its_cache(tmp_path, capsys):
    import lzma

    from tests.e2e.bert_fixture import LINES

    def article(i: int) -> str:
        body = "\n".join(". ".join(LINES[i * 6 + k : i * 6 + k + 2]) + "." for k in range(0, 6, 2))
        return f'<doc id="{i}" url="u{i}" title="T{i}">\nT{i}\n\n{body}\n</doc>\n'

    (tmp_path / "wiki").mkdir()
    for part in range(2):
        text = "".join(article(i) for i in range(part * 40, part * 40 + 40))
        (tmp_path / "wiki" / f"train_{part}.txt.xz").write_bytes(lzma.compress(text.encode()))
    (tmp_path / "valid.txt").write_text("".join(article(i) for i in range(80, 96)))
    cfg = tmp_path / "wiki.yaml"
    cfg.write_text(f"""name: wiki
task: bert
out_dir: {tmp_path / "runs"}
model: {{d_model: 24, n_heads: 3, d_head: 10, d_ff: 37, n_layers: 2, seq_len: 48, max_len: 48,
        norm_first: true, next_sentence: false}}
data: {{root: {tmp_path}, train: "wiki/train_*.txt.xz", valid: valid.txt, corpus_format: wikiextractor,
        tokenizer_sample: 0.5, vocab_size: 300, mlm_prob: 0.4, max_predictions: 19,
        short_seq_prob: 0.0, cache_dir: {tmp_path / "cache"}}}
train: {{steps: 4, batch_size: 8, eval_every: 2, eval_batches: 2, save_every: 4, optimizer: adamw,
         lr: 0.003, schedule: linear, warmup: 1, log_every: 2, threads: 1}}
""")
    assert main(["train", str(cfg), "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "trained in" in out and "tokenized in" in out
    assert "single segments (no next-sentence prediction)" in out
    results = json.loads((tmp_path / "runs" / "wiki" / "results.json").read_text())
    assert "mlm_acc" in results["valid"] and "nsp_acc" not in results["valid"]
    assert "nsp.weight" not in final_weights(tmp_path / "runs" / "wiki")
    # a second run reads its vocabulary and the tokenized corpus from the cache: the same
    # tokenizer.json, byte for byte; it masks spans of whole words
    assert main(["train", str(cfg), "--quiet", "name=wiki2", "data.mask_unit=span"]) == 0
    out = capsys.readouterr().out
    assert "kept in" in out and "trained in" not in out and "cached in" in out and "by spans" in out
    vocab = tmp_path / "runs" / "wiki" / "tokenizer.json"
    assert (tmp_path / "runs" / "wiki2" / "tokenizer.json").read_bytes() == vocab.read_bytes()
    # a changed corpus is tokenized again with the same vocabulary, and gets a new vocabulary
    # without one given: never read stale
    (tmp_path / "wiki" / "train_1.txt.xz").write_bytes(lzma.compress(article(3).encode() * 2))
    assert main(["train", str(cfg), "--quiet", "name=wiki3", f"data.tokenizer_file={vocab}"]) == 0
    assert "tokenized in" in capsys.readouterr().out
    assert main(["train", str(cfg), "--quiet", "name=wiki4"]) == 0
    out = capsys.readouterr().out
    assert "trained in" in out and "kept in" in out and "tokenized in" in out
    # broken corpora: one line each, nothing written
    good = (tmp_path / "wiki" / "train_0.txt.xz").read_bytes()
    cases = [
        (good[: len(good) // 2], "train_0.txt.xz: the compressed data is damaged"),
        (
            lzma.compress(article(1).encode() + b'<doc id="9" url="u" title="x">\nx\n\nA b.\n'),
            "train_0.txt.xz: the <doc> opened at line 8 is not closed before the end of the file",
        ),
    ]
    for data, message in cases:
        (tmp_path / "wiki" / "train_0.txt.xz").write_bytes(data)
        assert main(["train", str(cfg), "--quiet", "name=broken"]) == 2
        err = capsys.readouterr().err.strip()
        assert message in err and "\n" not in err, err
    (tmp_path / "a_file").write_text("")
    assert main(["train", str(cfg), "--quiet", "name=broken", f"data.cache_dir={tmp_path / 'a_file'}/c"]) == 2
    err = capsys.readouterr().err.strip()
    assert "data.cache_dir" in err and "is a file, not a folder" in err and "\n" not in err
    assert main(["train", str(cfg), "--quiet", "name=broken", "data.mask_unit=sentence"]) == 2
    err = capsys.readouterr().err.strip()
    assert "data.mask_unit" in err and "'span'" in err and "\n" not in err, err
    assert main(["train", str(cfg), "--quiet", "name=broken", "data.train=nowhere/*.xz"]) == 2
    err = capsys.readouterr().err.strip()
    assert "nowhere/*.xz: no file matches this pattern" in err and "\n" not in err
    assert not (tmp_path / "runs" / "broken" / "checkpoints").exists()
