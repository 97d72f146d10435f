"""``fullrank import`` / ``fullrank export`` against Hugging Face ``transformers``, on tiny odd-sized
models built offline and written with ``save_pretrained`` (:mod:`tests.reference.hf_models`):

- an imported model computes what the Hugging Face model computes (every head's outputs, with
  padding), within float32 rounding: BERT, the pre-LN RoBERTa-PreLayerNorm, GPT-2, Marian;
- import → export → ``from_pretrained`` gives back every tensor exactly, with nothing missing
  or unexpected, and the tokenizer gives the same ids as ``transformers``' on the way in and
  out;
- an imported model, widened, computes the same function;
- fullrank's own models export where Hugging Face can hold them, and are refused in one line
  where it cannot.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
import torch
from torch import nn

from fullrank.analysis.widen import widen
from fullrank.data.tokenizers import Tokenizer
from fullrank.errors import CheckpointError
from fullrank.interop.huggingface import export_hf, import_hf
from fullrank.models import DecoderLM, Encoder, EncoderDecoder
from fullrank.training.checkpoints import load_checkpoint
from tests.reference.hf_models import (
    BERT_CLASSES,
    PRE_LN_CLASSES,
    SAMPLES,
    bert_dir,
    gpt2_dir,
    marian_dir,
    transformers,
)

pytestmark = pytest.mark.reference

DIRS: dict[str, Callable[[Path], Path]] = {
    **{cls: functools.partial(bert_dir, cls=cls) for cls in BERT_CLASSES + PRE_LN_CLASSES},
    "BertForMaskedLM (vocab.txt)": lambda root: bert_dir(root, "BertForMaskedLM", legacy_vocab=True),
    "BertForMaskedLM (untied)": lambda root: bert_dir(root, "BertForMaskedLM", tie_word_embeddings=False),
    "RobertaPreLayerNormForMaskedLM (untied)": lambda root: bert_dir(
        root, "RobertaPreLayerNormForMaskedLM", tie_word_embeddings=False
    ),
    "GPT2LMHeadModel": lambda root: gpt2_dir(root),
    "GPT2LMHeadModel (vocab.json + merges.txt)": lambda root: gpt2_dir(root, legacy_vocab=True),
    "GPT2LMHeadModel (untied)": lambda root: gpt2_dir(root, tie_word_embeddings=False),
    "MarianMTModel": lambda root: marian_dir(root),
}


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """Each Hugging Face directory, built once, and its import; by the names of ``DIRS``."""
    root = tmp_path_factory.mktemp("hf")
    out = {}
    for name, make in DIRS.items():
        where = root / name.replace(" ", "_").replace("(", "").replace(")", "").replace("+", "")
        where.mkdir()
        hf_dir = make(where)
        report = import_hf(hf_dir, where / "imported")
        out[name] = (hf_dir, report)
    return out


M = TypeVar("M", bound=nn.Module)


def loaded(path: Path, kind: type[M]) -> M:
    """The model of the checkpoint at ``path``, checked to be a ``kind``."""
    model = load_checkpoint(path).model
    assert isinstance(model, kind), type(model)
    return model


def tokenizer_of(path: Path) -> Tokenizer:
    tok = load_checkpoint(path).tokenizer
    assert tok is not None
    return tok


def hf_model(hf_dir, architecture):
    return getattr(transformers, architecture).from_pretrained(hf_dir).eval()


def batch(vocab: int, *, rows: int = 5, length: int = 11, low: int = 5):
    gen = torch.Generator().manual_seed(3)
    tokens = torch.randint(low, vocab, (rows, length), generator=gen)
    keep = torch.ones(rows, length, dtype=torch.bool)
    keep[2, 7:] = False
    keep[4, 3:] = False
    return tokens, keep


ENCODERS = [c for c in DIRS if c.startswith(("Bert", "Roberta"))]


@pytest.mark.parametrize("name", ENCODERS)
def test_imported_bert_computes_what_hugging_face_computes(models, name):
    hf_dir, report = models[name]
    ours = loaded(report.path, Encoder)
    hf = hf_model(hf_dir, report.architecture)
    tokens, keep = batch(ours.config.vocab_size)
    segments = (torch.arange(11) >= 6).long().expand(5, 11)
    kw = dict(input_ids=tokens, token_type_ids=segments, attention_mask=keep.long())
    with torch.no_grad():
        h = ours(tokens, segments=segments, mask=keep)
        if report.architecture.endswith("Model"):
            ref = hf(**kw)
            torch.testing.assert_close(h[keep], ref.last_hidden_state[keep], atol=1e-5, rtol=1e-5)
            torch.testing.assert_close(ours.pooled(h), ref.pooler_output, atol=1e-5, rtol=1e-5)
            return
        ref = hf(**kw, output_hidden_states=True)
        if not ours.config.norm_first:  # a pre-LN model's final norm comes after its last hidden state
            torch.testing.assert_close(h[keep], ref.hidden_states[-1][keep], atol=1e-5, rtol=1e-5)
        if report.architecture == "BertForPreTraining":
            torch.testing.assert_close(
                ours.mlm_logits(h)[keep], ref.prediction_logits[keep], atol=1e-4, rtol=1e-5
            )
            torch.testing.assert_close(ours.nsp_logits(h), ref.seq_relationship_logits, atol=1e-5, rtol=1e-5)
        elif report.architecture.endswith("ForMaskedLM"):
            torch.testing.assert_close(ours.mlm_logits(h)[keep], ref.logits[keep], atol=1e-4, rtol=1e-5)
        elif report.architecture.endswith("ForSequenceClassification"):
            torch.testing.assert_close(ours.class_logits(h), ref.logits, atol=1e-5, rtol=1e-5)
        else:
            span = ours.span_logits(h)
            torch.testing.assert_close(span[..., 0][keep], ref.start_logits[keep], atol=1e-5, rtol=1e-5)
            torch.testing.assert_close(span[..., 1][keep], ref.end_logits[keep], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name", ["GPT2LMHeadModel", "GPT2LMHeadModel (untied)"])
def test_imported_gpt2_computes_what_hugging_face_computes(models, name):
    hf_dir, report = models[name]
    ours = loaded(report.path, DecoderLM)
    hf = hf_model(hf_dir, "GPT2LMHeadModel")
    tokens, keep = batch(ours.config.vocab_size)
    with torch.no_grad():
        got = ours(tokens, mask=keep)
        ref = hf(input_ids=tokens, attention_mask=keep.long()).logits
    torch.testing.assert_close(got[keep], ref[keep], atol=1e-4, rtol=1e-5)


def test_imported_marian_computes_what_hugging_face_computes(models):
    hf_dir, report = models["MarianMTModel"]
    ours = loaded(report.path, EncoderDecoder)
    assert ours.config.output_bias and ours.config.activation == "silu"
    hf = hf_model(hf_dir, "MarianMTModel")
    src, keep = batch(ours.config.vocab_size - 1, low=2)
    tgt = torch.randint(2, ours.config.vocab_size - 1, (5, 7))
    with torch.no_grad():
        got = ours(src, tgt, src_mask=keep)
        ref = hf(input_ids=src, attention_mask=keep.long(), decoder_input_ids=tgt).logits
    torch.testing.assert_close(got, ref, atol=1e-4, rtol=1e-5)


@pytest.mark.parametrize("name", list(DIRS))
def test_import_then_export_gives_back_every_tensor(models, name, tmp_path):
    """Every tensor transformers reads comes back exactly. An untied MLM head's own bias is
    not read (transformers adds the decoder's): export writes the decoder's bias into it."""
    hf_dir, report = models[name]
    exported = export_hf(report.path, tmp_path / "exported")
    original = hf_model(hf_dir, report.architecture)
    back, info = getattr(transformers, exported.architecture).from_pretrained(
        exported.path, output_loading_info=True
    )
    assert not any(info.values()), info
    assert exported.architecture == report.architecture
    theirs, ours = original.state_dict(), back.state_dict()
    assert set(ours) == set(theirs)
    unread = {"cls.predictions.bias", "lm_head.bias"} if "(untied)" in name and "GPT2" not in name else set()
    for key, value in theirs.items():
        if key in unread:
            decoder = key.replace(".bias", ".decoder.bias")
            assert torch.equal(ours[key], theirs[decoder]) and not torch.equal(ours[key], value), key
        else:
            assert torch.equal(ours[key], value), key


@pytest.mark.parametrize("name", [n for n in DIRS if not n.startswith("Marian")])
def test_the_tokenizer_gives_the_ids_of_transformers_in_and_out(models, name, tmp_path):
    hf_dir, report = models[name]
    tok = tokenizer_of(report.path)
    exported = export_hf(report.path, tmp_path / "exported").path
    for directory in (hf_dir, exported):
        theirs = transformers.AutoTokenizer.from_pretrained(directory)
        for text in SAMPLES:
            assert tok.encode(text) == theirs(text, add_special_tokens=False).input_ids, text
    if name.startswith(("Bert", "Roberta")):  # the exported tokenizer frames pairs as BERT does
        pair = transformers.AutoTokenizer.from_pretrained(exported)("a man", "the king")
        ids = tok.encode("a man"), tok.encode("the king")
        assert pair.input_ids == [tok.cls_id, *ids[0], tok.sep_id, *ids[1], tok.sep_id]
        assert pair.token_type_ids == [0] * (len(ids[0]) + 2) + [1] * (len(ids[1]) + 1)


def test_marian_tokenizer_round_trips(models, tmp_path):
    hf_dir, report = models["MarianMTModel"]
    tok = tokenizer_of(report.path)
    assert (tok.pad_id, tok.bos_id, tok.eos_id) == (tok.vocab_size - 1, tok.vocab_size - 1, 0)
    theirs = transformers.AutoTokenizer.from_pretrained(export_hf(report.path, tmp_path / "e").path)
    for text in SAMPLES:
        assert theirs(text).input_ids == tok.encode(text) + [tok.eos_id]  # Marian ends with </s>


@pytest.mark.parametrize("name", ["BertForPreTraining", "GPT2LMHeadModel", "MarianMTModel"])
def test_an_imported_model_widened_computes_the_same_function(models, name):
    _, report = models[name]
    model = load_checkpoint(report.path).model
    assert isinstance(model, (EncoderDecoder, DecoderLM, Encoder))
    wide = widen(model, d_head=11)
    assert isinstance(wide, type(model)) and wide.config.head_sizes == (11, 11)
    tokens, keep = batch(model.config.vocab_size - 1)
    with torch.no_grad():
        if isinstance(model, EncoderDecoder):
            before, after = model(tokens, tokens, src_mask=keep), wide(tokens, tokens, src_mask=keep)
        elif isinstance(model, DecoderLM):
            before, after = model(tokens, mask=keep), wide(tokens, mask=keep)
        else:
            assert isinstance(wide, Encoder)
            h, hw = model(tokens, mask=keep), wide(tokens, mask=keep)
            before, after = model.mlm_logits(h), wide.mlm_logits(hw)
    torch.testing.assert_close(after[keep], before[keep], atol=1e-5, rtol=0)


def test_a_widened_model_is_refused_in_one_line(models, tmp_path):
    from fullrank.training.checkpoints import write_checkpoint

    _, report = models["GPT2LMHeadModel"]
    ckpt = load_checkpoint(report.path)
    wide = widen(ckpt.model, d_head=11)
    assert isinstance(wide, DecoderLM)
    write_checkpoint(tmp_path / "wide", wide, wide.config, ckpt.tokenizer, {"task": "lm"})
    with pytest.raises(
        CheckpointError,
        match=r"d_head=11, d_value=11 with d_model=24 and "
        r"n_heads=4: GPT2LMHeadModel cannot hold it "
        r"\(its heads are d_model / n_heads = 6 wide",
    ):
        export_hf(tmp_path / "wide", tmp_path / "out")
    assert not (tmp_path / "out").exists()


def _native(tmp_path, family: str, **fields):
    """A fullrank model of ``family`` with a tokenizer of fullrank's own, written as a
    checkpoint: (path, model)."""
    from fullrank.data.tokenizers import Tokenizer, TokenizerKind
    from fullrank.models import (
        DecoderLM,
        DecoderLMConfig,
        Encoder,
        EncoderConfig,
        EncoderDecoder,
        EncoderDecoderConfig,
    )
    from fullrank.training.checkpoints import write_checkpoint
    from tests.reference.hf_models import TEXT

    (tmp_path / "text.txt").write_text("\n".join(TEXT), encoding="utf-8")
    kind: TokenizerKind = "wordpiece" if family == "encoder" else "bpe"
    tok = Tokenizer.train(kind, [tmp_path / "text.txt"], 83)
    sizes = dict(
        vocab_size=tok.vocab_size,
        d_model=24,
        n_heads=4,
        d_ff=37,
        n_layers=2,
        max_len=40,
        seq_len=16,
        dropout=0.0,
        **fields,
    )
    torch.manual_seed(0)
    model = {
        "lm": lambda: DecoderLM(DecoderLMConfig(**sizes)),
        "mt": lambda: EncoderDecoder(EncoderDecoderConfig(**sizes)),
        "encoder": lambda: Encoder(EncoderConfig(attn_dropout=0.0, **sizes)),
    }[family]()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name or "bias" in name:
                p.uniform_(-0.5, 0.5)
    write_checkpoint(tmp_path / family, model, getattr(model, "config"), tok, {"task": None})
    return tmp_path / family, model.eval()


def test_fullrank_models_that_hugging_face_can_hold_export_with_the_same_outputs(tmp_path):
    lm_path, lm = _native(
        tmp_path, "lm", norm_first=True, positions="learned", activation="gelu_tanh", scale_embeddings=False
    )
    mt_path, mt = _native(tmp_path, "mt", positions="sinusoidal_halves", output_bias=True)
    enc_path, enc = _native(tmp_path, "encoder")
    tokens, keep = batch(lm.config.vocab_size)
    with torch.no_grad():
        hf = hf_model(export_hf(lm_path, tmp_path / "hf_lm").path, "GPT2LMHeadModel")
        torch.testing.assert_close(hf(input_ids=tokens).logits, lm(tokens), atol=1e-4, rtol=1e-5)
        hf = hf_model(export_hf(mt_path, tmp_path / "hf_mt").path, "MarianMTModel")
        torch.testing.assert_close(
            hf(input_ids=tokens, attention_mask=keep.long(), decoder_input_ids=tokens[:, :6]).logits,
            mt(tokens, tokens[:, :6], src_mask=keep),
            atol=1e-4,
            rtol=1e-5,
        )
        hf = hf_model(export_hf(enc_path, tmp_path / "hf_enc").path, "BertForPreTraining")
        ref = hf(input_ids=tokens, attention_mask=keep.long())
        h = enc(tokens, mask=keep)
        torch.testing.assert_close(ref.prediction_logits[keep], enc.mlm_logits(h)[keep], atol=1e-4, rtol=1e-5)
        torch.testing.assert_close(ref.seq_relationship_logits, enc.nsp_logits(h), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(
    "fields",
    [
        {},
        {"pretraining_heads": False, "n_classes": 3},
        {"pretraining_heads": False, "span_head": True},
        {"pretraining_heads": False, "pooler": True},
    ],
    ids=["ForMaskedLM", "ForSequenceClassification", "ForQuestionAnswering", "Model"],
)
@pytest.mark.parametrize("norm_first", [True, False], ids=["pre-LN", "post-LN"])
def test_an_encoder_with_a_fixed_sinusoid_and_scaled_embeddings_exports_the_same_function(
    tmp_path, fields, norm_first
):
    """The Wikipedia recipe's encoder (pre-LN, sinusoidal positions, embeddings scaled by √D,
    mimetic attention start) → ``RobertaPreLayerNorm…``; post-LN → ``Bert…`` (without NSP). The
    sinusoid becomes learned positions holding its values, the scale moves into the token
    embedding, and a tied MLM decoder keeps the unscaled matrix; imported back, the model
    computes the same function again."""
    path, enc = _native(
        tmp_path,
        "encoder",
        norm_first=norm_first,
        next_sentence=False,
        positions="sinusoidal",
        scale_embeddings=True,
        attn_init="mimetic",
        **fields,
    )
    exported = export_hf(path, tmp_path / "hf")
    family = "RobertaPreLayerNorm" if norm_first else "Bert"
    suffix = next(
        s
        for s in ("ForMaskedLM", "ForSequenceClassification", "ForQuestionAnswering", "Model")
        if exported.architecture.endswith(s)
    )
    assert exported.architecture == family + suffix
    hf, info = getattr(transformers, exported.architecture).from_pretrained(
        exported.path, output_loading_info=True
    )
    assert not any(info.values()), info
    back = loaded(import_hf(exported.path, tmp_path / "back").path, Encoder)
    tokens, keep = batch(enc.config.vocab_size)
    segments = (torch.arange(11) >= 6).long().expand(5, 11)
    with torch.no_grad():
        ref = hf.eval()(input_ids=tokens, token_type_ids=segments, attention_mask=keep.long())
        for model in (enc, back):
            h = model(tokens, segments=segments, mask=keep)
            if suffix == "ForMaskedLM":
                got, want = model.mlm_logits(h)[keep], ref.logits[keep]
            elif suffix == "ForSequenceClassification":
                got, want = model.class_logits(h), ref.logits
            elif suffix == "ForQuestionAnswering":
                got, want = model.span_logits(h)[..., 0][keep], ref.start_logits[keep]
            else:
                got, want = (
                    torch.cat([h[keep], model.pooled(h)]),
                    torch.cat([ref.last_hidden_state[keep], ref.pooler_output]),
                )
            torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-5)


def test_a_roberta_whose_padding_id_is_not_its_tokenizer_s_is_refused(models, tmp_path):
    """RoBERTa's positions are counted from its padding id: with another id, every position
    would be read from another row."""
    import json
    import shutil

    hf_dir, _ = models["RobertaPreLayerNormForMaskedLM"]
    shutil.copytree(hf_dir, tmp_path / "other_pad")
    config = json.loads((tmp_path / "other_pad" / "config.json").read_text())
    config["pad_token_id"] += 1
    (tmp_path / "other_pad" / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match=r"pad_token_id=1 but the tokenizer's padding token is id 0"):
        import_hf(tmp_path / "other_pad", tmp_path / "imported")
    config["pad_token_id"] = None
    (tmp_path / "other_pad" / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match=r"pad_token_id=None is not a token id; RoBERTa counts"):
        import_hf(tmp_path / "other_pad", tmp_path / "imported")
    assert not (tmp_path / "imported").exists()


@pytest.mark.parametrize(
    "family,fields,message",
    [
        ("lm", {}, r"norm_first=False: GPT2LMHeadModel cannot hold it \(GPT-2's blocks are pre-LN\)"),
        (
            "mt",
            {},
            r"positions=sinusoidal: MarianMTModel cannot hold it \(transformers computes "
            r"Marian's own sinusoid",
        ),
        (
            "encoder",
            {"d_head": 8},
            r"d_head=8, d_value=8 with d_model=24 and n_heads=4: "
            r"BertForPreTraining cannot hold it",
        ),
        (
            "encoder",
            {"norm_first": True},
            r"next_sentence=True: RobertaPreLayerNormForMaskedLM cannot hold it "
            r"\(it has no next-sentence head\)",
        ),
    ],
)
def test_settings_hugging_face_cannot_hold_are_refused_in_one_line(tmp_path, family, fields, message):
    path, _ = _native(tmp_path, family, **fields)
    with pytest.raises(CheckpointError, match=message) as e:
        export_hf(path, tmp_path / "out")
    assert "\n" not in str(e.value)
    assert not (tmp_path / "out").exists()


def test_older_checkpoints_with_buffers_tied_copies_and_shards_import(models, tmp_path):
    """The layouts of checkpoints written by older ``transformers``: GPT-2 without its
    ``transformer.`` prefix, with the causal-mask buffers and the tied head, in two shards;
    BERT with its ``position_ids`` buffer and the tied MLM decoder."""
    import json
    import shutil

    from safetensors.torch import save_file

    hf_dir, _ = models["GPT2LMHeadModel"]
    hf = hf_model(hf_dir, "GPT2LMHeadModel")
    old = tmp_path / "gpt2-old"
    shutil.copytree(hf_dir, old)
    (old / "model.safetensors").unlink()
    state = {k.removeprefix("transformer."): v.contiguous() for k, v in hf.state_dict().items()}
    state["lm_head.weight"] = state["wte.weight"].clone()
    for i in range(2):
        state[f"h.{i}.attn.bias"] = torch.tril(torch.ones(1, 1, 43, 43))
    names = sorted(state)
    shards = {"model-00001-of-00002.safetensors": names[:10], "model-00002-of-00002.safetensors": names[10:]}
    for shard, keys in shards.items():
        save_file({k: state[k] for k in keys}, str(old / shard))
    (old / "model.safetensors.index.json").write_text(
        json.dumps({"weight_map": {k: shard for shard, keys in shards.items() for k in keys}})
    )
    report = import_hf(old, tmp_path / "gpt2-imported")
    assert [n for n, _ in report.conversion.dropped] == ["h.0.attn.bias", "h.1.attn.bias", "lm_head.weight"]
    tokens, keep = batch(hf.config.vocab_size)
    with torch.no_grad():
        torch.testing.assert_close(
            load_checkpoint(report.path).model(tokens), hf(input_ids=tokens).logits, atol=1e-4, rtol=1e-5
        )

    hf_dir, _ = models["BertForPreTraining"]
    hf = hf_model(hf_dir, "BertForPreTraining")
    old = tmp_path / "bert-old"
    shutil.copytree(hf_dir, old)
    state = {k: v.contiguous().clone() for k, v in hf.state_dict().items()}
    state["bert.embeddings.position_ids"] = torch.arange(43)[None]
    save_file(state, str(old / "model.safetensors"))
    report = import_hf(old, tmp_path / "bert-imported")
    assert dict(report.conversion.dropped) == {
        "bert.embeddings.position_ids": "a buffer of the positions 0, 1, …",
        "cls.predictions.decoder.bias": "the same tensor as cls.predictions.bias",
        "cls.predictions.decoder.weight": "tied to embeddings.word_embeddings.weight",
    }


def test_the_mapping_tables_of_the_docs_are_the_code_s():
    from pathlib import Path

    from fullrank.models import DecoderLMConfig, EncoderConfig, EncoderDecoderConfig
    from fullrank.models.convert_hf import (
        bert_layout,
        gpt2_layout,
        hf_names,
        marian_layout,
        roberta_prelayernorm_layout,
    )

    doc = (Path(__file__).resolve().parents[2] / "docs" / "import-export.md").read_text()
    sizes: dict[str, Any] = dict(vocab_size=10, d_model=8, n_heads=2, n_layers=2, max_len=8, seq_len=8)
    layouts = [
        bert_layout(EncoderConfig(n_classes=3, span_head=True, **sizes)),
        roberta_prelayernorm_layout(
            EncoderConfig(norm_first=True, next_sentence=False, n_classes=3, span_head=True, **sizes)
        ),
        gpt2_layout(DecoderLMConfig(**sizes)),
        marian_layout(EncoderDecoderConfig(output_bias=True, **sizes)),
    ]
    for layout in layouts:
        for ours, theirs in hf_names(layout):
            assert f"| `{ours}` | `{theirs}` |" in doc, (layout.architecture, ours)


@pytest.mark.parametrize("name", ["BertForSequenceClassification", "BertModel"])
def test_a_bert_config_that_names_no_class_is_read_by_its_tensors(models, name, tmp_path):
    import json
    import shutil

    hf_dir, _ = models[name]
    shutil.copytree(hf_dir, tmp_path / "nameless")
    config = json.loads((tmp_path / "nameless" / "config.json").read_text())
    del config["architectures"]
    (tmp_path / "nameless" / "config.json").write_text(json.dumps(config))
    report = import_hf(tmp_path / "nameless", tmp_path / "imported")
    assert report.architecture == name
    assert export_hf(report.path, tmp_path / "exported").architecture == name


@pytest.mark.parametrize(
    "name, copy, source",
    [
        ("BertForMaskedLM", "cls.predictions.decoder.weight", "bert.embeddings.word_embeddings.weight"),
        ("BertForPreTraining", "cls.predictions.decoder.bias", "cls.predictions.bias"),
        ("GPT2LMHeadModel", "lm_head.weight", "transformer.wte.weight"),
        ("MarianMTModel", "lm_head.weight", "model.shared.weight"),
        ("MarianMTModel", "model.decoder.embed_tokens.weight", "model.shared.weight"),
    ],
)
def test_a_tied_copy_that_differs_from_its_source_is_refused(models, name, copy, source, tmp_path):
    """A checkpoint that stores a tied copy with other values computes another function in
    ``transformers`` (which then leaves the two untied): import refuses it instead of dropping it;
    the same copy stored equal imports, and is listed as dropped."""
    import shutil

    from safetensors.torch import load_file, save_file

    hf_dir, _ = models[name]
    for differs in (False, True):
        where = tmp_path / f"{differs}"
        shutil.copytree(hf_dir, where)
        tensors = load_file(str(where / "model.safetensors"))
        tensors[copy] = tensors[source] + (1 if differs else 0)
        save_file(tensors, str(where / "model.safetensors"), metadata={"format": "pt"})
        if differs:
            with pytest.raises(CheckpointError, match=f"'{copy}' differs from '{source}', to which"):
                import_hf(where, tmp_path / "refused")
            assert not (tmp_path / "refused").exists()
        else:
            report = import_hf(where, tmp_path / "imported")
            assert copy in dict(report.conversion.dropped)
