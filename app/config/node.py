"""A validating view of a YAML document: typed getters whose errors name the field's path."""

from __future__ import annotations

import builtins

import re
from collections.abc import Callable, Mapping
from typing import Any

_MISSING: Any = object()


class ConfigError(ValueError):
    """A config value that is missing, mistyped or invalid; ``path`` names it (``pipelines[0].state``)."""

    def __init__(self, path: str, message: str) -> None:
        self.path, self.message = path, message
        super().__init__(f"{path}: {message}" if path else message)


class Node:
    """A value at ``path`` with typed getters that raise :class:`ConfigError` naming the path."""

    __slots__ = ("path", "present", "value")

    def __init__(self, value: Any, path: str, present: bool = True) -> None:
        self.value, self.path, self.present = value, path, present

    def mapping(self) -> Mapping[builtins.str, Any]:
        if not self.present or self.value is None:
            return {}
        if not isinstance(self.value, Mapping):
            raise ConfigError(self.path, f"expected a mapping, got {_kind(self.value)}")
        for k in self.value:
            if not isinstance(k, str):
                raise ConfigError(self.path, f"keys must be strings, got {k!r}")
        return self.value

    def keys(self, *known: builtins.str) -> None:
        unknown = [k for k in self.mapping() if k not in known]
        if unknown:
            raise ConfigError(_join(self.path, unknown[0]), f"unknown key (known here: {', '.join(known)})")

    def child(self, key: builtins.str, *, required: builtins.bool = False) -> Node:
        m = self.mapping()
        if key not in m:
            if required:
                raise ConfigError(_join(self.path, key), "required")
            return Node(None, _join(self.path, key), present=False)
        return Node(m[key], _join(self.path, key))

    def items(self) -> list[Node]:
        if not self.present or self.value is None:
            return []
        if not isinstance(self.value, list):
            raise ConfigError(self.path, f"expected a list, got {_kind(self.value)}")
        return [Node(v, f"{self.path}[{i}]") for i, v in enumerate(self.value)]

    def checked(self, check: Callable[..., Any], *args: Any) -> Any:
        return _checked(self.path, lambda: check(self.value, *args))

    def str(self, key: builtins.str, *, default: Any = _MISSING, required: builtins.bool = False) -> Any:
        n = self.child(key, required=required)
        if not n.present or n.value is None:
            return None if default is _MISSING else default
        if not isinstance(n.value, str) or not n.value:
            raise ConfigError(n.path, f"expected a non-empty string, got {_kind(n.value)}")
        return n.value

    def bool(self, key: builtins.str, default: builtins.bool) -> builtins.bool:
        n = self.child(key)
        if not n.present:
            return default
        v = n.value
        if isinstance(v, str) and v.strip().lower() in ("true", "false"):  # from ${ENV} interpolation
            v = v.strip().lower() == "true"
        if not isinstance(v, bool):
            raise ConfigError(n.path, f"expected true or false, got {_kind(n.value)}")
        return v

    def int(self, key: builtins.str, default: builtins.int | None, *, minimum: builtins.int | None = None,
            maximum: builtins.int | None = None) -> Any:
        n = self.child(key)
        if not n.present or n.value is None:
            return default
        v = n.value
        if isinstance(v, str) and re.fullmatch(r"-?\d+", v.strip()):  # from ${ENV} interpolation
            v = int(v)
        if isinstance(v, bool) or not isinstance(v, int):
            raise ConfigError(n.path, f"expected an integer, got {_kind(n.value)}")
        _bounds(n.path, v, minimum, maximum)
        return v

    def number(self, key: builtins.str, default: Any, *, minimum: float | None = None,
               positive: builtins.bool = False) -> Any:
        """A number (also from a ``${ENV}`` string); ``positive`` refuses zero and below."""
        n = self.child(key)
        if not n.present or n.value is None:
            return default
        v = n.value
        if isinstance(v, str):
            try:
                v = float(v)
            except ValueError:
                pass
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise ConfigError(n.path, f"expected a number, got {_kind(n.value)}")
        if isinstance(v, float) and v != v:
            raise ConfigError(n.path, "expected a number, got NaN")
        if positive and v <= 0:
            raise ConfigError(n.path, f"must be > 0, got {v}")
        _bounds(n.path, v, minimum, None)
        return float(v)

    def choice(self, key: builtins.str, options: tuple[builtins.str, ...], default: builtins.str) -> builtins.str:
        v = self.str(key, default=default)
        if v not in options:
            raise ConfigError(_join(self.path, key), f"{v!r} is not one of {', '.join(options)}")
        return v

    def enum(self, key: builtins.str, enum_cls: Any, default: Any) -> Any:
        options = tuple(e.value for e in enum_cls)
        v = self.str(key, default=None)
        if v is None:
            return default
        v = v.lower()
        if v not in options:
            raise ConfigError(_join(self.path, key), f"{v!r} is not one of {', '.join(options)}")
        return enum_cls(v)


def _checked(path: str, build: Callable[[], Any]) -> Any:
    """``build()``, with a ValueError or TypeError it raises re-raised as a ConfigError at ``path``."""
    try:
        return build()
    except ConfigError:
        raise
    except (ValueError, TypeError) as e:
        raise ConfigError(path, str(e)) from None


def _bounds(path: str, v: float, minimum: float | None, maximum: float | None) -> None:
    if minimum is not None and v < minimum:
        raise ConfigError(path, f"must be >= {minimum}, got {v}")
    if maximum is not None and v > maximum:
        raise ConfigError(path, f"must be <= {maximum}, got {v}")


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else str(key)


def _kind(v: Any) -> str:
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

