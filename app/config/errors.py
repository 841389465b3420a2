"""ConfigError, and pydantic's validation errors said the way a config's author reads them."""

from __future__ import annotations

import typing
from typing import Any

from pydantic import BaseModel, ValidationError


class ConfigError(ValueError):
    """A config value that is missing, mistyped or invalid; ``path`` names it (``pipelines[0].state``)."""

    def __init__(self, path: str, message: str) -> None:
        self.path, self.message = path, message
        super().__init__(f"{path}: {message}" if path else message)


_AT_LEAST_ONE = {"pipelines": "pipeline", "aggregates": "aggregate", "map": "Spark SQL expression",
                 "each": "Spark SQL expression", "contact_points": "host"}
_EXPECTED = {"int_type": "an integer", "int_parsing": "an integer", "int_from_float": "an integer",
             "float_type": "a number", "float_parsing": "a number", "bool_type": "true or false",
             "bool_parsing": "true or false", "string_type": "a non-empty string",
             "string_too_short": "a non-empty string", "model_type": "a mapping", "dict_type": "a mapping",
             "model_attributes_type": "a mapping", "list_type": "a list", "finite_number": "a finite number"}


def config_error(e: ValidationError, root: type[BaseModel]) -> ConfigError:  # noqa: PLR0911  one answer per error kind
    """The first error of ``e`` as a ConfigError at its dotted path (``pipelines[0].state.table``)."""
    err = e.errors(include_url=False)[0]
    loc = [p for p in err["loc"] if p != "[key]"]
    path = join(loc)
    kind, ctx, value = err["type"], err.get("ctx") or {}, err.get("input")
    if kind == "config":
        return ConfigError(_dot(path, ctx["at"]), str(ctx["message"]))
    if kind == "value_error":
        return ConfigError(path, str(ctx.get("error", err["msg"])))
    if kind == "missing":
        return ConfigError(path, "required")
    if kind == "extra_forbidden":
        known = _known(root, loc[:-1])
        return ConfigError(path, "unknown key" + (f" (known here: {', '.join(known)})" if known else ""))
    if kind == "too_short":
        what = next((_AT_LEAST_ONE[p] for p in reversed(loc) if isinstance(p, str) and p in _AT_LEAST_ONE), "item")
        return ConfigError(path, f"name at least one {what}")
    if kind in _EXPECTED:
        return ConfigError(path, f"expected {_EXPECTED[kind]}, got {kind_of(value)}")
    bounds = {"greater_than": ">", "greater_than_equal": ">=", "less_than": "<", "less_than_equal": "<="}
    if kind in bounds:
        limit = next(iter(ctx.values()))
        return ConfigError(path, f"must be {bounds[kind]} {limit}, got {value}")
    return ConfigError(path, str(err["msg"]))


def join(loc: list[Any]) -> str:
    out = ""
    for p in loc:
        out = f"{out}[{p}]" if isinstance(p, int) else _dot(out, str(p))
    return out


def _dot(path: str, key: str) -> str:
    if not path:
        return key
    return path + key if key.startswith("[") else f"{path}.{key}"


def _known(model: type[BaseModel], loc: list[Any]) -> list[str]:
    """The keys the mapping at ``loc`` accepts (followed through the models' annotations)."""
    current: Any = model
    for p in loc:
        if isinstance(p, str) and isinstance(current, type) and issubclass(current, BaseModel):
            field = next((f for n, f in current.model_fields.items() if p in (n, f.alias)), None)
            if field is not None:
                current = _model_in(field.annotation)
    if isinstance(current, type) and issubclass(current, BaseModel):
        return [f.alias or n for n, f in current.model_fields.items()]
    return []


def _model_in(annotation: Any) -> Any:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        found = _model_in(arg)
        if found is not None:
            return found
    return None


def kind_of(v: Any) -> str:
    if v is None:
        return "nothing"
    if isinstance(v, bool):
        return f"a boolean ({str(v).lower()})"
    if isinstance(v, str):
        return f"a string ({v!r})" if v else "an empty string"
    if isinstance(v, (int, float)):
        return f"a number ({v})"
    names: dict[type, str] = {dict: "a mapping", list: "a list"}
    return names.get(type(v), type(v).__name__)
