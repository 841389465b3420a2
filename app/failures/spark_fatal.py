"""Fatal state errors raised inside Spark tasks, carried to the driver as data rather than as text.

Spark turns an exception in a task into a generic error that keeps only its message, so a batch
behind the state (:class:`~states.errors.StaleBatchError`: a zombie writer) would come back as an
ordinary failure and be replayed forever, and a table of the wrong shape would be told from a
network error only by its text. Commit tasks therefore catch the fatal state errors
(:data:`states.errors.FATAL`) and the configuration ones (:data:`states.errors.CONFIGURATION`),
stop writing, and return the error's fields in their stats row (column ``fatal``); the driver
rebuilds the same exception from those fields, and the coordinator stops. The text::

    {"error": "StaleBatchError", "fields": {"batch_txid": 1, "stored_txid": 2, "key": ["fox"]}}

``fields`` are the exception's constructor arguments, read from its attributes of the same names
(every error here keeps them); a tuple travels as a JSON list and comes back as a tuple. The
message is never parsed, so rewording it changes nothing.
"""

from __future__ import annotations

import inspect
import json
from typing import Any

from states.errors import CONFIGURATION, FATAL

#: What commit tasks return instead of raising: the fatal state errors and the configuration ones.
CARRIED: tuple[type[BaseException], ...] = FATAL + CONFIGURATION
_BY_NAME = {cls.__name__: cls for cls in CARRIED}


def encode(error: BaseException) -> str:
    """The JSON record of ``error`` (an instance of a class in :data:`CARRIED`)."""
    cls = type(error)
    if _BY_NAME.get(cls.__name__) is not cls:
        msg = f"{cls.__name__} is not carried across Spark"
        raise TypeError(msg)
    fields = {name: _plain(getattr(error, name)) for name in inspect.signature(cls).parameters}
    return json.dumps({"error": cls.__name__, "fields": fields}, default=repr)


def decode(record: str) -> BaseException:
    """The exception :func:`encode` wrote."""
    doc = json.loads(record)
    cls = _BY_NAME[doc["error"]]
    return cls(**{name: _tupled(value) for name, value in doc["fields"].items()})


def _plain(value: Any) -> Any:
    return [_plain(v) for v in value] if isinstance(value, tuple) else value


def _tupled(value: Any) -> Any:
    return tuple(_tupled(v) for v in value) if isinstance(value, list) else value
