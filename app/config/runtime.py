"""The runtime objects of the lower layers, filled from the validated config models by field name.

The models of :mod:`.schema` are the one place an option is declared (its type, bounds, default and
description). The ``spouts`` and ``states`` layers and the coordinator take frozen dataclasses of their
own (they never import ``app``); :func:`build` fills one from the model fields of the same name, so an
option that a dataclass gains is carried by naming it alike in the model, not by another copy here.
"""

from __future__ import annotations

import dataclasses
import enum
import sys
import types
import typing
from collections.abc import Mapping
from typing import Any, TypeVar, Union

from pydantic import BaseModel, SecretStr

T = TypeVar("T")


def build(cls: type[T], *sources: BaseModel, **given: Any) -> T:
    """``cls`` (a dataclass) with each field from ``given`` or else from the first of ``sources`` that has it.

    Fields no source has keep the dataclass's default. Values are converted to the field's type: a
    string to its enum, a list to a tuple, a mapping to pairs (in order) where the field is a tuple, a nested
    model to its dataclass, a secret string to the field's secret type.
    """
    hints = _hints(cls)
    values = dict(given)
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        if f.name in values or not f.init:
            continue
        for source in sources:
            if f.name in type(source).model_fields:
                values[f.name] = convert(getattr(source, f.name), hints[f.name])
                break
    return cls(**values)


_HINTS: dict[type[Any], dict[str, Any]] = {}


def _hints(cls: type[Any]) -> dict[str, Any]:
    """Each field's type; one named only for type checkers (imported under TYPE_CHECKING) counts as Any."""
    if cls not in _HINTS:
        module = vars(sys.modules[cls.__module__])
        hints: dict[str, Any] = {}
        for f in dataclasses.fields(cls):
            try:
                hints[f.name] = eval(f.type, module) if isinstance(f.type, str) else f.type  # noqa: S307  our own annotation text, as typing.get_type_hints evaluates it
            except NameError:
                hints[f.name] = Any
        _HINTS[cls] = hints
    return _HINTS[cls]


def convert(value: Any, hint: Any) -> Any:  # noqa: PLR0911  one answer per kind of type
    """``value`` (a model's field) as the type ``hint`` names."""
    if value is None:
        return None
    origin = typing.get_origin(hint)
    if origin in (Union, types.UnionType):
        options = [a for a in typing.get_args(hint) if a is not type(None)]
        return convert(value, options[0]) if len(options) == 1 else value
    if isinstance(value, SecretStr):
        secret = value.get_secret_value()
        return secret if hint is str or not callable(hint) else hint(secret)
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return hint(value)
    if isinstance(value, BaseModel) and isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return build(hint, value)
    if origin is tuple:
        if isinstance(value, Mapping):
            return tuple((str(k), str(v)) for k, v in value.items())  # in the order written (json fields)
        return tuple(value)
    if origin in (dict, Mapping) or hint in (dict, Mapping):
        return dict(value)
    return value
