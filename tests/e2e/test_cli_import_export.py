"""`fullrank import` and `fullrank export` through the command line: the [B20] path on an
imported model (import → heads → widen → train on → classify / generate → export), and every
bad input as one line (exit status 2, nothing the user had changed or lost)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import pytest

from fullrank.cli import main
from tests.e2e.bert_fixture import write_corpus
from tests.e2e.lm_fixture import TEXT
from tests.reference.hf_models import bert_dir, gpt2_dir, marian_dir
from tests.robustness.conftest import assert_kept, assert_one_line_error, snapshot

TRAIN = (
    "optimizer: adamw, lr: 0.003, schedule: linear, warmup: 2, log_every: 2, threads: 1, "
    "batch_size: 8, eval_every: 4, save_every: 4"
)


@pytest.fixture(scope="module")
def hf(tmp_path_factory):
    """Hugging Face directories, built once: BERT (pre-training, QA), GPT-2, Marian (with a
    tokenizer.json, and as shipped: sentencepiece files only)."""
    root = tmp_path_factory.mktemp("hf")
    dirs = {
        "bert": bert_dir(root, "BertForPreTraining"),
        "qa": bert_dir(root, "BertForQuestionAnswering"),
        "gpt2": gpt2_dir(root),
        "marian": marian_dir(root),
    }
    (root / "spm").mkdir()
    dirs["marian_spm"] = marian_dir(root / "spm", with_tokenizer=False)
    return dirs


def run(argv: list[str], capsys) -> str:
    assert main(argv) == 0, capsys.readouterr().err
    return capsys.readouterr().out


def test_the_b20_path_on_an_imported_bert(hf, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    out = run(["import", str(hf["bert"]), "-o", "bert"], capsys)
    assert out.splitlines()[1:3] == [
        "mapped 62 tensors onto 50 of fullrank's encoder model",
        "dropped (0): none",
    ]
    assert "checkpoint: bert (task bert)" in out
    (tmp_path / "text.txt").write_text(TEXT[:3000], encoding="utf-8")
    out = run(["heads", "bert", "--data", "text.txt", "-o", "heads.png"], capsys)
    assert "12 of 12 heads have d_head < n" in out
    out = run(["widen", "bert", "--d-head", "12", "-o", "wide"], capsys)
    assert "6/6 → 12/12" in out
    write_corpus(tmp_path)
    (tmp_path / "continue.yaml").write_text(f"""name: continue
task: bert
out_dir: runs
data: {{root: ., train: docs.txt, valid: docs_valid.txt, corpus_format: blocks,
        short_documents: skip, max_predictions: 6}}
train: {{init_from: wide, steps: 4, eval_batches: 2, {TRAIN}}}
""")
    out = run(["train", "continue.yaml", "--quiet"], capsys)
    assert "init_from wide: 51 tensors loaded" in out and "4 heads × d_head 12" in out
    (tmp_path / "classify.yaml").write_text(f"""name: cls
