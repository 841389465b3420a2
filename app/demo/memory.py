"""The in-memory word count demo: a generated stream through the coordinator into an OpaqueMap."""

from __future__ import annotations

import random
from collections import Counter

from app.coordinator.coordinator import Coordinator, CoordinatorConfig
from app.topology.local import LocalExecutor, Sink
from spouts.memory import MemorySource, MemorySpout
from spouts.metadata import Partition
from spouts.planner import Caps
from states import CachedMap, Count, OpaqueMap
from states.memory import MemoryBackingMap, MemoryTransactionalStateStore

WORDS = ("the", "quick", "brown", "fox", "jumps", "over", "lazy", "dog", "and", "cat")


def run(records: int = 20_000, partitions: int = 4, seed: int = 7) -> int:
    """Produce ``records`` sentences, count words exactly once, print the top words; 0 if all match."""
    rng = random.Random(seed)
    source = MemorySource(Partition("sentences", p) for p in range(partitions))
    truth: Counter[str] = Counter()
    for i in range(records):
        words = [rng.choice(WORDS) for _ in range(rng.randint(1, 6))]
        truth.update(words)
        source.append(Partition("sentences", i % partitions), None, " ".join(words).encode())
    state = OpaqueMap(CachedMap(MemoryBackingMap()))
    spout = MemorySpout(source, topology_id="demo")
    executor = LocalExecutor(spout.emitter(), [Sink(state, Count(), key=lambda w: (w,))],
                             flat_map=lambda r: (r.value or b"").decode().split())
    coord = Coordinator("demo", spout, executor, MemoryTransactionalStateStore("demo"),
                        CoordinatorConfig(caps=Caps(per_partition=1000, per_batch=2500), max_pending=2))
    batches = coord.run_until_idle()
    coord.close()
    stored = state.multi_get([(w,) for w in WORDS])  # outside a commit: the current values
    counts = {w: n for w, n in zip(WORDS, stored, strict=True) if n is not None}
    print(f"committed {batches} batches (last txid {coord.committed_txid}) over {records} records")
    print(f"{'word':<8} {'count':>8} {'expected':>9}")
    for word, n in sorted(counts.items(), key=lambda kv: -kv[1]):
        print(f"{word:<8} {n:>8} {truth[word]:>9}")
    ok = counts == dict(truth)
    print("total words:", sum(counts.values()), "- all counts match" if ok else "- MISMATCH")
    return 0 if ok else 1
