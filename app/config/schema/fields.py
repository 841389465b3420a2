"""The field types every section of the config shares: values from ``${ENV}``, choices, identifiers,
SQL expressions, topic names, and :class:`Section`, the base of every model."""

from __future__ import annotations

import enum
import re
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    PlainValidator,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    WithJsonSchema,
    model_validator,
)
from pydantic_core import PydanticCustomError

from spouts.kafka.config import redact
from states.spec import check_identifier

ENV_REF = r"\$\{[A-Za-z_][A-Za-z0-9_]*(:-[^}]*)?\}"
_TOPIC = re.compile(r"^[A-Za-z0-9._-]{1,249}$")
PIPELINE_ID = re.compile(r"^[a-z][a-z0-9_-]{0,47}$")
AGGREGATORS = ("count", "sum", "min", "max", "latest", "first")


def at(field: str, message: str) -> PydanticCustomError:
    """An error of a model's check that belongs to one of its fields (``field`` may be dotted)."""
    return PydanticCustomError("config", "{message}", {"message": message, "at": field})


def _from_env_int(v: Any) -> Any:
    return int(v) if isinstance(v, str) and re.fullmatch(r"\s*-?\d+\s*", v) else v


def _from_env_number(v: Any) -> Any:
    if isinstance(v, str):
        try:
            return float(v)
        except ValueError:
            return v
    return v


def _from_env_bool(v: Any) -> Any:
    return v.strip().lower() == "true" if isinstance(v, str) and v.strip().lower() in ("true", "false") else v


def none_is_empty(empty: Any) -> BeforeValidator:
    return BeforeValidator(lambda v: empty() if v is None else v)


Int = Annotated[StrictInt, BeforeValidator(_from_env_int)]
Number = Annotated[StrictFloat, BeforeValidator(_from_env_number), Field(allow_inf_nan=False)]
Positive = Annotated[Number, Field(gt=0)]
Bool = Annotated[StrictBool, BeforeValidator(_from_env_bool)]
Text = Annotated[StrictStr, Field(min_length=1)]


def choice(*options: str, upper: bool = False) -> Any:
    def check(v: Any) -> str:
        if not isinstance(v, str) or not v:
            msg = f"expected one of {', '.join(options)}, got {v!r}"
            raise ValueError(msg)
        v = v.upper() if upper else v.lower()
        if v not in options:
            msg = f"{v!r} is not one of {', '.join(options)}"
            raise ValueError(msg)
        return str(v)
    return Annotated[str, PlainValidator(check), WithJsonSchema({"enum": list(options), "type": "string"})]


def member(kind: type[enum.Enum]) -> Any:
    """A choice among an enum's values, held as the enum member (``opaque`` -> ``SpoutKind.OPAQUE``)."""
    options = [str(m.value) for m in kind]

    def check(v: Any) -> enum.Enum:
        if isinstance(v, kind):
            return v
        if not isinstance(v, str) or not v:
            msg = f"expected one of {', '.join(options)}, got {v!r}"
            raise ValueError(msg)
        try:
            return kind(v.lower())
        except ValueError:
            msg = f"{v.lower()!r} is not one of {', '.join(options)}"
            raise ValueError(msg) from None
    return Annotated[kind, PlainValidator(check), PlainSerializer(lambda m: m.value, return_type=str),
                     WithJsonSchema({"enum": options, "type": "string"})]


def identifier(what: str, *, stored: bool = False) -> Any:
    def check(v: str) -> str:
        check_identifier(v, what)
        if stored and v.startswith("prev_"):
            msg = (
                f"{what} {v!r}: the prefix prev_ is reserved (opaque state stores the previous value "
                "of each column as prev_<column>)"
            )
            raise ValueError(msg)
        return v
    return Annotated[StrictStr, AfterValidator(check), Field(json_schema_extra={"pattern": r"^[a-z][a-z0-9_]{0,47}$"})]


def _scalar(v: Any) -> str:
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, (str, int, float)):
        return str(v)
    msg = "must be a scalar (a string, a number or a boolean)"
    raise ValueError(msg)


Scalar = Annotated[str, PlainValidator(_scalar), WithJsonSchema({"type": ["string", "number", "boolean"]})]


def _expression(e: Any) -> str:
    if not isinstance(e, str) or not e.strip():
        msg = f"expected a Spark SQL expression (a non-empty string), got {e!r}"
        raise ValueError(msg)
    return e


Expression = Annotated[str, PlainValidator(_expression), WithJsonSchema({"type": "string", "minLength": 1})]
Expressions = Annotated[list[Expression], BeforeValidator(lambda v: [v] if isinstance(v, str) else v),
                        Field(min_length=1)]


def _topic(name: str) -> str:
    if not _TOPIC.match(name):
        msg = f"invalid topic name {name!r} (letters, digits, '.', '_', '-')"
        raise ValueError(msg)
    return name


Topic = Annotated[StrictStr, AfterValidator(_topic)]


class Section(BaseModel):
    """A mapping with known keys only; an empty value (``state:``) is an empty mapping.

    Free-form maps of settings (``properties``, ``conf``) show with their secrets as ``***`` in a repr.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    def __repr_args__(self) -> Any:
        for name, value in super().__repr_args__():
            yield name, (redact(value) if name in ("properties", "conf") and isinstance(value, dict) else value)

    @model_validator(mode="before")
    @classmethod
    def _empty(cls, data: Any) -> Any:
        return {} if data is None else data