task: classify
out_dir: runs
data: {{root: ., train: pairs_train.jsonl, valid: pairs_valid.jsonl}}
train: {{init_from: runs/continue, steps: 4, {TRAIN}}}
""")
    out = run(["train", "classify.yaml", "--quiet"], capsys)
    assert "new tensors (2): classifier.weight, classifier.bias" in out
    monkeypatch.setattr("sys.stdin", __import__("io").StringIO("A man plays.\tA person sings.\n"))
    out = run(["classify", "runs/cls"], capsys)
    assert out.split("\t")[0] in ("same", "other")


def test_fill_mask_on_an_imported_bert_gives_hugging_faces_fill_mask_probabilities(hf, tmp_path, capsys):
    import transformers

    text = "first citizen: before we [MASK] any further, hear me [MASK]."
    (tmp_path / "masked.txt").write_text(text + "\n")
    run(["import", str(hf["bert"]), "-o", str(tmp_path / "bert")], capsys)
    out = run(
        ["fill-mask", str(tmp_path / "bert"), "--input", str(tmp_path / "masked.txt"), "--top-k", "6"], capsys
    )
    fields = out.rstrip("\n").split("\t")[1:]
    pipe = transformers.pipeline("fill-mask", model=str(hf["bert"]), top_k=97, device="cpu")
    reference = cast(list[list[dict[str, Any]]], pipe(text))  # per mask, every piece's probability
    assert pipe.tokenizer is not None
    assert len(fields) == len(reference) == 2
    specials = {"[PAD]", "[CLS]", "[SEP]", "[MASK]"}
    for field, theirs in zip(fields, reference):
        ours = dict(c.rsplit("=", 1) for c in field.split(" "))
        score = {pipe.tokenizer.convert_ids_to_tokens(int(r["token"])): float(r["score"]) for r in theirs}
        assert len(ours) == 6 and len(score) == 97
        for piece, p in ours.items():  # each listed piece at Hugging Face's probability (4 decimals)
            assert abs(float(p) - score[piece]) <= 5e-5 + 1e-7, (piece, p, score[piece])
        unlisted = [p for piece, p in score.items() if piece not in ours and piece not in specials]
        assert max(unlisted) <= min(map(float, ours.values())) + 5e-5  # none unlisted is likelier


def test_an_imported_span_model_answers_and_exports_back(hf, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    run(["import", str(hf["qa"]), "-o", "qa"], capsys)
    (tmp_path / "context.txt").write_text("the king is dead and the queen lives\n")
    out = run(["answer", "qa", "--context", "context.txt", "--question", "who lives?"], capsys)
    assert out.strip()
    out = run(["export", "qa", "-o", "qa-hf"], capsys)
    assert out.startswith("BertForQuestionAnswering: 55 tensors in model.safetensors")
    config = json.loads((tmp_path / "qa-hf" / "config.json").read_text())
    assert config["architectures"] == ["BertForQuestionAnswering"]


def test_a_recipe_shaped_bert_pretrains_fine_tunes_and_exports_to_roberta_prelayernorm(tmp_path, capsys):
    """The Wikipedia recipe's model (pre-LN, fixed sinusoid, scaled embeddings, mimetic start, no
    next-sentence head) pre-trained and fine-tuned through the command line, then exported: the
    RoBERTa-PreLayerNorm classes ``transformers`` loads compute fullrank's logits."""
    import torch

    from fullrank.models import Encoder
    from fullrank.training.checkpoints import load_checkpoint
    from tests.e2e.bert_fixture import write_configs
    from tests.reference.hf_models import transformers

    cfgs = write_configs(tmp_path, steps=4)
    recipe = [
        "model.norm_first=true",
        "model.next_sentence=false",
        "model.positions=sinusoidal",
        "model.scale_embeddings=true",
        "model.attn_init=mimetic",
        "model.d_head=8",  # d_model / n_heads, as Hugging Face's heads are
    ]
    run(["train", str(cfgs["bert"]), "--quiet", *recipe], capsys)
    run(["train", str(cfgs["squad"]), "--quiet"], capsys)
    runs = tmp_path / "runs"
    for name, arch in (
        ("pre", "RobertaPreLayerNormForMaskedLM"),
        ("qa", "RobertaPreLayerNormForQuestionAnswering"),
    ):
        out = run(["export", str(runs / name), "-o", str(tmp_path / f"{name}-hf")], capsys)
        assert out.startswith(f"{arch}: "), out
        hf = getattr(transformers, arch).from_pretrained(tmp_path / f"{name}-hf").eval()
        tok = transformers.AutoTokenizer.from_pretrained(tmp_path / f"{name}-hf")
        enc = tok(
            ["the king is dead", "and the queen lives on"],
            ["who lives?", "a"],
            padding=True,
            return_tensors="pt",
        )
        ours = load_checkpoint(runs / name).model
        assert isinstance(ours, Encoder)
        keep = enc["attention_mask"].bool()
        with torch.no_grad():
            ref = hf(**enc)
            h = ours(enc["input_ids"], segments=enc["token_type_ids"], mask=keep)
            got, want = (
                (ours.mlm_logits(h), ref.logits)
                if name == "pre"
                else (ours.span_logits(h)[..., 0], ref.start_logits)
            )
        torch.testing.assert_close(got[keep], want[keep], atol=1e-4, rtol=1e-5)


