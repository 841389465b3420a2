"""Ask a source why a read failed where the failure reached the driver only as text (a Spark task's traceback).

A spout error raised in a task crosses Spark as text, and text decides nothing: the read is asked
again on the driver, where the spout raises its own typed error. Rights are granted per topic (a
Read ACL missing on one topic of several), so one range of *every* topic of the batch is asked,
not the batch's first range only.

Only a failure of the read is asked about: a spout error types it; anything else the read raises (a Kafka,
network, registry or decoding error) says nothing typed, and the next topic may. A failure of this process
(:data:`NOT_A_READ_FAILURE`: out of memory; KeyboardInterrupt and SystemExit are no ``Exception``) is never the
source's verdict on a range: it propagates.
"""

from __future__ import annotations

from spouts.errors import SpoutError
from spouts.metadata import BatchPlan, PartitionMetadata
from spouts.protocols import ArrowSpout

#: What a read may raise that is no failure of the read: this process is out of memory (the native reader's chunk
#: included). Never taken for "untyped", and no other topic is read after it.
NOT_A_READ_FAILURE: tuple[type[Exception], ...] = (MemoryError,)


def first_range_per_topic(plan: BatchPlan) -> list[PartitionMetadata]:
    """The first non-empty range of each topic of ``plan``, in topic order."""
    firsts: dict[str, PartitionMetadata] = {}
    for m in plan:
        if not m.empty:
            firsts.setdefault(m.topic, m)
    return [firsts[t] for t in sorted(firsts)]


def typed_read_failure(spout: ArrowSpout, plan: BatchPlan) -> SpoutError | None:
    """The typed error reading one record of each topic of ``plan`` raises here, or None when every read goes
    through (or fails untyped: then the failure stays as it came)."""
    for meta in first_range_per_topic(plan):
        found = _read_one(spout, meta)
        if found is not None:
            return found
    return None


def _read_one(spout: ArrowSpout, meta: PartitionMetadata) -> SpoutError | None:
    records = spout.read_arrow(meta, batch_size=1, on_bad=lambda _: None)
    try:
        next(iter(records), None)
    except SpoutError as typed:
        return typed
    except NOT_A_READ_FAILURE:
        raise
    except Exception:  # noqa: BLE001 - any other failure of the read says nothing typed; the next topic may
        return None
    finally:
        close = getattr(records, "close", None)
        if callable(close):
            close()
    return None
