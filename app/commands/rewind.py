"""``rewind``: move where a pipeline's next txid starts reading, as a new committed txid.

Txids never go backwards (stored values carry them; the opaque rule needs them to grow), so a
rewind commits txid N+1 (N: the highest committed or frozen txid) whose plan puts every partition
at its target offset with an empty range; the next txid continues from there. It runs only while
no coordinator holds the lease: it takes the lease itself (refusing, with the holder's name and
expiry, otherwise), writes the plan, the committed marker and an audit line fenced by its epoch,
and releases it. Stored aggregates are *not* rolled back: records read again count again, unless
``--reset-state --yes-i-know`` also empties the pipeline's tables for a full recount.

A partition whose topic is missing, deleted or no longer in the config keeps its stored position
(docs/design.md); a rewind leaves it there unless ``--forget TOPIC`` names its topic: then its
positions leave the plan, and the topic, if it is read again, starts from the first-poll strategy.
This is the only way a position is forgotten.

A txid frozen but not committed (a service stopped mid-commit) may already count in some keys; only its replay
finishes it exactly, so a rewind without ``--reset-state`` is refused (exit 3) until the service has run once
and committed it. With ``--reset-state`` the tables it wrote into are emptied, and the rewind commits above it.

A rewind interrupted after its first write (an error or a crash) keeps the lease for its TTL, so no
service can start on a half-done rewind; run the same rewind again (as the same owner it takes over
at once).
"""

from __future__ import annotations

import argparse
import logging
import socket
import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from app.commands.common import (
    BAD_INPUT,
    FAILED,
    OK,
    REFUSED,
    CommandError,
    add_config,
    compile_all,
    load_config,
    parser,
    pipeline_of,
    progress,
)
from app.kafka_offsets import KafkaOffsets, kafka_reason
from spouts.metadata import BatchPlan, Partition, PartitionMetadata

SUMMARY = "move where a pipeline's next txid starts reading (earliest, latest, a time or offsets)"
LEASE_TTL_S = 300.0  # long enough for a truncate; a crashed rewind blocks the service this long
log = logging.getLogger("app.rewind")


def add(sub: Any) -> None:
    p = parser(sub, "rewind", SUMMARY,
               "python -m app rewind --config examples/wordcount.yaml --pipeline word-count "
               "--to timestamp:2026-11-23T08:00:00Z --reset-state --yes-i-know")
    add_config(p)
    p.add_argument("--pipeline", required=True, metavar="ID", help="the pipeline to rewind")
    p.add_argument("--to", metavar="TARGET",
                   help="earliest | latest | timestamp:ISO-8601 (UTC if no zone) | offsets:TOPIC:PARTITION=OFFSET,... "
                        "(partitions not named stay where they are)")
    p.add_argument("--forget", action="append", default=[], metavar="TOPIC",
                   help="forget the stored positions of TOPIC (repeatable): read again, it starts from the first-poll "
                        "strategy; the only way a kept position (a topic missing or dropped from the config) goes")
    p.add_argument("--reset-state", action="store_true",
                   help="also empty the pipeline's state tables, for a full recount from the target")
    p.add_argument("--yes-i-know", action="store_true", help="confirm --reset-state (it deletes every stored value)")
    p.add_argument("--owner", default=f"rewind@{socket.gethostname()}",
                   help="the lease owner this rewind writes as (default rewind@HOSTNAME)")
    p.set_defaults(handler=main)


