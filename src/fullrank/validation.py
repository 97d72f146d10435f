"""Settings validated by pydantic: the one path every config value goes through.

Every config class (the model families, :class:`~fullrank.training.config.TrainConfig`, the
sections of an experiment file) is a frozen, keyword-only pydantic dataclass made by
:func:`config_dataclass`. Types and ranges are declared on the fields with the aliases below
(``PositiveInt``, ``Probability``, …); pydantic checks them whenever a config is made, from a
file, a checkpoint's ``meta.json`` or Python, and rejects unknown keys, NaN and infinity.
Checks that relate several fields stay in the class's ``__post_init__``.

A config made in Python that fails raises :class:`~fullrank.errors.ConfigError`, one line naming
the field, the value and what is expected (``DecoderLMConfig.d_model = 0: should be greater than
0``); a file's errors are named by their dotted key (``train.lr = -1.0: …``) by
:func:`describe`.
"""

from __future__ import annotations

import dataclasses
import functools
import typing
from typing import Annotated, Any, TypeVar

import pydantic.dataclasses
from pydantic import ConfigDict, Field, Strict, ValidationError
from typing_extensions import dataclass_transform

from fullrank.errors import ConfigError, closest

# unknown keys are errors; floats must be finite
CONFIG = ConfigDict(extra="forbid", allow_inf_nan=False)

# Field types. Numbers are strict: ``True`` is not 1, ``"3"`` and ``3.5`` are not integers (an
# integer is a float, though). Floats are finite (CONFIG).
Int = Annotated[int, Strict()]
PositiveInt = Annotated[int, Strict(), Field(gt=0)]
NonNegativeInt = Annotated[int, Strict(), Field(ge=0)]
Float = Annotated[float, Strict()]
PositiveFloat = Annotated[float, Strict(), Field(gt=0)]
NonNegativeFloat = Annotated[float, Strict(), Field(ge=0)]
Probability = Annotated[float, Strict(), Field(ge=0, lt=1)]  # a rate in [0, 1)
UnitFloat = Annotated[float, Strict(), Field(ge=0, le=1)]  # a share in [0, 1]
Bool = Annotated[bool, Strict()]
# a random seed: what every generator takes, with room for the offsets added to it (rank, run)
SEED_LIMIT = 2**32
Seed = Annotated[int, Strict(), Field(ge=0, lt=SEED_LIMIT)]
Str = Annotated[str, Strict()]

C = TypeVar("C")


@dataclass_transform(kw_only_default=True, frozen_default=True, field_specifiers=(dataclasses.field,))
def config_dataclass(cls: type[C]) -> type[C]:
    """Make ``cls`` a frozen, keyword-only pydantic dataclass that rejects unknown keys and
    non-finite floats, and whose constructor raises a one-line :class:`ConfigError` (a
    subclass is decorated again)."""
    made = pydantic.dataclasses.dataclass(frozen=True, kw_only=True, config=CONFIG)(cls)
    init = made.__init__

    @functools.wraps(init)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        try:
            init(self, *args, **kwargs)
        except ValidationError as e:
            raise ConfigError(describe(e, made, prefix=made.__name__)) from None

    made.__init__ = __init__  # type: ignore[method-assign]  # pydantic's, wrapped
    return typing.cast(type[C], made)


def _field_type(owner: Any, name: str) -> Any:
    """The declared type of field ``name`` of dataclass ``owner`` (a dataclass, or ``None``)."""
    if not dataclasses.is_dataclass(owner):
        return None
    hint = typing.get_type_hints(owner).get(name)
    for arg in (hint, *typing.get_args(hint)):  # X | None → X
        if dataclasses.is_dataclass(arg):
            return arg
    return None


def describe(error: ValidationError, root: Any = None, prefix: str = "", skip: int = 0) -> str:
    """The first error of ``error`` as one line: the dotted key, the value, what is expected
    (and for an unknown key, the closest known one of dataclass ``root``). ``skip``: leading
    parts of the error's location that are no key (a discriminated union's tag)."""
    first = error.errors()[0]
    loc = [str(p) for p in first["loc"]][skip:]
    dotted = ".".join([prefix, *loc] if prefix else loc) or (prefix or "value")
    kind = first["type"]
    if kind in ("unexpected_keyword_argument", "extra_forbidden"):
        owner: Any = root
        for part in loc[:-1]:
            owner = _field_type(owner, part)
        names = [f.name for f in dataclasses.fields(owner)] if dataclasses.is_dataclass(owner) else []
        return f"unknown key '{dotted}'{closest(loc[-1], names)}"
    if kind in ("missing", "missing_argument", "missing_keyword_only_argument"):
        return f"missing key '{dotted}'"
    msg = first["msg"]
    if kind in ("value_error", "assertion_error"):  # a check of our own: it names the field
        return msg.removeprefix("Value error, ").removeprefix("Assertion failed, ")
    value = first.get("input")
    what = msg.replace("Input should be", "should be")
    if isinstance(value, (dict, list, tuple)) and len(repr(value)) > 60:
        return f"{dotted}: {what} (got a {type(value).__name__})"
    return f"{dotted} = {value!r}: {what}"
