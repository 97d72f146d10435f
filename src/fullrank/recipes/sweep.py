"""Sweep files: a base experiment, axes, arms, seeds and a parameter-matching rule → points.

A sweep file (``configs/sweeps/*.yaml``) names

- ``base``: an experiment file (relative to the sweep file);
- ``axes``: dotted keys → lists of values, crossed with each other (``model.n_heads: [1, 2, 4]``);
- ``arms``: name → dotted overrides (``fixed: {model.d_head: 32}``); an arm may carry its own
  ``axes`` (added to, or replacing, the sweep's);
- ``seeds`` (``train.seed`` of each repetition), ``steps`` (``train.steps`` of every point) and
  ``set`` (overrides of every point);
- ``match``: hold each point's parameter count to a ``target`` (an arm's count at the same
  coordinates, or a number) within ``tolerance`` by solving for one model key (``solve_for``),
  counting ``total`` or ``non_embedding`` parameters ([B20] §4 compares at matched counts);
- ``reference``: optional figures to print beside an arm's results (a paper's numbers).

Each point (arm × coordinates × seed) is an ordinary run: the base experiment file with the
point's overrides, trained by ``fullrank train``; its command line is what :func:`plan`
counted. The vocabulary comes from the tokenizer, trained once for the sweep
(:func:`prepare_vocab`), so the closed-form counts are those of the models that train.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from fullrank.data.tokenizers import Tokenizer
from fullrank.errors import ConfigError, FullrankError, closest
from fullrank.models import ModelConfig
from fullrank.models.budget import COUNTS, count_params, solve_for
from fullrank.paths import check_output_dir
from fullrank.data.text import decode_utf8, loads_json, read_bytes
from fullrank.recipes.config import (TASK_MODELS, DataConfig, DecodeConfig, ExperimentConfig,
                                     SampleConfig, apply_overrides, parse_experiment, parse_yaml,
                                     read_file)
from fullrank.training.config import TrainConfig

MANIFEST = "sweep.json"
FORMAT = "fullrank-sweep-v1"
SWEEP_KEYS = ("name", "base", "axes", "arms", "seeds", "steps", "set", "match", "reference", "out",
              "plots")
MATCH_KEYS = ("target", "solve_for", "tolerance", "count", "multiple", "arms")
# keys a sweep sets itself: a point's run directory is OUT/POINT
RESERVED = ("name", "out_dir")


# ------------------------------------------------------------------------------- the file
@dataclass(frozen=True)
class MatchRule:
    """Hold a point's parameter count to ``target`` within ``tolerance`` by solving for
    ``solve_for``. ``target``: an arm's name (its count at the same coordinates) or a number."""

    target: str | int
    solve_for: str
    tolerance: float = 0.01
    count: str = "total"
    multiple: int = 1
    arms: tuple[str, ...] = ()  # the arms matched (default: every arm but the target)


@dataclass(frozen=True)
class PlotSpec:
    """One figure: ``metric`` against ``x`` (an axis key, ``params``, ``non_embedding``,
    ``d_head`` or ``flops``), one line per value of ``series`` (``arm`` or an axis key)."""

    x: str
    metric: str = "auto"
    series: str = "arm"
    logx: bool | None = None  # None: log2 when every x is a power of two


@dataclass(frozen=True)
class Sweep:
    """A parsed, checked sweep file."""

    path: Path
    name: str
    base: Path
    task: str
    axes: dict[str, list[Any]]
    arms: dict[str, dict[str, Any]]  # arm → {"set": {...}, "axes": {...}}
    seeds: tuple[int, ...]
    steps: int | None
    common: dict[str, Any]
    match: MatchRule | None
    reference: dict[str, dict[str, Any]]
    out: str | None
    plots: tuple[PlotSpec, ...]
    # ``key=value`` overrides from the command line: applied to every point after everything
    # the file sets (``set``, the arms, ``steps``), so they win (:func:`with_overrides`)
    overrides: tuple[str, ...] = ()

    def arm_axes(self, arm: str) -> dict[str, list[Any]]:
        return {**self.axes, **self.arms[arm]["axes"]}

    def coordinates(self, arm: str) -> list[dict[str, Any]]:
        """Every point of ``arm`` as dotted key → value: the axes crossed, a tied axis (values
        that are mappings) setting its keys together."""
        out = []
        for values in itertools.product(*self.arm_axes(arm).values()):
            coords: dict[str, Any] = {}
            for key, value in zip(self.arm_axes(arm), values):
                coords.update(value if isinstance(value, dict) else {key: value})
            out.append(coords)
        return out

    def coordinate_keys(self) -> list[str]:
        """The dotted keys the points vary, in the order they first appear."""
        return list(dict.fromkeys(k for arm in self.arms for c in self.coordinates(arm) for k in c))

    def default_out(self) -> Path:
        return Path(self.out) if self.out else Path("runs") / "sweeps" / self.name