def main(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    config = load_config(args.config)
    pipeline = pipeline_of(config, args.pipeline)
    if args.to is None and not args.forget:
        msg = "name a target (--to) or topics to forget (--forget TOPIC)"
        raise CommandError(msg, BAD_INPUT)
    target = parse_target(args.to) if args.to is not None else ("keep", None)
    if args.reset_state and not args.yes_i_know:
        msg = (
            "--reset-state deletes every stored value of the pipeline's tables: add --yes-i-know "
            "to confirm"
        )
        raise CommandError(msg, REFUSED)
    compiled = next(c for c in compile_all(config, args.config) if c.id == pipeline.id)
    from app.config import spout_config

    with KafkaOffsets(spout_config(config, pipeline), pipeline.id) as kafka:
        if args.to is not None:  # a target on a topic the cluster lacks reads nothing; forgetting it is fine
            _refuse_missing_topics(pipeline, kafka, forget=tuple(args.forget))
        audit = rewind(compiled, kafka, target, owner=args.owner, reset_state=args.reset_state,
                       forget=tuple(args.forget))
    moved = ", ".join(f"{p} {audit['from'].get(p, '-')} -> {o}" for p, o in sorted(audit["to_offsets"].items()))
    print(f"pipeline {pipeline.id}: rewound as txid {audit['txid']}: {moved}")
    if audit["forgotten"]:
        print(f"positions forgotten: {', '.join(audit['forgotten'])} (read again, they start from the first poll)")
    if args.reset_state:
        print(f"tables emptied for a full recount: {', '.join(audit['truncated']) or '(none existed)'}")
    else:
        print("stored aggregates are NOT rolled back: records read again are counted again. For a full recount "
              "run the rewind with --reset-state --yes-i-know.")
    return OK


def parse_target(text: str) -> tuple[str, Any]:
    """``--to`` as (kind, value): ("earliest", None), ("latest", None), ("timestamp", ms), ("offsets", {p: o})."""
    if text in ("earliest", "latest"):
        return text, None
    kind, _, rest = text.partition(":")
    if kind == "timestamp" and rest:
        try:
            t = datetime.fromisoformat(rest.replace("Z", "+00:00"))  # noqa: FURB162  a date alone with Z is taken too
        except ValueError as e:
            msg = f"--to {text!r}: not an ISO-8601 time ({e})"
            raise CommandError(msg, BAD_INPUT) from None
        if t.tzinfo is None:
            t = t.replace(tzinfo=UTC)
        return "timestamp", int(t.timestamp() * 1000)
    if kind == "offsets" and rest:
        out = {}
        for item in rest.split(","):
            found = _partition_offset(item)
            if found is None:
                msg = f"--to {text!r}: {item!r} is not TOPIC:PARTITION=OFFSET"
                raise CommandError(msg, BAD_INPUT)
            out[found[0]] = found[1]
        return "offsets", out
    msg = f"--to {text!r}: use earliest, latest, timestamp:ISO-8601 or offsets:TOPIC:PARTITION=OFFSET,..."
    raise CommandError(msg,
                       BAD_INPUT)


def _partition_offset(item: str) -> tuple[Partition, int] | None:
    """``TOPIC:PARTITION=OFFSET`` as (partition, offset); None when ``item`` is not that."""
    pid, eq, off = item.rpartition("=")
    try:
        p = Partition.parse(pid)
        if not eq or not p.topic or int(off) < 0:
            return None
        return p, int(off)
    except ValueError:
        return None


def rewind(compiled: Any, kafka: KafkaOffsets, target: tuple[str, Any], *, owner: str,
           reset_state: bool, forget: tuple[str, ...] = ()) -> dict[str, Any]:
    """Take the lease, commit the rewind txid (and truncate if asked), release; returns the audit line."""
    from app.coordinator.progress import ProgressLog, StoredBatch, read_progress, record_rewind

    store = compiled.store()
    epoch = _take_lease(store, compiled.id, owner)
    started = done = False
    try:
        prog = read_progress(store)
        if prog.frozen_txids and not reset_state:
            _refuse_frozen(compiled.id, prog.frozen_txids)
        stored = {} if prog.committed_plan is None else \
            {m.partition_id: m for m in prog.committed_plan.partitions.values()}
        before = {p: m.next_offset for p, m in stored.items()}
        _refuse_unknown_forget(forget, before)
        offsets = {p: o for p, o in _targets(kafka, target, before).items() if p.topic not in forget}
        forgotten = sorted(p.id for p in before if p.topic in forget)
        txid = max([prog.committed_txid, *prog.frozen_txids]) + 1
        plan = BatchPlan(txid, {p: PartitionMetadata(p.topic, p.partition, o, o, 0, compiled.id,
                                                     _kept_log(stored.get(p), o))
                                for p, o in offsets.items()})
        from app.config import operator_name

        audit = {"txid": txid, "who": owner, "user": operator_name(), "when": time.time(),
                 "pipeline": compiled.id, "target": _describe(target),
                 "from": {p.id: o for p, o in before.items()}, "to_offsets": {p.id: o for p, o in offsets.items()},
                 "from_txid": prog.committed_txid, "reset_state": reset_state, "forgotten": forgotten, "truncated": [], "done": False}
        started = True
        record_rewind(store, epoch=epoch, txid=txid, audit=audit)
        progress_log = ProgressLog(store, epoch=epoch, retention=compiled.coordinator.retention)
        progress_log.store_batch(StoredBatch(plan, 1))
        progress_log.mark_committed(txid, at=time.time())
        if reset_state:
            audit["truncated"] = _truncate(compiled)
            store.renew_lease(owner, epoch, LEASE_TTL_S)
        audit["done"] = True
        record_rewind(store, epoch=epoch, txid=txid, audit=audit)
        done = True
        log.info("rewind of %s by %s: txid %d (after %d), %s, from %s to %s, reset_state=%s", compiled.id, owner, txid,
                 prog.committed_txid, audit["target"], audit["from"], audit["to_offsets"], reset_state)
    except CommandError:
        raise
    except Exception as e:
        if not started:
            msg = (
                f"pipeline {compiled.id!r}: rewind failed before writing anything: "
                f"{type(e).__name__}: {e}"
            )
            raise CommandError(msg) from e
        msg = (
            f"pipeline {compiled.id!r}: rewind interrupted after its first write "
            f"({type(e).__name__}: {e}); the lease stays with {owner!r} for {LEASE_TTL_S:.0f} s so no "
            "service starts on a half-done rewind: run the same rewind again"
        )
        raise CommandError(msg) from e
    else:
        return audit
    finally:
        if done or not started:
            _release(store, owner, epoch, compiled.id)


def _take_lease(store: Any, pipeline_id: str, owner: str) -> int:
    """The lease of the pipeline for ``owner`` (its epoch); refused (exit 3) while a service holds it."""
    from states.errors import LeaseHeldError

    try:
        epoch: int = store.acquire_lease(owner, LEASE_TTL_S)
    except LeaseHeldError as e:
        info = store.lease_info()
        expiry = "" if info is None or info.expires_at is None else \
            f", lease expires at {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(info.expires_at))}"
        msg = (
            f"pipeline {pipeline_id!r}: refused: the lease is held by {e.owner!r} (epoch {e.epoch}"
            f"{expiry}); stop that service first (a standby would take over: stop every instance)"
        )
        raise CommandError(msg,
                           REFUSED) from None
    return epoch


def _kept_log(stored: PartitionMetadata | None, offset: int) -> str | None:
    """The topic id a rewound position keeps: the stored one where the position stays where it was (it still
    belongs to that log, so a topic re-created meanwhile is still told apart); none where it moves (the target
    was looked up in the current log, whose id the next plan adopts)."""
    return stored.topic_id if stored is not None and stored.next_offset == offset else None


def _refuse_frozen(pipeline_id: str, frozen: Sequence[int]) -> None:
    """A frozen, uncommitted txid F may already have written some keys (a service killed mid-commit): only its
    replay finishes it exactly. A rewind without a reset would plan from the last committed txid, read F's ranges
    again as a newer txid and count F's records twice in every key F wrote: refused (exit 3), nothing written."""
    named = ", ".join(str(t) for t in frozen)
    msg = (
        f"pipeline {pipeline_id!r}: refused: txid {named} is frozen but not committed (a service stopped "
        "mid-commit; some keys may already count it), and a rewind without --reset-state would count its records "
        "twice: run the service once so it replays and commits the txid, then rewind; or rewind with "
        "--reset-state --yes-i-know for a full recount"
    )
    raise CommandError(msg, REFUSED)


def _refuse_unknown_forget(forget: Sequence[str], before: Mapping[Partition, int]) -> None:
    """``--forget`` names only topics that have a stored position (else exit 2)."""
    unknown = sorted(set(forget) - {p.topic for p in before})
    if unknown:
        msg = (
            f"--forget: no stored position of topic {', '.join(unknown)} (stored: "
            f"{', '.join(sorted({p.topic for p in before})) or 'none'})"
        )
        raise CommandError(msg, BAD_INPUT)


def _release(store: Any, owner: str, epoch: int, pipeline_id: str) -> None:
    """Give the lease up; when the store cannot tell whether it did, say so: the lease expires with its TTL."""
    from states.errors import StateError

    try:
        store.release_lease(owner, epoch)
    except StateError as e:
        log.warning("pipeline %s: the lease (owner %s, epoch %d) may still be held: %s; it expires within %.0f s",
                    pipeline_id, owner, epoch, e, LEASE_TTL_S)


def _refuse_missing_topics(pipeline: Any, kafka: KafkaOffsets, *, forget: tuple[str, ...] = ()) -> None:
    """A rewind onto a topic the cluster does not have would commit a txid that reads nothing: refused (exit 2),
    unless ``--forget`` names it (its positions leave the plan)."""
    try:
        found = {p.topic for p in kafka.partitions()}
    except Exception as e:  # noqa: BLE001 - Kafka could not answer: nothing was written yet
        msg = f"cannot read the topics from Kafka: {kafka_reason(e)}"
        raise CommandError(msg, FAILED) from None
    missing = [t for t in pipeline.spout.topics if t not in found and t not in forget]
    if missing or not (found or forget):
        named = ", ".join(missing) or f"/{pipeline.spout.topic_pattern}/"
        msg = (
            f"pipeline {pipeline.id!r}: topic {named} does not exist on the cluster: nothing to "
            "rewind (a misspelled topic, or not created yet: python -m app topics apply; "
            "--forget TOPIC drops its stored positions)"
        )
        raise CommandError(msg, BAD_INPUT)


def _targets(kafka: KafkaOffsets, target: tuple[str, Any], before: dict[Partition, int]) -> dict[Partition, int]:
    """Where every partition goes: the ones the pipeline reads now to the target, every other stored one (its
    topic missing or no longer configured) stays at its kept position."""
    kind, value = target
    if kind == "keep":
        return dict(before)
    try:
        parts = sorted(kafka.partitions())
        marks = kafka.watermarks(parts)
        if kind == "earliest":
            return {**before, **{p: marks[p][0] for p in parts}}
        if kind == "latest":
            return {**before, **{p: marks[p][1] for p in parts}}
        if kind == "timestamp":
            progress(f"looking up offsets at {value} ms in {len(parts)} partition(s)")
            return {**before, **kafka.for_time(parts, value)}
    except CommandError:
        raise
    except Exception as e:  # noqa: BLE001 - Kafka could not answer: nothing was written yet
        msg = f"cannot read offsets from Kafka: {kafka_reason(e)}"
        raise CommandError(msg, FAILED) from None
    out = dict(before)
    for p, o in value.items():
        if p not in marks:
            msg = (
                f"--to offsets: partition {p.id} is not one the pipeline reads "
                f"(known: {', '.join(q.id for q in parts)})"
            )
            raise CommandError(msg, BAD_INPUT)
        low, end = marks[p]
        if not low <= o <= end:
            msg = f"--to offsets: {p.id}={o} is outside the log [{low}, {end}]"
            raise CommandError(msg, BAD_INPUT)
        out[p] = o
    return out


def _truncate(compiled: Any) -> list[str]:
    tables = [sink.name for _, sink in compiled.topology.sinks]
    progress(f"emptying table(s) {', '.join(tables)} for a full recount")
    emptied: list[str] = compiled.state.reader().truncate(tables)
    return emptied


def _describe(target: tuple[str, Any]) -> str:
    kind, value = target
    if kind == "timestamp":
        return f"timestamp:{datetime.fromtimestamp(value / 1000, UTC).isoformat()}"
    if kind == "offsets":
        return "offsets:" + ",".join(f"{p.id}={o}" for p, o in sorted(value.items()))
    return kind
