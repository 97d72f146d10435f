"""Sweep files: points, parameter matching against the built models, bad input in one line, and
an output folder that is never someone else's."""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path

import pytest
import torch

from fullrank.cli import main
from fullrank.errors import ConfigError
from fullrank.models import build_model
from fullrank.recipes import bert as bert_recipe
from fullrank.recipes.config import Experiment, parse_assignment
from fullrank.sweeps.plan import Point, claim_output, load_sweep, own_threads, plan, train_command
from tests.e2e.lm_fixture import tiny_experiment
from tests.helpers import shared_data

REPO = Path(__file__).resolve().parents[2]
SHIPPED = sorted((REPO / "configs" / "sweeps").glob("*.yaml"))
SHIPPED_CACHE: dict = {}  # the Wikipedia sweeps share one vocabulary: trained once per worker

TOY = """
name: toy
base: tiny.yaml
seeds: [0, 1]
axes:
  model.n_heads: [2, 4]
arms:
  fixed: {model.d_head: 5, model.d_value: null}
  standard: {model.d_head: null, model.d_value: null}
match: {target: fixed, solve_for: model.d_ff, tolerance: 0.05}
"""


def toy_sweep(tmp_path: Path, text: str = TOY, **kw) -> Path:
    tiny_experiment(tmp_path, **kw)
    path = tmp_path / "sweep.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def experiment_of(p: Point) -> Experiment:
    """A planned point's experiment (``plan`` sets it)."""
    assert p.experiment is not None
    return p.experiment