def _fail(path: Path, message: str) -> ConfigError:
    return ConfigError(f"{path}: {message}")


def _mapping(path: Path, where: str, value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _fail(path, f"{where} must be a mapping of dotted keys to values, got "
                          f"{type(value).__name__}")
    return dict(value)


def _axes(path: Path, where: str, value: Any) -> dict[str, list[Any]]:
    axes = _mapping(path, where, value)
    for key, values in axes.items():
        if not isinstance(values, list):
            raise _fail(path, f"{where}: '{key}' must be a list of values, got {values!r}")
        if not values:
            raise _fail(path, f"{where}: '{key}' is empty; give it at least one value")
        tied = [isinstance(v, dict) for v in values]
        if any(tied) and not all(tied):
            raise _fail(path, f"{where}: '{key}' mixes mappings (keys set together) with plain "
                              f"values; make every value a mapping or none")
    return axes


def _axis_keys(axes: dict[str, list[Any]]) -> list[str]:
    """The dotted keys of ``axes``: a plain axis's own key, a tied axis's inner keys."""
    keys: list[str] = []
    for key, values in axes.items():
        keys += [k for v in values for k in v] if isinstance(values[0], dict) else [key]
    return list(dict.fromkeys(keys))


def _schema(task: str) -> dict[str, list[str]]:
    """Section → the keys an experiment file accepts there."""
    def names(cls: type) -> list[str]:
        return [f.name for f in dataclasses.fields(cls)]
    return {"model": [*names(TASK_MODELS.get(task, TASK_MODELS["lm"])), "preset"],
            "data": names(DataConfig), "train": names(TrainConfig),
            "sample": names(SampleConfig), "decode": names(DecodeConfig)}


def check_key(path: Path, where: str, key: str, task: str) -> None:
    """A dotted key that an experiment file accepts, or one line with the closest key."""
    schema = _schema(task)
    top = [f.name for f in dataclasses.fields(ExperimentConfig)]
    section, _, rest = key.partition(".")
    if not rest:
        if key in RESERVED:
            raise _fail(path, f"{where}: '{key}' is set by the sweep (each point runs in "
                              f"OUT/POINT_NAME); leave it out")
        if key not in top:
            keys = top + [f"{s}.{k}" for s, ks in schema.items() for k in ks]
            raise _fail(path, f"{where}: unknown key '{key}'{closest(key, keys)}")
        return
    if section not in schema:
        raise _fail(path, f"{where}: unknown section '{section}' in '{key}'"
                          f"{closest(section, list(schema))}")
    if rest not in schema[section] and "." not in rest:
        full = [f"{section}.{k}" for k in schema[section]]
        raise _fail(path, f"{where}: unknown key '{key}'{closest(key, full)}")


def load_sweep(path: str | Path) -> Sweep:
    """Read and check a sweep file; every mistake is one line naming the key and the fix (a file
    that is not UTF-8, a key repeated in a mapping, as for experiment files)."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: no such sweep file")
    try:
        raw = parse_yaml(decode_utf8(read_bytes(path), path), str(path))
    except yaml.YAMLError as e:
        raise _fail(path, f"not valid YAML ({' '.join(str(e).split())})") from None
    if not isinstance(raw, dict):
        raise _fail(path, "expected a mapping (name, base, axes, arms, seeds, match)")
    for key in raw:
        if key not in SWEEP_KEYS:
            raise _fail(path, f"unknown key '{key}'{closest(str(key), SWEEP_KEYS)}; a sweep file "
                              f"has {', '.join(SWEEP_KEYS)}")
    for key in ("name", "base"):
        if not isinstance(raw.get(key), str) or not raw[key]:
            raise _fail(path, f"'{key}' must be given as a string")
    if not re.fullmatch(r"[A-Za-z0-9._-]+", raw["name"]):
        raise _fail(path, f"name '{raw['name']}' may hold letters, digits, '.', '_' and '-' only")
    base = (path.parent / raw["base"]).resolve()
    base_data = read_file(base)
    task = str(base_data.get("task", "lm"))

    seeds = raw.get("seeds", [0])
    if not isinstance(seeds, list) or not seeds or not all(
            isinstance(s, int) and not isinstance(s, bool) for s in seeds):
        raise _fail(path, f"seeds must be a non-empty list of integers, got {seeds!r}")
    if len(set(seeds)) != len(seeds):
        raise _fail(path, f"seeds {seeds} repeat a seed; list each once")
    steps = raw.get("steps")
    if steps is not None and (not isinstance(steps, int) or isinstance(steps, bool) or steps < 1):
        raise _fail(path, f"steps must be a positive integer (train.steps of every point), "
                          f"got {steps!r}")

    axes = _axes(path, "axes", raw.get("axes"))
    common = _mapping(path, "set", raw.get("set"))
    arms_raw = _mapping(path, "arms", raw.get("arms")) or {"base": {}}
    arms: dict[str, dict[str, Any]] = {}
    for name, body in arms_raw.items():
        if not re.fullmatch(r"[A-Za-z0-9._-]+", str(name)):
            raise _fail(path, f"arm '{name}': names may hold letters, digits, '.', '_' and '-'")
        body = _mapping(path, f"arms.{name}", body)
        arm_axes = _axes(path, f"arms.{name}.axes", body.pop("axes", None))
        arms[str(name)] = {"set": body, "axes": arm_axes}
    for where, keys in [("axes", _axis_keys(axes)), ("set", common),
                        *((f"arms.{a}", [*b["set"], *_axis_keys(b["axes"])])
                          for a, b in arms.items())]:
        for key in keys:
            check_key(path, where, str(key), task)

    match = _match_rule(path, raw.get("match"), arms, task)
    reference = _mapping(path, "reference", raw.get("reference"))
    for arm in reference:
        if arm not in arms:
            raise _fail(path, f"reference names arm '{arm}', which is not an arm"
                              f"{closest(str(arm), arms)}")
    plots = tuple(_plot(path, p, axes, arms) for p in (raw.get("plots") or []))
    out = raw.get("out")
    return Sweep(path=path, name=raw["name"], base=base, task=task, axes=axes, arms=arms,
                 seeds=tuple(seeds), steps=steps, common=common, match=match,
                 reference={str(k): dict(v or {}) for k, v in reference.items()},
                 out=str(out) if out else None, plots=plots)


def with_overrides(sweep: Sweep, items: list[str]) -> Sweep:
    """``sweep`` with the command line's ``key=value`` overrides of every point, which win over
    the file (``set``, the arms, ``steps``). A key the sweep sets point by point — an axis,
    ``train.seed`` (its ``seeds``), the key it solves for to match parameters — cannot be
    overridden: that would make its points one point."""
    varied = {k: "an axis" for k in sweep.coordinate_keys()}
    varied["train.seed"] = "its seeds"
    if sweep.match is not None:
        varied[sweep.match.solve_for] = "match.solve_for"
    for item in items:
        key, sep, _ = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"override '{item}' must look like section.key=value")
        check_key(sweep.path, "overrides", key, sweep.task)
        if key in varied:
            raise ConfigError(f"override '{key}': {sweep.path} sets it point by point "
                              f"({varied[key]}); choose points with --arms, or edit the file")
    return dataclasses.replace(sweep, overrides=tuple(items))


def _match_rule(path: Path, raw: Any, arms: dict[str, Any], task: str) -> MatchRule | None:
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise _fail(path, "match must be a mapping (target, solve_for, tolerance, count)")
    for key in raw:
        if key not in MATCH_KEYS:
            raise _fail(path, f"match: unknown key '{key}'{closest(str(key), MATCH_KEYS)}")
    target = raw.get("target")
    if isinstance(target, str):
        if target not in arms:
            raise _fail(path, f"match.target '{target}' is not an arm{closest(target, arms)} "
                              f"nor a number of parameters")
    elif not isinstance(target, (int, float)) or isinstance(target, bool) or target <= 0:
        raise _fail(path, f"match.target must be an arm's name or a positive number of "
                          f"parameters, got {target!r}")
    solve = raw.get("solve_for")
    if not isinstance(solve, str) or not solve.startswith("model."):
        raise _fail(path, f"match.solve_for must be a model key such as model.d_ff, got {solve!r}")
    check_key(path, "match.solve_for", solve, task)
    tolerance = raw.get("tolerance", 0.01)
    if not isinstance(tolerance, (int, float)) or isinstance(tolerance, bool) or not 0 <= tolerance < 1:
        raise _fail(path, f"match.tolerance must be a fraction in [0, 1) (0.01 = 1%), "
                          f"got {tolerance!r}")
    count = raw.get("count", "total")
    if count not in COUNTS:
        raise _fail(path, f"match.count must be one of {', '.join(COUNTS)}, got {count!r}")
    multiple = raw.get("multiple", 1)
    if not isinstance(multiple, int) or isinstance(multiple, bool) or multiple < 1:
        raise _fail(path, f"match.multiple must be a positive integer, got {multiple!r}")
    matched = raw.get("arms") or [a for a in arms if a != target]
    for arm in matched:
        if arm not in arms:
            raise _fail(path, f"match.arms names '{arm}', which is not an arm{closest(str(arm), arms)}")
        if arm == target:
            raise _fail(path, f"match.arms holds the target arm '{arm}' itself")
    return MatchRule(target=target if isinstance(target, str) else int(target), solve_for=solve,
                     tolerance=float(tolerance), count=count, multiple=multiple,
                     arms=tuple(matched))


def _plot(path: Path, raw: Any, axes: dict[str, Any], arms: dict[str, Any]) -> PlotSpec:
    if not isinstance(raw, dict) or "x" not in raw:
        raise _fail(path, f"plots: each entry needs x (an axis key, params, non_embedding, "
                          f"d_head or flops), got {raw!r}")
    unknown = set(raw) - {f.name for f in dataclasses.fields(PlotSpec)}
    if unknown:
        raise _fail(path, f"plots: unknown key '{sorted(unknown)[0]}'; an entry has x, metric, "
                          f"series, logx")
    keys = set(_axis_keys(axes)) | {k for a in arms.values() for k in _axis_keys(a["axes"])}
    xs = [*keys, *DERIVED]
    if raw["x"] not in xs:
        raise _fail(path, f"plots: x '{raw['x']}' is not one of {', '.join(xs)}"
                          f"{closest(str(raw['x']), xs)}")
    series = raw.get("series", "arm")
    if series != "arm" and series not in keys:
        raise _fail(path, f"plots: series '{series}' must be 'arm' or an axis key")
    return PlotSpec(x=raw["x"], metric=str(raw.get("metric", "auto")), series=series,
                    logx=raw.get("logx"))


# x values a plot can use besides the axes, read off each point's model config
DERIVED: dict[str, Callable[["Point"], float]] = {
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


def point_name(arm: str, coords: dict[str, Any], seed: int | None, keys: list[str]) -> str:
    parts = [arm, *(f"{_short(k, keys)}{'none' if v is None else v}" for k, v in coords.items())]
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
    experiment: ExperimentConfig | None = field(default=None, repr=False)


def coordinate(point: "Point", key: str) -> Any:
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
    tokenizers: dict[str, Tokenizer]  # file name under OUT → the tokenizer the points share

    @property
    def unmatched(self) -> list[Point]:
        return [p for p in self.points if not p.matched]

    def groups(self) -> dict[str, list[Point]]:
        out: dict[str, list[Point]] = {}
        for p in self.points:
            out.setdefault(p.group, []).append(p)
        return out


def _tokenizer_files(exp: ExperimentConfig) -> list[Path]:
    """The files the task's recipe trains its tokenizer on (see ``recipes/lm.py``, ``mt.py``)."""
    if exp.task == "lm":
        return [exp.data.path(exp.data.train)]
    if exp.task == "mt":
        from fullrank.recipes.mt import pair_files

        return list(pair_files(exp.data, exp.data.train))
    raise ConfigError(f"a sweep over task '{exp.task}' cannot count parameters before training: "
                      f"set data.tokenizer_file (or model.vocab_size) in the base experiment")


def tokenizer_key(exp: ExperimentConfig) -> str:
    """Which points share a tokenizer: those whose tokenizer settings and files agree."""
    d = exp.data
    parts = [exp.task, d.tokenizer, str(d.vocab_size), str(d.lowercase),
             *(str(f.resolve()) for f in _tokenizer_files(exp))]
    return "tokenizer-" + hashlib.sha256("\0".join(parts).encode()).hexdigest()[:12] + ".json"


def prepare_vocab(exp: ExperimentConfig, out: Path,
                  cache: dict[str, Tokenizer]) -> tuple[int, str | None]:
    """The vocabulary size a point's model will have, and the tokenizer file the point should
    load (``None`` where the experiment already names one or fixes ``model.vocab_size``).

    The tokenizer is trained once per distinct setting (the same way the recipe would) and kept
    in ``cache``; :func:`save_tokenizers` writes it under ``OUT`` for the points to share."""
    if exp.model.get("vocab_size"):
        return int(exp.model["vocab_size"]), None
    if exp.data.tokenizer_file:
        return Tokenizer.load(exp.data.path(exp.data.tokenizer_file)).vocab_size, None
    key = tokenizer_key(exp)
    if key not in cache:
        saved = out / key
        cache[key] = (Tokenizer.load(saved) if saved.is_file() else
                      Tokenizer.train(exp.data.tokenizer, _tokenizer_files(exp), exp.data.vocab_size,
                                      lowercase=exp.data.lowercase))
    return cache[key].vocab_size, str((out / key).resolve())


def _experiment(sweep: Sweep, overrides: list[str], label: str) -> ExperimentConfig:
    try:
        return parse_experiment(apply_overrides(read_file(sweep.base), overrides), str(sweep.base))
    except FullrankError as e:
        raise ConfigError(f"{sweep.path}: point {label}: {e}") from None


def plan(sweep: Sweep, out: Path | None = None) -> Plan:
    """Every point of ``sweep`` with its overrides and counts, parameters matched where the sweep
    says so. A point whose config is invalid raises one line naming it and its coordinates; a
    point that cannot be matched is kept with ``matched=False`` and the reason."""
    out = out or sweep.default_out()
    tokenizers: dict[str, Tokenizer] = {}
    keys = sweep.coordinate_keys()
    counted: dict[tuple[str, tuple], tuple[ModelConfig, list[str]]] = {}

    def base_overrides(arm: str, coords: dict[str, Any]) -> list[str]:
        items = {**sweep.common, **sweep.arms[arm]["set"], **coords}
        if sweep.steps is not None:
            items["train.steps"] = sweep.steps
        return [f"{k}={value_text(v)}" for k, v in items.items()] + list(sweep.overrides)

    def count(arm: str, coords: dict[str, Any]) -> tuple[ModelConfig, list[str]]:
        """The model config of ``arm`` at ``coords`` before matching, and its overrides."""
        key = (arm, tuple(coords.items()))
        if key not in counted:
            overrides = base_overrides(arm, coords)
            label = f"{arm} ({', '.join(f'{k}={value_text(v)}' for k, v in coords.items()) or 'no axes'})"
            exp = _experiment(sweep, overrides, label)
            vocab, tok_file = prepare_vocab(exp, out, tokenizers)
            if tok_file is not None:
                overrides.append(f"data.tokenizer_file={tok_file}")
            try:
                model = exp.model_config(vocab)
            except FullrankError as e:
                raise ConfigError(f"{sweep.path}: point {label}: {e}") from None
            counted[key] = (model, overrides)
        return counted[key]

    points: list[Point] = []
    for arm in sweep.arms:
        for coords in sweep.coordinates(arm):
            model, overrides = count(arm, coords)
            status, ok = "—", True
            rule = sweep.match
            if rule is not None and rule.target == arm:
                status = "target"
            elif rule is not None and arm in rule.arms:
                model, overrides, status, ok = _match(sweep, rule, arm, coords, model, overrides,
                                                      count)
            label = f"{arm} ({', '.join(f'{k}={value_text(v)}' for k, v in coords.items()) or 'no axes'})"
            for seed in sweep.seeds:
                name = point_name(arm, coords, seed, keys)
                point_overrides = [*overrides, f"train.seed={seed}"]
                exp = _experiment(sweep, point_overrides, label)
                points.append(Point(
                    name=name, group=point_name(arm, coords, None, keys), arm=arm, coords=coords,
                    seed=seed, overrides=point_overrides, model=model,
                    params=count_params(model, "total"),
                    non_embedding=count_params(model, "non_embedding"),
                    flops=model.flops_per_token()["forward"], match=status, matched=ok,
                    experiment=exp))
    names = [p.name for p in points]
    if len(set(names)) != len(names):
        dup = next(n for n in names if names.count(n) > 1)
        raise _fail(sweep.path, f"two points are both named '{dup}'; give the arms or axis values "
                                f"distinct names")
    return Plan(sweep, points, tokenizers)


def _match(sweep: Sweep, rule: MatchRule, arm: str, coords: dict[str, Any], model: ModelConfig,
           overrides: list[str], count: Callable) -> tuple[ModelConfig, list[str], str, bool]:
    """``model`` with ``rule.solve_for`` set to hold the target count, or why it cannot be."""
    field_name = rule.solve_for.split(".", 1)[1]
    if rule.solve_for in coords:
        return model, overrides, f"unmatched: {rule.solve_for} is an axis of this arm", False
    if isinstance(rule.target, str):
        # the target arm's point at the same coordinates (on the keys the target varies)
        at = next((c for c in sweep.coordinates(rule.target)
                   if all(k in coords and coords[k] == v for k, v in c.items())), None)
        if at is None:
            return model, overrides, (f"unmatched: arm '{rule.target}' has no point at these "
                                      f"coordinates"), False
        target = count_params(count(rule.target, at)[0], rule.count)  # type: ignore[arg-type]
    else:
        target = rule.target
    found = solve_for(model, field_name, target, which=rule.count,  # type: ignore[arg-type]
                      multiple=rule.multiple)
    if found is None:
        return model, overrides, (f"unmatched: no valid {rule.solve_for} gives "
                                  f"{target:,} parameters"), False
    value = getattr(found.config, field_name)
    if abs(found.gap) > rule.tolerance:
        return model, overrides, (f"unmatched: the nearest, {field_name}={value}, gives "
                                  f"{found.params:,} against {target:,} ({100 * found.gap:+.2f}%, "
                                  f"tolerance {100 * rule.tolerance:g}%)"), False
    return (found.config, [*overrides, f"{rule.solve_for}={value}"],
            f"matched: {field_name}={value} ({100 * found.gap:+.3f}%)", True)


# --------------------------------------------------------------------------- output folder
def manifest(plan_: Plan) -> dict[str, Any]:
    return {"format": FORMAT, "sweep": plan_.sweep.name, "file": str(plan_.sweep.path),
            "base": str(plan_.sweep.base),
            "points": {p.name: {"group": p.group, "arm": p.arm, "coords": p.coords,
                                "seed": p.seed, "overrides": p.overrides}
                       for p in plan_.points}}


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


def claim_output(plan_: Plan, out: Path) -> None:
    """Make ``out`` this sweep's folder, or refuse in one line: a folder that is not this sweep's
    output, or a point already trained there with other settings, is never touched."""
    check_output_dir(out, option="--out", overwrite=True,
                     replaceable=lambda p: (p / MANIFEST).exists(),
                     inputs=[plan_.sweep.path, plan_.sweep.base],
                     kind=f"a sweep's output folder (no {MANIFEST})", new="choose another --out")
    known = read_manifest(out) if out.is_dir() else None
    if known is not None and known.get("sweep") != plan_.sweep.name:
        raise ConfigError(f"--out {out} holds sweep '{known.get('sweep')}', not "
                          f"'{plan_.sweep.name}'; choose another --out")
    points = dict((known or {}).get("points", {}))
    for p in plan_.points:
        before = points.get(p.name)
        if before is not None and before["overrides"] != p.overrides and (out / p.name).exists():
            changed = sorted(set(p.overrides) ^ set(before["overrides"]))
            raise ConfigError(f"{out / p.name} was trained with other settings ({changed[0]} "
                              f"differs); choose another --out, or remove that folder to retrain "
                              f"the point")
    out.mkdir(parents=True, exist_ok=True)
    for name, tok in plan_.tokenizers.items():
        if not (out / name).is_file():
            tok.save(out / name)
    record = manifest(plan_)
    record["points"] = {**points, **record["points"]}
    tmp = out / f".{MANIFEST}.tmp"
    tmp.write_text(json.dumps(record, indent=1), encoding="utf-8")
    tmp.replace(out / MANIFEST)


def finished(out: Path, point: Point) -> bool:
    return (out / point.name / "results.json").is_file()


def train_command(point: Point, sweep: Sweep, out: Path, *, threads: int | None = None,
                  quiet: bool = True) -> list[str]:
    """``fullrank train BASE OVERRIDES… name=POINT out_dir=OUT resume=auto``: one point, as
    anyone could run it by hand (or under ``torchrun``)."""
    # the runner's share of the cores, unless the point's own settings fix the thread count
    fixed = any(o.startswith("train.threads=") for o in point.overrides)
    extra = [f"train.threads={threads}"] if threads and not fixed else []
    return ["fullrank", "train", str(sweep.base), *point.overrides, *extra,
            f"name={point.name}", f"out_dir={out}", "resume=auto", *(["--quiet"] if quiet else [])]
