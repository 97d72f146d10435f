"""Sweep files: base experiments, axes, arms, seeds and a parameter-matching rule → points.

A sweep file (``configs/sweeps/*.yaml``) names

- ``base``: an experiment file (relative to the sweep file), of any task;
- ``axes``: dotted keys → lists of values, crossed with each other (``model.n_heads: [1, 2, 4]``);
- ``arms``: name → dotted overrides (``fixed: {model.d_head: 32}``); an arm may carry its own
  ``axes`` (added to, or replacing, the sweep's), its own ``base`` experiment file and ``seeds``,
  and ``init_from: ARM``: each of its points starts from the checkpoint of ARM's point at the same
  coordinates (and seed, or ARM's first seed), trained first — pre-training, then fine-tuning;
  with ``init_seeds: all`` each of its seeds starts from each of ARM's seeds instead (points
  ``ARM2-…-pP-sS``: fine-tuning seed S from pre-training seed P), and a row averages them all;
- ``seeds`` (``train.seed`` of each repetition), ``steps`` (``train.steps`` of every point) and
  ``set`` (overrides of every point);
- ``match``: hold each point's parameter count to a ``target`` (an arm's count at the same
  coordinates, or a number) within ``tolerance`` by solving for one model key (``solve_for``),
  counting ``total`` or ``non_embedding`` parameters ([B20] §4 compares at matched counts);
- ``ensemble``: also score the seeds of each row together, where the task can (parsing): ``true``
  for all of them, or a list of sizes (the first k seeds);
- ``reference`` (figures to print beside an arm's results) and ``plots``.

The file is read as experiment files are (:func:`fullrank.recipes.config.read_file`: a
repeated key is an error, ``1e-3`` a number) and validated by pydantic (:class:`SweepFile`).
Each point (arm × coordinates × seed) is an ordinary run: the arm's base experiment with the
point's overrides, trained by ``fullrank train``. Its model is counted before training by its
task's recipe (:meth:`fullrank.recipes.recipe.Recipe.plan_model`), which trains the tokenizer the
run would train once for the sweep, so the closed-form counts are those of the models that
train.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import re
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

import torch
import yaml
from pydantic import AfterValidator, TypeAdapter, ValidationError

from fullrank.data.text import loads_json
from fullrank.data.tokenizers import Tokenizer
from fullrank.errors import ConfigError, FullrankError, closest
from fullrank.models import ModelConfig, build_model
from fullrank.models.budget import count_params, solve_for
from fullrank.paths import check_output_dir, write_text_atomic
from fullrank.recipes.config import (
    EXPERIMENTS,
    TASK_MODELS,
    Experiment,
    apply_overrides,
    load_experiment,
    parse_assignment,
    read_file,
)
from fullrank.recipes.init import find_start
from fullrank.recipes.run import recipe_of
from fullrank.training.optim import frozen_names
from fullrank.validation import (
    Bool,
    NonNegativeInt,
    PositiveInt,
    Probability,
    Str,
    config_dataclass,
    describe,
)

MANIFEST = "sweep.json"
FORMAT = "fullrank-sweep-v1"
# keys a sweep sets itself: a point's run directory is OUT/POINT
RESERVED = ("name", "out_dir")
# keys of an arm that are not overrides
ARM_KEYS = ("axes", "base", "seeds", "init_from", "init_seeds")


# ------------------------------------------------------------------------------- the file
def _plain_name(name: str) -> str:
    if not re.fullmatch(r"[A-Za-z0-9._-]+", name):
        raise ValueError(f"name '{name}' may hold letters, digits, '.', '_' and '-' only")
    return name


PlainName = Annotated[Str, AfterValidator(_plain_name)]
Seeds = tuple[NonNegativeInt, ...]


@config_dataclass
class MatchRule:
    """Hold a point's parameter count to ``target`` within ``tolerance`` by solving for
    ``solve_for``. ``target``: an arm's name (its count at the same coordinates) or a number;
    ``arms``: the arms matched (default: every arm but the target)."""

    target: Str | PositiveInt
    solve_for: Str
    tolerance: Probability = 0.01
    count: Literal["total", "non_embedding"] = "total"
    multiple: PositiveInt = 1
    arms: tuple[Str, ...] = ()


@config_dataclass
class PlotSpec:
    """One figure: ``metric`` against ``x`` (an axis key, ``params``, ``non_embedding``,
    ``d_head`` or ``flops``), one line per value of ``series`` (``arm`` or an axis key)."""

    x: Str
    metric: Str = "auto"
    series: Str = "arm"
    logx: Bool | None = None  # None: log2 when every x is a power of two


@config_dataclass
class SweepFile:
    """A sweep file as written (the module docstring says what each key does)."""

    name: PlainName
    base: Str
    axes: dict[Str, list[Any]] = field(default_factory=dict)
    arms: dict[PlainName, dict[Str, Any] | None] = field(default_factory=dict)
    seeds: Seeds = (0,)
    steps: PositiveInt | None = None
    set: dict[Str, Any] = field(default_factory=dict)
    match: MatchRule | None = None
    ensemble: Bool | tuple[PositiveInt, ...] = False
    reference: dict[Str, dict[Str, Any]] = field(default_factory=dict)
    out: Str | None = None
    plots: tuple[PlotSpec, ...] = ()


@dataclass(frozen=True)
class Arm:
    """One arm: its experiment file, overrides, axes and seeds, and the arm whose checkpoints
    its points start from."""

    name: str
    base: Path
    task: str
    set: dict[str, Any]
    axes: dict[str, list[Any]]
    seeds: tuple[int, ...]
    init_from: str | None = None
    init_seeds: Literal["same", "all"] = "same"


@dataclass(frozen=True)
class Sweep:
    """A parsed, checked sweep file (and the command line's overrides, which win)."""

    path: Path
    name: str
    arms: dict[str, Arm]
    steps: int | None
    common: dict[str, Any]
    match: MatchRule | None
    ensemble: tuple[int, ...] | bool
    reference: dict[str, dict[str, Any]]
    out: str | None
    plots: tuple[PlotSpec, ...]
    cli: dict[str, Any] = field(default_factory=dict)

    @property
    def base(self) -> Path:
        """The experiment file of the first arm."""
        return next(iter(self.arms.values())).base

    @property
    def task(self) -> str:
        return next(iter(self.arms.values())).task

    def coordinates(self, arm: str) -> list[dict[str, Any]]:
        """Every point of ``arm`` as dotted key → value: the axes crossed, a tied axis (values
        that are mappings) setting its keys together."""
        axes = self.arms[arm].axes
        out = []
        for values in itertools.product(*axes.values()):
            coords: dict[str, Any] = {}
            for key, value in zip(axes, values):
                coords.update(value if isinstance(value, dict) else {key: value})
            out.append(coords)
        return out

    def coordinate_keys(self) -> list[str]:
        """The dotted keys the points vary, in the order they first appear."""
        return list(dict.fromkeys(k for arm in self.arms for c in self.coordinates(arm) for k in c))

    def default_out(self) -> Path:
        return Path(self.out) if self.out else Path("runs") / "sweeps" / self.name

    def with_overrides(self, overrides: dict[str, Any]) -> Sweep:
        """This sweep with ``key=value`` overrides of the command line, which every point takes
        last (each checked against every arm's task). A key the sweep sets point by point — an
        axis, ``train.seed`` (its seeds), the key it solves for to match parameters,
        ``train.init_from`` where an arm starts from another's checkpoints — cannot be
        overridden: that would make its points one point."""
        varied = {k: "an axis" for k in self.coordinate_keys()}
        varied["train.seed"] = "its seeds"
        if self.match is not None:
            varied[self.match.solve_for] = "match.solve_for"
        if any(arm.init_from for arm in self.arms.values()):
            varied["train.init_from"] = "an arm's init_from"
        for key in overrides:
            for arm in self.arms.values():
                check_key(self.path, "overrides", key, arm.task)
            if key in varied:
                raise ConfigError(
                    f"override '{key}': {self.path} sets it point by point "
                    f"({varied[key]}); choose points with --arms, or edit the file"
                )
        return dataclasses.replace(self, cli={**self.cli, **overrides})


def _fail(path: Path, message: str) -> ConfigError:
    return ConfigError(f"{path}: {message}")


def _check_axes(path: Path, where: str, axes: dict[str, list[Any]]) -> None:
    for key, values in axes.items():
        if not values:
            raise _fail(path, f"{where}: '{key}' is empty; give it at least one value")
        tied = [isinstance(v, dict) for v in values]
        if any(tied) and not all(tied):
            raise _fail(
                path,
                f"{where}: '{key}' mixes mappings (keys set together) with plain "
                f"values; make every value a mapping or none",
            )


def _axis_keys(axes: dict[str, list[Any]]) -> list[str]:
    """The dotted keys of ``axes``: a plain axis's own key, a tied axis's inner keys."""
    keys: list[str] = []
    for key, values in axes.items():
        keys += [k for v in values for k in v] if isinstance(values[0], dict) else [key]
    return list(dict.fromkeys(keys))


def _schema(task: str) -> dict[str, list[str]]:
    """Section → the keys an experiment file of ``task`` accepts there."""
    exp = EXPERIMENTS[task]
    hints = typing.get_type_hints(exp)
    out = {"model": [*(f.name for f in dataclasses.fields(TASK_MODELS[task])), "preset"]}
    for f in dataclasses.fields(exp):
        if dataclasses.is_dataclass(hints[f.name]):
            out[f.name] = [g.name for g in dataclasses.fields(hints[f.name])]
    return out


def check_key(path: Path, where: str, key: str, task: str) -> None:
    """A dotted key that an experiment file of ``task`` accepts, or one line with the closest
    key."""
    schema = _schema(task)
    top = [f.name for f in dataclasses.fields(EXPERIMENTS[task])]
    section, _, rest = key.partition(".")
    if not rest:
        if key in RESERVED:
            raise _fail(
                path,
                f"{where}: '{key}' is set by the sweep (each point runs in OUT/POINT_NAME); leave it out",
            )
        if key not in top:
            keys = top + [f"{s}.{k}" for s, ks in schema.items() for k in ks]
            raise _fail(path, f"{where}: unknown key '{key}'{closest(key, keys)}")
        return
    if section not in schema:
        raise _fail(
            path,
            f"{where}: unknown section '{section}' in '{key}' for task '{task}'"
            f"{closest(section, list(schema))}",
        )
    if rest not in schema[section] and "." not in rest:
        full = [f"{section}.{k}" for k in schema[section]]
        raise _fail(path, f"{where}: unknown key '{key}'{closest(key, full)}")


def load_sweep(path: str | Path) -> Sweep:
    """Read and check a sweep file; every mistake is one line naming the key and the fix."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: no such sweep file")
    raw = read_file(path, kind="sweep", what="keys (name, base, axes, arms, seeds, match, …)")
    try:
        spec = TypeAdapter(SweepFile).validate_python(raw)
    except ValidationError as e:
        raise _fail(path, describe(e, SweepFile)) from None
    if len(set(spec.seeds)) != len(spec.seeds) or not spec.seeds:
        raise _fail(path, f"seeds {list(spec.seeds)} must be a non-empty list of distinct integers")
    _check_axes(path, "axes", spec.axes)
    arms: dict[str, Arm] = {}
    for name, body in (spec.arms or {"base": {}}).items():
        arms[name] = _arm(path, spec, name, dict(body or {}), arms)
    for arm in arms.values():
        for key in [*spec.set, *arm.set, *_axis_keys(arm.axes)]:
            where = "set" if key in spec.set else f"arms.{arm.name}"
            check_key(path, where, str(key), arm.task)
    match = spec.match
    if match is not None:
        match = _check_match(path, match, arms)
    for name in spec.reference:
        if name not in arms:
            raise _fail(path, f"reference names arm '{name}', which is not an arm{closest(name, arms)}")
    for p in spec.plots:
        _check_plot(path, p, arms)
    ensemble = spec.ensemble
    if ensemble and not any(recipe_of(a.task).ensembles for a in arms.values()):
        raise _fail(
            path,
            f"ensemble: no arm's task ({', '.join(sorted({a.task for a in arms.values()}))}) "
            f"scores ensembles (parse does); leave ensemble out",
        )
    return Sweep(
        path=path,
        name=spec.name,
        arms=arms,
        steps=spec.steps,
        common=dict(spec.set),
        match=match,
        ensemble=ensemble,
        reference=dict(spec.reference),
        out=spec.out,
        plots=spec.plots,
    )


def _arm(path: Path, spec: SweepFile, name: str, body: dict[str, Any], before: dict[str, Arm]) -> Arm:
    """Arm ``name`` of the file: ``body``'s overrides and its own keys (:data:`ARM_KEYS`)."""
    axes = body.pop("axes", None) or {}
    seeds = body.pop("seeds", None)
    base_name = body.pop("base", spec.base)
    init_from = body.pop("init_from", None)
    init_seeds = body.pop("init_seeds", "same")
    if init_seeds not in ("same", "all"):
        raise _fail(path, f"arms.{name}.init_seeds must be 'same' or 'all', got {init_seeds!r}")
    if init_seeds == "all" and init_from is None:
        raise _fail(path, f"arms.{name}.init_seeds: all needs init_from (the arm whose seeds it crosses)")
    if not isinstance(axes, dict) or not all(isinstance(v, list) for v in axes.values()):
        raise _fail(path, f"arms.{name}.axes must map dotted keys to lists of values")
    _check_axes(path, f"arms.{name}.axes", axes)
    if seeds is not None:
        try:
            seeds = TypeAdapter(Seeds).validate_python(seeds)
        except ValidationError as e:
            raise _fail(path, describe(e, prefix=f"arms.{name}.seeds")) from None
    if not isinstance(base_name, str):
        raise _fail(path, f"arms.{name}.base must be an experiment file, got {base_name!r}")
    if init_from is not None and init_from not in before:
        raise _fail(
            path,
            f"arms.{name}.init_from names '{init_from}', which is not an arm "
            f"listed before it{closest(str(init_from), before)}",
        )
    base = (path.parent / base_name).resolve()
    task = str(read_file(base).get("task", "lm"))
    if task not in EXPERIMENTS:
        raise _fail(path, f"arms.{name}: {base} has task '{task}', not one of {', '.join(EXPERIMENTS)}")
    return Arm(
        name=name,
        base=base,
        task=task,
        set=body,
        axes={**spec.axes, **axes},
        seeds=tuple(seeds or spec.seeds),
        init_from=init_from,
        init_seeds=init_seeds,
    )


def _check_match(path: Path, rule: MatchRule, arms: dict[str, Arm]) -> MatchRule:
    if isinstance(rule.target, str) and rule.target not in arms:
        raise _fail(
            path,
            f"match.target '{rule.target}' is not an arm{closest(rule.target, arms)} "
            f"nor a number of parameters",
        )
    if not rule.solve_for.startswith("model."):
        raise _fail(path, f"match.solve_for must be a model key such as model.d_ff, got {rule.solve_for!r}")
    for arm in arms.values():
        check_key(path, "match.solve_for", rule.solve_for, arm.task)
    matched = rule.arms or tuple(a for a in arms if a != rule.target)
    for name in matched:
        if name not in arms:
            raise _fail(path, f"match.arms names '{name}', which is not an arm{closest(name, arms)}")
        if name == rule.target:
            raise _fail(path, f"match.arms holds the target arm '{name}' itself")
    return dataclasses.replace(rule, arms=matched)


def _check_plot(path: Path, spec: PlotSpec, arms: dict[str, Arm]) -> None:
    keys = {k for a in arms.values() for k in _axis_keys(a.axes)}
    xs = [*keys, *DERIVED]
    if spec.x not in xs:
        raise _fail(path, f"plots: x '{spec.x}' is not one of {', '.join(xs)}{closest(spec.x, xs)}")
    if spec.series != "arm" and spec.series not in keys:
        raise _fail(path, f"plots: series '{spec.series}' must be 'arm' or an axis key")


# x values a plot can use besides the axes, read off each point's model config
DERIVED: dict[str, Callable[[Point], float]] = {
    "params": lambda p: p.params,
    "non_embedding": lambda p: p.non_embedding,
    "d_head": lambda p: p.model.head_sizes[0],
    "flops": lambda p: p.flops,
}


# ------------------------------------------------------------------------------- points
def value_text(value: Any) -> str:
    """A value as a ``key=value`` override writes it (YAML flow: ``null``, ``0.1``, ``[1, 2]``)."""
    return yaml.safe_dump(value, default_flow_style=True, width=10**6).strip().removesuffix("...").strip()


def _short(key: str, keys: list[str]) -> str:
    """The last part of a dotted key, or the whole key (dots as '_') where two would clash."""
    last = key.rsplit(".", 1)[-1]
    clash = sum(k.rsplit(".", 1)[-1] == last for k in keys) > 1
    return key.replace(".", "_") if clash else last


def _check_freeze(path: Path, label: str, model: ModelConfig, patterns: tuple[str, ...]) -> None:
    """The parameters a point's ``train.freeze`` names are its model's, as its run will check
    when it starts: the model built on the meta device (shapes only: no memory, no time)."""
    try:
        with torch.device("meta"):
            frozen_names(build_model(model), patterns)
    except ConfigError as e:
        raise ConfigError(f"{path}: point {label}: {e}") from None


def point_name(
    arm: str, coords: dict[str, Any], seed: int | None, keys: list[str], pre_seed: int | None = None
) -> str:
    parts = [arm, *(f"{_short(k, keys)}{'none' if v is None else v}" for k, v in coords.items())]
    if pre_seed is not None:
        parts.append(f"p{pre_seed}")
    if seed is not None:
        parts.append(f"s{seed}")
    return re.sub(r"[^A-Za-z0-9._-]", "_", "-".join(str(p) for p in parts))


@dataclass
class Point:
    """One run of the sweep: arm × coordinates × seed, and what the closed forms say of it."""

    name: str
    group: str  # the name without the seed: the points a table row averages
    arm: str
    coords: dict[str, Any]
    seed: int
    overrides: list[str]  # what ``fullrank train BASE …`` is given (name and out_dir aside)
    model: ModelConfig
    params: int
    non_embedding: int
    flops: int
    match: str  # "target", "matched: d_ff=1088 (+0.004%)", "—", or why it is not matched
    matched: bool = True
    experiment: Experiment | None = field(default=None, repr=False)
    base: Path = field(default_factory=Path)
    task: str = "lm"
    after: str | None = None  # the point whose checkpoint train.init_from names

    def setting(self, key: str) -> Any:
        """The value the point's overrides give the dotted ``key`` last (``None``: none)."""
        values = [value for k, value in map(parse_assignment, self.overrides) if k == key]
        return values[-1] if values else None


def coordinate(point: Point, key: str) -> Any:
    """``point``'s value of a dotted key: its coordinate, else (for ``model.*``) its model's."""
    if key in point.coords:
        return point.coords[key]
    section, _, name = key.partition(".")
    return getattr(point.model, name, None) if section == "model" else None


@dataclass
class Plan:
    """The points of a sweep, in order (arms, then coordinates, then seeds)."""

    sweep: Sweep
    points: list[Point]
    cache: dict[str, Any]  # what the counts prepared: tokenizers (saved under OUT) and sizes

    @property
    def unmatched(self) -> list[Point]:
        return [p for p in self.points if not p.matched]

    def groups(self) -> dict[str, list[Point]]:
        out: dict[str, list[Point]] = {}
        for p in self.points:
            out.setdefault(p.group, []).append(p)
        return out

    @property
    def tokenizers(self) -> dict[str, Tokenizer]:
        """The tokenizers the points load (file name under OUT → tokenizer); a cache shared with
        other plans may hold more."""
        loaded = {Path(str(f)).name for p in self.points if (f := p.setting("data.tokenizer_file"))}
        return {k: v for k, v in self.cache.items() if isinstance(v, Tokenizer) and k in loaded}


def _experiment(sweep: Sweep, base: Path, overrides: list[str], label: str) -> Experiment:
    try:
        return load_experiment(base, overrides)
    except FullrankError as e:
        raise ConfigError(f"{sweep.path}: point {label}: {e}") from None


def _label(arm: str, coords: dict[str, Any]) -> str:
    return f"{arm} ({', '.join(f'{k}={value_text(v)}' for k, v in coords.items()) or 'no axes'})"


def plan(sweep: Sweep, out: Path | None = None, cache: dict[str, Any] | None = None) -> Plan:
    """Every point of ``sweep`` with its overrides and counts, parameters matched where the sweep
    says so. A point whose config is invalid raises one line naming it and its coordinates; a
    point that cannot be matched is kept with ``matched=False`` and the reason. ``cache`` holds
    what counting prepares (tokenizers trained on a corpus, vocabulary sizes), keyed by the data
    settings: pass one dict to several plans of the same data to prepare each once."""
    out = (out or sweep.default_out()).resolve()
    cache = {} if cache is None else cache
    keys = sweep.coordinate_keys()
    counted: dict[tuple[str, tuple[Any, ...]], tuple[ModelConfig, list[str], str | None]] = {}

    def upstream(arm: Arm, coords: dict[str, Any]) -> dict[str, Any]:
        """The coordinates of the ``init_from`` arm's point that ``arm``'s point at ``coords``
        starts from."""
        assert arm.init_from is not None
        # the most specific point that agrees: a tied axis's entry {} (no keys) agrees with
        # every point, so a point takes the upstream point that sets the most of its keys
        agree = [
            c
            for c in sweep.coordinates(arm.init_from)
            if all(k in coords and coords[k] == v for k, v in c.items())
        ]
        found = max(agree, key=len, default=None)
        if found is None:
            raise _fail(
                sweep.path,
                f"point {_label(arm.name, coords)}: arm '{arm.init_from}' "
                f"(its init_from) has no point at these coordinates",
            )
        return found

    def upstream_name(arm: Arm, coords: dict[str, Any], seed: int) -> str:
        """The point that ``arm``'s point at ``coords`` starts from: of the ``init_from`` arm's
        ``seed`` (``init_seeds: all``: the pre-training seed), else its first seed."""
        assert arm.init_from is not None
        source = sweep.arms[arm.init_from]
        return point_name(
            source.name, upstream(arm, coords), seed if seed in source.seeds else source.seeds[0], keys
        )

    def seed_pairs(arm: Arm) -> list[tuple[int | None, int]]:
        """(pre-training seed or None, seed) of each of ``arm``'s points at one coordinate."""
        if arm.init_seeds == "all":
            assert arm.init_from is not None
            return [(p, s) for p in sweep.arms[arm.init_from].seeds for s in arm.seeds]
        return [(None, s) for s in arm.seeds]

    def base_overrides(arm: Arm, coords: dict[str, Any]) -> list[str]:
        items = {**sweep.common, **arm.set, **coords}
        if sweep.steps is not None:
            items["train.steps"] = sweep.steps
        items.update(sweep.cli)
        return [f"{k}={value_text(v)}" for k, v in items.items()]

    def count(arm_name: str, coords: dict[str, Any]) -> tuple[ModelConfig, list[str], str | None]:
        """The model config of ``arm`` at ``coords`` before matching, its overrides, and the
        point (without seed) it starts from."""
        key = (arm_name, tuple(coords.items()))
        if key not in counted:
            arm = sweep.arms[arm_name]
            overrides = base_overrides(arm, coords)
            label = _label(arm_name, coords)
            exp = _experiment(sweep, arm.base, overrides, label)
            base_model, after = None, None
            try:
                if arm.init_from is not None:
                    base_model = count(arm.init_from, upstream(arm, coords))[0]
                    after = arm.init_from
                elif exp.train.init_from:  # a checkpoint that exists: its model
                    start = find_start(exp)
                    base_model = start.config if start else None
                model, extra = recipe_of(exp.task).plan_model(exp, out, cache, base_model)
            except FullrankError as e:
                raise ConfigError(f"{sweep.path}: point {label}: {e}") from None
            counted[key] = (model, overrides + extra, after)
        return counted[key]

    points: list[Point] = []
    for arm in sweep.arms.values():
        for coords in sweep.coordinates(arm.name):
            model, overrides, after = count(arm.name, coords)
            status, ok = "—", True
            rule = sweep.match
            if rule is not None and rule.target == arm.name:
                status = "target"
            elif rule is not None and arm.name in rule.arms:
                model, overrides, status, ok = _match(sweep, rule, arm.name, coords, model, overrides, count)
            for pre_seed, seed in seed_pairs(arm):
                name = point_name(arm.name, coords, seed, keys, pre_seed)
                point_overrides = [*overrides, f"train.seed={seed}"]
                source = upstream_name(arm, coords, seed if pre_seed is None else pre_seed) if after else None
                if source is not None:
                    point_overrides.append(f"train.init_from={out / source}")
                exp = _experiment(sweep, arm.base, point_overrides, _label(arm.name, coords))
                if exp.train.freeze:
                    _check_freeze(sweep.path, name, model, exp.train.freeze)
                points.append(
                    Point(
                        name=name,
                        group=point_name(arm.name, coords, None, keys),
                        arm=arm.name,
                        coords=coords,
                        seed=seed,
                        overrides=point_overrides,
                        model=model,
                        params=count_params(model, "total"),
                        non_embedding=count_params(model, "non_embedding"),
                        flops=model.flops_per_token()["forward"],
                        match=status,
                        matched=ok,
                        experiment=exp,
                        base=arm.base,
                        task=exp.task,
                        after=source,
                    )
                )
    names = [p.name for p in points]
    if len(set(names)) != len(names):
        dup = next(n for n in names if names.count(n) > 1)
        raise _fail(
            sweep.path, f"two points are both named '{dup}'; give the arms or axis values distinct names"
        )
    return Plan(sweep, points, cache)


def _match(
    sweep: Sweep,
    rule: MatchRule,
    arm: str,
    coords: dict[str, Any],
    model: ModelConfig,
    overrides: list[str],
    count: Callable[..., tuple[ModelConfig, list[str], str | None]],
) -> tuple[ModelConfig, list[str], str, bool]:
    """``model`` with ``rule.solve_for`` set to hold the target count, or why it cannot be."""
    field_name = rule.solve_for.split(".", 1)[1]
    if rule.solve_for in coords:
        return model, overrides, f"unmatched: {rule.solve_for} is an axis of this arm", False
    if isinstance(rule.target, str):
        # the target arm's point at the same coordinates (on the keys the target varies)
        at = next(
            (
                c
                for c in sweep.coordinates(rule.target)
                if all(k in coords and coords[k] == v for k, v in c.items())
            ),
            None,
        )
        if at is None:
            return (
                model,
                overrides,
                (f"unmatched: arm '{rule.target}' has no point at these coordinates"),
                False,
            )
        target = count_params(count(rule.target, at)[0], rule.count)
    else:
        target = rule.target
    found = solve_for(model, field_name, target, which=rule.count, multiple=rule.multiple)
    if found is None:
        return model, overrides, (f"unmatched: no valid {rule.solve_for} gives {target:,} parameters"), False
    value = getattr(found.config, field_name)
    if abs(found.gap) > rule.tolerance:
        return (
            model,
            overrides,
            (
                f"unmatched: the nearest, {field_name}={value}, gives "
                f"{found.params:,} against {target:,} ({100 * found.gap:+.2f}%, "
                f"tolerance {100 * rule.tolerance:g}%)"
            ),
            False,
        )
    config = typing.cast(ModelConfig, found.config)
    return (
        config,
        [*overrides, f"{rule.solve_for}={value}"],
        f"matched: {field_name}={value} ({100 * found.gap:+.3f}%)",
        True,
    )


# --------------------------------------------------------------------------- output folder
def manifest(plan_: Plan) -> dict[str, Any]:
    """The sweep's record: each point's place in the plan, its overrides and the settings they
    give its base file (so that a base file edited since a point was trained is noticed)."""
    return {
        "format": FORMAT,
        "sweep": plan_.sweep.name,
        "file": str(plan_.sweep.path),
        "base": str(plan_.sweep.base),
        "points": {
            p.name: {
                "group": p.group,
                "arm": p.arm,
                "coords": p.coords,
                "seed": p.seed,
                "base": str(p.base),
                "overrides": p.overrides,
                "settings": settings(p),
            }
            for p in plan_.points
        },
    }


def read_manifest(out: Path) -> dict[str, Any] | None:
    path = out / MANIFEST
    if not path.is_file():
        return None
    try:
        data = loads_json(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        raise ConfigError(f"{path}: unreadable sweep record; choose another --out") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ConfigError(f"{path}: not a fullrank sweep record; choose another --out")
    return data


def _as_json(data: dict[str, Any]) -> dict[str, Any]:
    return loads_json(json.dumps(data, default=str))


def settings(point: Point) -> dict[str, Any]:
    """What ``point``'s overrides give its base file, as JSON holds it."""
    return _as_json(apply_overrides(read_file(point.base), point.overrides))


def _leaves(data: Any, prefix: str = "") -> dict[str, Any]:
    """``{"a.b": value}`` for every leaf of nested mappings."""
    if not isinstance(data, dict) or not data:
        return {prefix.rstrip("."): data}
    return {k: v for key, child in data.items() for k, v in _leaves(child, f"{prefix}{key}.").items()}


def changed_setting(point: Point, before: dict[str, Any]) -> str | None:
    """Why ``point`` is not the point that a sweep record holds as ``before`` (its
    ``overrides`` and, in records that have them, the ``settings`` they gave), or ``None`` when
    it is: another override, overrides in an order that sets other values, or a base file
    edited since."""
    recorded = list(before.get("overrides", []))
    changed = sorted(set(map(str, point.overrides)) ^ set(map(str, recorded)))
    if changed:
        return f"{changed[0]} differs"
    files: list[Path] = []
    base = read_file(point.base, files=files)
    now = _as_json(apply_overrides(base, point.overrides))
    recorded_now = _as_json(apply_overrides(base, recorded))  # what the recorded overrides set today
    then = before.get("settings", recorded_now)
    if then == now:
        return None
    if recorded_now == then:
        return "its overrides in an order that changes what they set"
    was, is_ = _leaves(then), _leaves(now)
    key = sorted(k for k in was.keys() | is_.keys() if was.get(k) != is_.get(k))[0]
    where = str(point.base)
    if len(files) > 1:
        where += f" or a file it extends ({', '.join(map(str, files[1:]))})"
    return f"{key} was {was.get(key)!r}, now {is_.get(key)!r}: {where} changed since"


def check_output(plan_: Plan, out: Path) -> dict[str, Any]:
    """Refuse in one line unless ``out`` may become this sweep's folder: not a folder of other
    files nor inside a run's records or a checkpoint, not another sweep's folder, and no point
    already trained there with other settings. Returns the points that ``out``'s record lists
    (none for a new folder). Leaves the disk as it found it (the write test's probe file is
    removed). What :func:`claim_output` checks first, and what ``fullrank sweep --dry-run``
    checks, so that a dry run that passes means the run starts."""
    check_output_dir(
        out,
        option="--out",
        overwrite=True,
        replaceable=lambda p: (p / MANIFEST).exists(),
        inputs=[plan_.sweep.path, *(a.base for a in plan_.sweep.arms.values())],
        kind=f"a sweep's output folder (no {MANIFEST})",
        new="choose another --out",
    )
    known = read_manifest(out) if out.is_dir() else None
    if known is not None and known.get("sweep") != plan_.sweep.name:
        raise ConfigError(
            f"--out {out} holds sweep '{known.get('sweep')}', not '{plan_.sweep.name}'; choose another --out"
        )
    points = dict((known or {}).get("points", {}))
    for p in plan_.points:
        before = points.get(p.name)
        if before is None or not (out / p.name).exists():
            continue
        if (what := changed_setting(p, before)) is not None:
            raise ConfigError(
                f"{out / p.name} was trained with other settings ({what}); choose another "
                f"--out, or remove that folder to retrain the point"
            )
    return points


def claim_output(plan_: Plan, out: Path) -> None:
    """Make ``out`` this sweep's folder, or refuse in one line (:func:`check_output`): a folder
    that is not this sweep's output, or a point already trained there with other settings, is
    never touched."""
    points = check_output(plan_, out)
    out.mkdir(parents=True, exist_ok=True)
    for name, tok in plan_.tokenizers.items():
        if not (out / name).is_file():
            tok.save(out / name)
    record = manifest(plan_)
    record["points"] = {**points, **record["points"]}
    write_text_atomic(out / MANIFEST, json.dumps(record, indent=1))


def finished(out: Path, point: Point) -> bool:
    return (out / point.name / "results.json").is_file()


def own_threads(point: Point) -> str | None:
    """The thread count that the point's own settings fix (its last ``train.threads=``), if
    any: the runner's share of the cores does not replace it."""
    threads = point.setting("train.threads")
    return None if threads is None else str(threads)


def train_command(point: Point, out: Path, *, threads: int | None = None, quiet: bool = True) -> list[str]:
    """``fullrank train BASE OVERRIDES… name=POINT out_dir=OUT resume=auto``: one point, as
    anyone could run it by hand (or under ``torchrun``)."""
    extra = [f"train.threads={threads}"] if threads and own_threads(point) is None else []
    return [
        "fullrank",
        "train",
        str(point.base),
        *point.overrides,
        *extra,
        f"name={point.name}",
        f"out_dir={out}",
        "resume=auto",
        *(["--quiet"] if quiet else []),
    ]