def test_an_encoder_with_a_bpe_tokenizer_imports_without_a_task_and_its_tasks_refuse_it(tmp_path, capsys):
    """A RoBERTa with RoBERTa's byte-level BPE tokenizer (no [CLS], [SEP], [MASK]) imports,
    exactly, but with no task: fill-mask, answer and fine-tuning from it are one line each; a
    checkpoint that claims a BERT task with such a tokenizer is refused on loading."""
    from fullrank.errors import CheckpointError
    from fullrank.training.checkpoints import load_checkpoint, write_checkpoint
    from tests.e2e.bert_fixture import write_configs
    from tests.reference.hf_models import roberta_bpe_dir

    hf_dir = roberta_bpe_dir(tmp_path)
    out = run(["import", str(hf_dir), "-o", str(tmp_path / "ckpt")], capsys)
    assert "(task none)" in out and "no task: its bpe tokenizer has no [CLS], [SEP] and [MASK]" in out
    (tmp_path / "ctx.txt").write_text("the king is dead and the queen lives\n")
    cfgs = write_configs(tmp_path, steps=2)
    cases = [
        (
            ["fill-mask", str(tmp_path / "ckpt"), "--input", str(tmp_path / "ctx.txt")],
            "task=None, tokenizer: bpe",
        ),
        (
            ["answer", str(tmp_path / "ckpt"), "--context", str(tmp_path / "ctx.txt"), "--question", "who?"],
            "task=None",
        ),
        (
            ["train", str(cfgs["squad"]), f"train.init_from={tmp_path / 'ckpt'}"],
            "a bpe tokenizer, but task 'squad' frames its inputs",
        ),
    ]
    for argv, message in cases:
        assert main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert message in err and "\n" not in err, err
    ckpt = load_checkpoint(tmp_path / "ckpt")
    write_checkpoint(tmp_path / "claims_bert", ckpt.model, ckpt.config, ckpt.tokenizer, {"task": "bert"})
    with pytest.raises(CheckpointError, match=r"a bpe tokenizer, but task 'bert' frames its inputs"):
        load_checkpoint(tmp_path / "claims_bert")


def test_a_model_with_one_segment_embedding_refuses_pairs_in_one_line(tmp_path, capsys):
    """RoBERTa's checkpoints often hold one segment embedding (type_vocab_size=1): fine-tuning
    on sentence pairs or SQuAD's question and paragraph from one is one line, not an index
    error."""
    from tests.e2e.bert_fixture import write_configs

    hf_dir = bert_dir(tmp_path, "RobertaPreLayerNormForMaskedLM", type_vocab_size=1)
    run(["import", str(hf_dir), "-o", str(tmp_path / "ckpt")], capsys)
    cfgs = write_configs(tmp_path, steps=2)
    start = f"train.init_from={tmp_path / 'ckpt'}"
    for task, message in (
        ("classify", "pairs_train.jsonl: sentence pairs, but the model has one segment embedding"),
        ("squad", "has one segment embedding (type_vocab_size=1); task 'squad' reads a question"),
    ):
        assert main(["train", str(cfgs[task]), "--quiet", start]) == 2
        err = capsys.readouterr().err.strip()
        assert message in err and "\n" not in err, err