def test_points_cross_axes_arms_and_seeds_and_match_the_target(tmp_path):
    the_plan = plan(load_sweep(toy_sweep(tmp_path)), tmp_path / "out")
    assert [p.name for p in the_plan.points] == [
        "fixed-n_heads2-s0",
        "fixed-n_heads2-s1",
        "fixed-n_heads4-s0",
        "fixed-n_heads4-s1",
        "standard-n_heads2-s0",
        "standard-n_heads2-s1",
        "standard-n_heads4-s0",
        "standard-n_heads4-s1",
    ]
    by = {p.name: p for p in the_plan.points}
    for h in (2, 4):
        fixed, standard = by[f"fixed-n_heads{h}-s0"], by[f"standard-n_heads{h}-s0"]
        assert fixed.match == "target" and standard.match.startswith("matched: d_ff=")
        assert standard.model.head_sizes == (24 // h, 24 // h)
        assert abs(standard.params - fixed.params) / fixed.params <= 0.05
        assert f"model.d_ff={standard.model.d_ff}" in standard.overrides
    for p in the_plan.points:  # the counts are the built models', vocabulary from the tokenizer
        assert p.params == sum(q.numel() for q in build_model(p.model).parameters())
        assert experiment_of(p).model_config(p.model.vocab_size) == p.model


def test_command_line_overrides_win_over_the_sweep_file(tmp_path):
    text = TOY + "steps: 6\nset: {train.lr: 0.01}\n"
    text = text.replace("fixed: {model.d_head: 5,", "fixed: {model.dropout: 0.2, model.d_head: 5,")
    sweep = load_sweep(toy_sweep(tmp_path, text))
    before = plan(sweep, tmp_path / "out").points
    assert {
        (p.arm, experiment_of(p).train.steps, experiment_of(p).train.lr, experiment_of(p).model["dropout"])
        for p in before
    } == {("fixed", 6, 0.01, 0.2), ("standard", 6, 0.01, 0.1)}
    overridden = sweep.with_overrides(
        dict(parse_assignment(item) for item in ["train.steps=3", "train.lr=0.002", "model.dropout=0.0"])
    )
    after = plan(overridden, tmp_path / "out").points
    assert [p.name for p in after] == [p.name for p in before]
    assert {
        (experiment_of(p).train.steps, experiment_of(p).train.lr, experiment_of(p).model["dropout"])
        for p in after
    } == {(3, 0.002, 0.0)}
    # each point's command line gives them after the file's values (`fullrank train` applies
    # the last value of a key)
    for p in after:
        last = dict(item.split("=", 1) for item in p.overrides)
        assert (last["train.steps"], last["train.lr"], last["model.dropout"]) == ("3", "0.002", "0.0")


def test_a_key_set_point_by_point_cannot_be_overridden(tmp_path):
    text = TOY.replace("standard: {", "standard: {init_from: fixed, ")
    sweep = load_sweep(toy_sweep(tmp_path, text))
    for key, why in (
        ("model.n_heads", "an axis"),
        ("train.seed", "its seeds"),
        ("model.d_ff", "match.solve_for"),
        ("train.init_from", "an arm's init_from"),
    ):
        with pytest.raises(ConfigError, match=rf"override '{key}': .*point by point \({why}\)"):
            sweep.with_overrides({key: 1})
    assert sweep.with_overrides({"train.lr": 0.1}).cli == {"train.lr": 0.1}


def test_a_points_own_thread_count_is_kept_and_the_others_take_the_runners_share(tmp_path):
    sweep = load_sweep(toy_sweep(tmp_path, TOY + "set: {train.threads: 3}\n"))
    fixed = plan(sweep, tmp_path / "out").points[0]
    free = plan(load_sweep(toy_sweep(tmp_path)), tmp_path / "out").points[0]
    assert own_threads(fixed) == "3" and own_threads(free) is None
    for point, want in ((fixed, "3"), (free, "2")):
        command = train_command(point, tmp_path / "out", threads=2)
        assert [a for a in command if a.startswith("train.threads=")][-1] == f"train.threads={want}"
    assert not any(a.startswith("train.threads=") for a in train_command(free, tmp_path / "out"))


@pytest.mark.parametrize("path", SHIPPED, ids=[p.stem for p in SHIPPED])
def test_shipped_sweep_files_load(path):
    sweep = load_sweep(path)
    assert sweep.base.is_file() and sweep.arms and all(a.seeds for a in sweep.arms.values())


def test_table3_sweep_carries_the_papers_figures():
    from fullrank.models.presets import TABLE3

    paper = {r.name: r for r in TABLE3}
    sweep = load_sweep(REPO / "configs" / "sweeps" / "v17_table3.yaml")
    assert len(sweep.arms) == 20 and set(sweep.reference) == set(sweep.arms)
    for ref in sweep.reference.values():
        row = paper[ref["paper_row"]]
        assert (ref["paper_PPL"], ref["paper_BLEU"]) == (row.paper_ppl, row.paper_bleu)
        assert ref.get("paper_params_M") == row.paper_params


@pytest.fixture(scope="module")
def vocabularies(tmp_path_factory):
    """Where the shipped sweeps' planned vocabularies are kept (not the repository's cache)."""
    return tmp_path_factory.mktemp("cache")


@pytest.mark.parametrize("path", SHIPPED, ids=[p.stem for p in SHIPPED])
def test_shipped_sweeps_count_the_models_they_build(path, monkeypatch, vocabularies):
    """Every point of every shipped sweep: closed form = sum(p.numel()) of the built model, and
    matched points within the stated tolerance."""
    shared_data()
    monkeypatch.chdir(REPO)  # the experiment files' data.root is relative to the repository
    # a vocabulary from the first 300 documents of the corpus instead of a tenth of the dump:
    # the counts take its size whatever it is, and it trains in seconds instead of a minute
    documents = bert_recipe.iter_documents
    monkeypatch.setattr(bert_recipe, "iter_documents", lambda *a: itertools.islice(documents(*a), 300))
    sweep = load_sweep(path).with_overrides({"data.cache_dir": str(vocabularies)})
    the_plan = plan(sweep, REPO / "runs" / "sweeps" / sweep.name, cache=SHIPPED_CACHE)
    assert not the_plan.unmatched, the_plan.unmatched[0].match
    named = {
        Path(o.split("=", 1)[1]).name
        for p in the_plan.points
        for o in p.overrides
        if o.startswith("data.tokenizer_file=")
    }
    assert set(the_plan.tokenizers) == named  # what it saves under OUT: its own, not the cache's
    seen = set()
    for p in the_plan.points:
        if p.group in seen:
            continue
        seen.add(p.group)
        with torch.device("meta"):  # shapes only: no memory, no time
            model = build_model(p.model)
        assert p.params == sum(q.numel() for q in model.parameters()), p.group
        if sweep.match is not None and p.arm in sweep.match.arms:
            target = next(
                q
                for q in the_plan.points
                if q.arm == sweep.match.target and all(p.coords.get(k) == v for k, v in q.coords.items())
            )
            assert abs(p.params - target.params) <= sweep.match.tolerance * target.params


def test_an_arm_may_start_from_another_through_a_yaml_merge_key(tmp_path):
    text = TOY.replace("  fixed: {", "  fixed: &fixed {")
    text = text.replace("match:", "  fixed_lr: {<<: *fixed, train.lr: 0.002}\nmatch:")
    arms = load_sweep(toy_sweep(tmp_path, text)).arms
    assert arms["fixed_lr"].set == {**arms["fixed"].set, "train.lr": 0.002}


@pytest.mark.parametrize(
    "text,expected",
    [
        (
            TOY.replace("model.n_heads: [2, 4]", "model.n_head: [2, 4]"),
            "unknown key 'model.n_head' (did you mean 'model.n_heads'?)",
        ),
        (TOY.replace("model.n_heads: [2, 4]", "model.n_heads: []"), "axes: 'model.n_heads' is empty"),
        (TOY.replace("seeds: [0, 1]", "seeds: [0, one]"), "seeds.1 = 'one': should be a valid integer"),
        (TOY.replace("seeds: [0, 1]", "seeds: [0, 1.5]"), "seeds.1 = 1.5: should be a valid integer"),
        (
            TOY.replace("seeds: [0, 1]", "seeds: [0, 1]\nseeds: [2]"),
            "key 'seeds' appears twice in this mapping (first on line 4); keep one",
        ),
        (TOY.replace("seeds: [0, 1]", "seeds: [0, 0]"), "must be a non-empty list of distinct"),
        (
            TOY.replace("tolerance: 0.05", "tolerance: 5e-2, count: all"),
            "match.count = 'all': should be 'total' or 'non_embedding'",
        ),
        (
            TOY.replace("tolerance: 0.05", "tolerance: 0.000001"),
            "point standard-n_heads2 is unmatched: the nearest, d_ff=",
        ),
        (TOY.replace("model.n_heads: [2, 4]", "model.n_heads: [2, 5]"), "point standard (model.n_heads=5)"),
        (TOY.replace("target: fixed", "target: fixd"), "match.target 'fixd' is not an arm (did you mean"),
        (TOY.replace("match:", "mtch:"), "unknown key 'mtch' (did you mean 'match'?)"),
    ],
)
def test_bad_sweep_files_are_one_line(tmp_path, capsys, text, expected):
    path = toy_sweep(tmp_path, text)
    assert main(["sweep", str(path), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert expected in err and err.count("\n") == 1, err
    assert not (tmp_path / "out").exists()  # nothing was started


def test_dry_run_prints_every_point_and_writes_nothing(tmp_path, capsys):
    path = toy_sweep(tmp_path)
    assert main(["sweep", str(path), "--dry-run", "--out", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    for text in ("standard-n_heads4", "fixed-n_heads2", "target", "matched: d_ff=", "non-emb", "FLOPs/token"):
        assert text in out
    assert not (tmp_path / "out").exists()


def test_output_folder_that_is_not_this_sweeps_is_refused(tmp_path, capsys):
    path = toy_sweep(tmp_path)
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "thesis.tex").write_text("keep me")
    assert main(["sweep", str(path), "--out", str(mine)]) == 2
    assert "is not a sweep's output folder" in capsys.readouterr().err
    assert sorted(p.name for p in mine.iterdir()) == ["thesis.tex"]

    the_plan = plan(load_sweep(path), tmp_path / "out")
    claim_output(the_plan, tmp_path / "out")
    (tmp_path / "out" / the_plan.points[0].name).mkdir()  # a point trained with other settings
    changed = plan(
        load_sweep(toy_sweep(tmp_path, TOY.replace("seeds: [0, 1]", "seeds: [0, 1]\nsteps: 3"))),
        tmp_path / "out",
    )
    with pytest.raises(ConfigError, match="was trained with other settings"):
        claim_output(changed, tmp_path / "out")
    other = plan(load_sweep(toy_sweep(tmp_path, TOY.replace("name: toy", "name: other"))), tmp_path / "out")
    with pytest.raises(ConfigError, match="holds sweep 'toy'"):
        claim_output(other, tmp_path / "out")
    assert json.loads((tmp_path / "out" / "sweep.json").read_text())["sweep"] == "toy"
    # the same overrides recorded in another order set the same things: the point is the same
    record = json.loads((tmp_path / "out" / "sweep.json").read_text())
    first = the_plan.points[0].name
    assert len(record["points"][first]["overrides"]) > 1
    record["points"][first]["overrides"].reverse()
    (tmp_path / "out" / "sweep.json").write_text(json.dumps(record))
    claim_output(the_plan, tmp_path / "out")
    # an order that changes what they set (a key given twice) is other settings, named as such
    record = json.loads((tmp_path / "out" / "sweep.json").read_text())
    record["points"][first]["overrides"] = [*the_plan.points[0].overrides, "train.lr=0.5", "train.lr=0.25"]
    record["points"][first].pop("settings")  # as a record written before settings were kept
    (tmp_path / "out" / "sweep.json").write_text(json.dumps(record))
    the_plan.points[0].overrides.extend(["train.lr=0.25", "train.lr=0.5"])
    with pytest.raises(
        ConfigError, match=r"other settings \(its overrides in an order that changes what they set\)"
    ):
        claim_output(the_plan, tmp_path / "out")


def test_a_base_file_edited_since_a_point_was_trained_is_other_settings(tmp_path):
    path = toy_sweep(tmp_path)
    the_plan = plan(load_sweep(path), tmp_path / "out")
    claim_output(the_plan, tmp_path / "out")
    first = the_plan.points[0]
    (tmp_path / "out" / first.name).mkdir()  # trained with lr 0.003
    base = tmp_path / "tiny.yaml"
    text = base.read_text()
    base.write_text(text.replace("# ", "#  ") + "\n# a comment changes nothing\n")
    claim_output(plan(load_sweep(path), tmp_path / "out"), tmp_path / "out")
    base.write_text(text.replace("lr: 0.003", "lr: 0.03"))
    with pytest.raises(ConfigError) as err:
        claim_output(plan(load_sweep(path), tmp_path / "out"), tmp_path / "out")
    why = f"(train.lr was 0.003, now 0.03: {base} changed since)"
    assert f"{first.name} was trained with other settings {why}" in str(err.value)
    base.write_text(text)  # put back: the point is the same again
    claim_output(plan(load_sweep(path), tmp_path / "out"), tmp_path / "out")


def test_a_file_the_base_extends_edited_since_is_named_with_the_base(tmp_path):
    path = toy_sweep(tmp_path)
    base = tmp_path / "tiny.yaml"
    parent = tmp_path / "parent.yaml"
    parent.write_text(base.read_text(), encoding="utf-8")
    base.write_text("extends: parent.yaml\n", encoding="utf-8")
    the_plan = plan(load_sweep(path), tmp_path / "out")
    claim_output(the_plan, tmp_path / "out")
    (tmp_path / "out" / the_plan.points[0].name).mkdir()
    parent.write_text(parent.read_text().replace("lr: 0.003", "lr: 0.03"))
    with pytest.raises(ConfigError) as err:
        claim_output(plan(load_sweep(path), tmp_path / "out"), tmp_path / "out")
    assert f"now 0.03: {base} or a file it extends ({parent.resolve()}) changed since" in str(err.value)


def test_a_point_starts_from_the_upstream_point_at_its_own_coordinates(tmp_path):
    # a tied axis whose first entry sets nothing: {} agrees with every point, so each
    # fine-tuning point must take the upstream point that sets the most of its keys
    text = """
name: tied
base: tiny.yaml
seeds: [0]
axes:
  model:
    - {}
    - {model.n_heads: 4, model.d_ff: 40}
    - {model.n_heads: 4, model.d_model: 32, model.d_ff: 64}
arms:
  pre: {}
  tune: {init_from: pre}
"""
    points = plan(load_sweep(toy_sweep(tmp_path, text)), tmp_path / "out").points
    tuned = {p.name: p.after for p in points if p.arm == "tune"}
    assert tuned == {
        "tune-s0": "pre-s0",
        "tune-n_heads4-d_ff40-s0": "pre-n_heads4-d_ff40-s0",
        "tune-n_heads4-d_model32-d_ff64-s0": "pre-n_heads4-d_model32-d_ff64-s0",
    }


def test_init_seeds_all_starts_every_seed_from_every_upstream_seed(tmp_path):
    text = """
name: crossed
base: tiny.yaml
arms:
  pre: {seeds: [1, 2]}
  tune: {init_from: pre, init_seeds: all, seeds: [0, 1]}
  same: {init_from: pre, seeds: [0, 1]}
"""
    the_plan = plan(load_sweep(toy_sweep(tmp_path, text)), tmp_path / "out")
    tuned = {p.name: (p.after, p.seed) for p in the_plan.points if p.arm == "tune"}
    assert tuned == {
        "tune-p1-s0": ("pre-s1", 0),
        "tune-p1-s1": ("pre-s1", 1),
        "tune-p2-s0": ("pre-s2", 0),
        "tune-p2-s1": ("pre-s2", 1),
    }
    by = {p.name: p for p in the_plan.points}
    assert "train.seed=0" in by["tune-p2-s0"].overrides
    assert str(tmp_path / "out" / "pre-s2") in by["tune-p2-s0"].overrides[-1]
    # the default pairs seed with seed where the upstream arm has it, else its first seed
    assert {p.name: p.after for p in the_plan.points if p.arm == "same"} == {
        "same-s0": "pre-s1",
        "same-s1": "pre-s1",
    }
    assert len(the_plan.groups()["tune"]) == 4  # one row averages every pair


@pytest.mark.parametrize(
    ("arm", "message"),
    [
        ("{init_seeds: all}", "init_seeds: all needs init_from"),
        ("{init_from: pre, init_seeds: every}", "init_seeds must be 'same' or 'all', got 'every'"),
    ],
)
def test_init_seeds_is_checked(tmp_path, arm, message):
    text = f"name: bad\nbase: tiny.yaml\narms:\n  pre: {{}}\n  tune: {arm}\n"
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_sweep(toy_sweep(tmp_path, text))
