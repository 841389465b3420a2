"""Product defects the chaos suite found, each pinned by the smallest test that shows it."""

from __future__ import annotations

import pyarrow as pa
import pytest


def test_a_json_string_with_invalid_utf8_is_a_bad_record_at_decode() -> None:
    """Found by the bad-records scenario (seed 6): ``{"user": "\\xff\\xfe", ...}`` parsed into a string column
    that is not UTF-8; the commit task then failed on it with UnicodeDecodeError on every attempt, so the txid
    was replayed until the outage limit and the record never reached the dead-letter topic. It must be
    reported as bad by the decoder, and what the decoder returns must be valid Arrow."""
    json_fields = pytest.importorskip("spouts.kafka.formats.json_fields",
                                      reason="the JSON record format is not in this build")
    decoder = json_fields.JsonDecoder((("user", "string"), ("amount", "bigint")))
    values = pa.array([b'{"user": "k01", "amount": 1}', b'{"user": "\xff\xfe", "amount": 1}',
                       b'{"user": "k02", "amount": 2}'], pa.binary())
    decoded = decoder.decode(values)
    assert set(decoded.bad) == {1}
    decoded.array.validate(full=True)
    rows = decoded.array.to_pylist()
    assert rows[0] == {"user": "k01", "amount": 1}
    assert rows[2] == {"user": "k02", "amount": 2}