def test_an_imported_gpt2_measures_widens_trains_generates_and_exports(hf, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    run(["import", str(hf["gpt2"]), "-o", "gpt2"], capsys)
    (tmp_path / "train.txt").write_text(TEXT[:6000], encoding="utf-8")
    (tmp_path / "valid.txt").write_text(TEXT[6000:8000], encoding="utf-8")
    out = run(["heads", "gpt2", "--data", "valid.txt", "--sequences", "2", "-o", "h.png"], capsys)
    assert "8 of 8 heads have d_head < n" in out
    run(["widen", "gpt2", "--d-head", "12", "-o", "wide"], capsys)
    (tmp_path / "lm.yaml").write_text(f"""name: lm
task: lm
out_dir: runs
model: {{seq_len: 24}}
data: {{root: ., train: train.txt, valid: valid.txt, cache_dir: cache}}
train: {{init_from: wide, steps: 4, eval_batches: 2, {TRAIN}}}
sample: {{max_new_tokens: 5}}
""")
    out = run(["train", "lm.yaml", "--quiet"], capsys)
    assert "init_from wide: 28 tensors loaded" in out
    run(["generate", "runs/lm", "--prompt", "ROMEO:", "--max-new-tokens", "4"], capsys)
    run(["export", "gpt2", "-o", "gpt2-hf"], capsys)
    assert sorted(p.name for p in (tmp_path / "gpt2-hf").iterdir()) == [
        "config.json",
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
    ]
    assert main(["export", "runs/lm", "-o", "lm-hf"]) == 2  # widened: no Hugging Face form
    assert "d_head=12" in capsys.readouterr().err and not (tmp_path / "lm-hf").exists()


def test_an_imported_marian_translates(hf, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    out = run(["import", str(hf["marian"]), "-o", "marian"], capsys)
    assert "checkpoint: marian (task mt)" in out
    (tmp_path / "in.txt").write_text("the king is here\nand so is the queen\n")
    run(
        [
            "translate",
            "marian",
            "-i",
            "in.txt",
            "-o",
            "out.txt",
            "--beam",
            "2",
            "--max-len-a",
            "0",
            "--max-len-b",
            "4",
        ],
        capsys,
    )
    assert len((tmp_path / "out.txt").read_text().splitlines()) == 2
    tokenizer = str(hf["marian"] / "tokenizer.json")
    out = run(["import", str(hf["marian_spm"]), "--tokenizer", tokenizer, "-o", "given"], capsys)
    assert "(tokenizer from " + tokenizer in out


def test_overwrite_replaces_what_import_and_export_wrote(hf, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    run(["import", str(hf["gpt2"]), "-o", "ckpt"], capsys)
    run(["import", str(hf["gpt2"]), "-o", "ckpt", "--overwrite"], capsys)
    run(["export", "ckpt", "-o", "out"], capsys)
    run(["export", "ckpt", "-o", "out", "--overwrite"], capsys)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt", "out"]  # no temporaries left


# ------------------------------------------------------------------------------ bad input
def copy_of(hf: dict[str, Path], name: str, root: Path) -> Path:
    return Path(shutil.copytree(hf[name], root / f"my-{name}"))


def edit_config(path: Path, **changes) -> Path:
    config = json.loads((path / "config.json").read_text())
    config.update(changes)
    (path / "config.json").write_text(json.dumps(config))
    return path


def truncated(path: Path) -> Path:
    weights = path / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:5000])
    return path


def pickle_only(path: Path) -> Path:
    (path / "model.safetensors").rename(path / "pytorch_model.bin")
    return path


def untied(path: Path) -> Path:
    """GPT-2's output projection stored beside the token embedding it is tied to, but different."""
    from safetensors.torch import load_file, save_file

    weights = path / "model.safetensors"
    tensors = load_file(str(weights))
    tensors["lm_head.weight"] = tensors["transformer.wte.weight"] + 1
    save_file(tensors, str(weights), metadata={"format": "pt"})
    return path


def with_notes(path: Path) -> Path:
    (path / "notes.txt").write_text("my notes\n")
    return path


def exported(hf: dict[str, Path], root: Path) -> Path:
    assert main(["import", str(hf["gpt2"]), "-o", str(root / "ckpt")]) == 0
    assert main(["export", str(root / "ckpt"), "-o", str(root / "hf-out")]) == 0
    return root / "ckpt"


# (name, argv from the built directories and the sandbox, the error line's pattern)
CASES: list[tuple[str, Callable[[dict, Path], list[str]], str]] = [
    (
        "a directory that is not a model",
        lambda hf, r: ["import", str(r), "-o", str(r / "o")],
        r"not a Hugging Face model directory \(no config\.json\)",
    ),
    (
        "no such directory",
        lambda hf, r: ["import", str(r / "nothing"), "-o", str(r / "o")],
        r"nothing: no such directory",
    ),
    (
        "an architecture not supported",
        lambda hf, r: [
            "import",
            str(edit_config(copy_of(hf, "bert", r), architectures=["RobertaForMaskedLM"])),
            "-o",
            str(r / "o"),
        ],
        r"architecture RobertaForMaskedLM is not supported; fullrank "
        r"imports BertForPreTraining, .*GPT2LMHeadModel",
    ),
    (
        "config.json with more layers than the weights",
        lambda hf, r: [
            "import",
            str(edit_config(copy_of(hf, "bert", r), num_hidden_layers=4)),
            "-o",
            str(r / "o"),
        ],
        r"no tensor 'bert\.encoder\.layer\.3\.attention\.self\.query\."
        r"weight'.*config\.json and the weights do not match",
    ),
    (
        "config.json with fewer layers than the weights",
        lambda hf, r: ["import", str(edit_config(copy_of(hf, "gpt2", r), n_layer=1)), "-o", str(r / "o")],
        r"holds 'transformer\.h\.1\.attn\.c_attn\.bias', which a GPT2LMHeadModel with this "
        r"config\.json does not have",
    ),
    (
        "config.json with another width than the weights",
        lambda hf, r: [
            "import",
            str(edit_config(copy_of(hf, "marian", r), encoder_ffn_dim=41, decoder_ffn_dim=41)),
            "-o",
            str(r / "o"),
        ],
        r"'model\.encoder\.layers\.0\.fc1\.weight' is \(37, 24\) but config\.json describes "
        r"\(41, 24\)",
    ),
    (
        "a setting fullrank cannot represent",
        lambda hf, r: [
            "import",
            str(edit_config(copy_of(hf, "marian", r), tie_word_embeddings=False)),
            "-o",
            str(r / "o"),
        ],
        r"config\.json: tie_word_embeddings=False is not supported",
    ),
    (
        "a truncated safetensors file",
        lambda hf, r: ["import", str(truncated(copy_of(hf, "gpt2", r))), "-o", str(r / "o")],
        r"model\.safetensors: not a readable safetensors file .*truncated or corrupt",
    ),
    (
        "a pickle-only checkpoint",
        lambda hf, r: ["import", str(pickle_only(copy_of(hf, "bert", r))), "-o", str(r / "o")],
        r"holds only pytorch_model\.bin, a pickle, which fullrank never loads; convert it .*"
        r"BertForPreTraining\.from_pretrained",
    ),
    (
        "Marian's sentencepiece files",
        lambda hf, r: ["import", str(copy_of(hf, "marian_spm", r)), "-o", str(r / "o")],
        r"sentencepiece models \(source\.spm, target\.spm\).*--tokenizer FILE",
    ),
    (
        "a tokenizer of another vocabulary",
        lambda hf, r: [
            "import",
            str(copy_of(hf, "marian_spm", r)),
            "--tokenizer",
            str(hf["bert"] / "tokenizer.json"),
            "-o",
            str(r / "o"),
        ],
        r"the tokenizer \(.*\) has 97 tokens but the model's vocabulary is 90",
    ),
    (
        "import -o the user's own directory",
        lambda hf, r: ["import", str(hf["gpt2"]), "-o", str(r / "mine")],
        r"mine: already exists and is not a fullrank checkpoint",
    ),
    (
        "import -o inside the model directory",
        lambda hf, r: ["import", str(copy_of(hf, "gpt2", r)), "-o", str(r / "my-gpt2" / "fr")],
        r"is inside .*my-gpt2, which the command reads",
    ),
    (
        "export to a target that exists",
        lambda hf, r: ["export", str(exported(hf, r)), "-o", str(r / "hf-out")],
        r"hf-out: already holds a Hugging Face model directory; pass --overwrite",
    ),
    (
        "export to the source",
        lambda hf, r: ["export", str(exported(hf, r)), "-o", str(r / "ckpt"), "--overwrite"],
        r"-o .*ckpt: is the input",
    ),
    (
        "a tied copy that differs from the tensor it is tied to",
        lambda hf, r: ["import", str(untied(copy_of(hf, "gpt2", r))), "-o", str(r / "o")],
        r"'lm_head\.weight' differs from 'transformer\.wte\.weight', to which a GPT2LMHeadModel "
        r"with this config\.json ties it; set \"tie_word_embeddings\": false",
    ),
    (
        "config.json with a larger vocabulary than the weights",
        lambda hf, r: [
            "import",
            str(edit_config(copy_of(hf, "bert", r), vocab_size=10**12)),
            "-o",
            str(r / "o"),
        ],
        r"'bert\.embeddings\.word_embeddings\.weight' is \(97, 24\) but config\.json describes "
        r"\(1000000000000, 24\)",
    ),
    (
        "a setting fullrank cannot represent, in the directory named",
        lambda hf, r: [
            "import",
            str(edit_config(copy_of(hf, "bert", r), hidden_act="relu")),
            "-o",
            str(r / "o"),
        ],
        r"my-bert/config\.json: hidden_act='relu' is not supported",
    ),
    (
        "export --overwrite over a model directory holding a file of the user's",
        lambda hf, r: [
            "export",
            str(exported(hf, r)),
            "-o",
            str(with_notes(r / "hf-out")),
            "--overwrite",
        ],
        r"hf-out: holds notes\.txt, which is not part of a Hugging Face model directory; move it out",
    ),
    (
        "import --overwrite over a checkpoint holding a file of the user's",
        lambda hf, r: ["import", str(hf["gpt2"]), "-o", str(with_notes(exported(hf, r))), "--overwrite"],
        r"ckpt: holds notes\.txt, which is not part of a fullrank checkpoint; move it out",
    ),
    (
        "import --overwrite over the folder that holds its --tokenizer",
        lambda hf, r: [
            "import",
            str(hf["gpt2"]),
            "--tokenizer",
            str(exported(hf, r) / "tokenizer.json"),
            "-o",
            str(r / "ckpt"),
            "--overwrite",
        ],
        r"-o .*ckpt: contains the input",
    ),
    (
        "export over the user's own directory",
        lambda hf, r: ["export", str(exported(hf, r)), "-o", str(r / "mine"), "--overwrite"],
        r"mine: already exists and is not a Hugging Face model directory",
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_one_line_and_nothing_is_lost(case, hf, tmp_path, capsys, monkeypatch):
    _, argv, pattern = case
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("my notes\n")
    (tmp_path / "cwd").mkdir()
    monkeypatch.chdir(tmp_path / "cwd")
    args = argv(hf, tmp_path)
    capsys.readouterr()
    before = snapshot(tmp_path)
    code = main(args)
    assert_one_line_error(code, capsys.readouterr().err, pattern)
    assert_kept(before, snapshot(tmp_path))
    assert not (tmp_path / "o").exists()
