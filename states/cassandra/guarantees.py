"""Which ``consistency`` x ``serial_consistency`` pairs keep exactly-once on a keyspace's replication.

The service reads its state and the txid store (frozen batch plans, committed markers) at
``consistency``, writes plain rows at it, and commits its lightweight transactions at it; the
Paxos phase of those LWTs, the lease and the reads that resolve unknown outcomes run at
``serial_consistency``. A pair keeps its guarantee only if every read at ``consistency`` meets
every acknowledged write at ``consistency`` on at least one replica, from whichever data centre
the service runs in, and every Paxos round sees every earlier one. The rule, per data centre
replication factor ``n`` (``N`` the sum over the data centres that hold replicas):

* ``ANY`` never: Cassandra refuses reads at ANY (and a write at ANY may live in a hint only).
* ``QUORUM``, ``EACH_QUORUM``, ``ALL``: always (any two of them overlap; ALL stops when a replica is down).
* ``ONE``, ``TWO``, ``THREE`` (``k`` replicas anywhere): only when ``2k > N``, i.e. ``k >= N // 2 + 1``:
  ONE with RF 1, TWO with RF 2 or 3, THREE with RF 3 to 5.
* ``LOCAL_QUORUM``: only when one data centre holds the replicas. ``LOCAL_ONE``: only with RF 1 there.
  A keyspace replicated in two data centres is exactly where a second service takes over in the
  other one, and its local reads need not see the first one's last commit.
* ``LOCAL_SERIAL``: only when one data centre holds the replicas; with two, Paxos rounds in each
  data centre do not see each other and two services can both win the lease or the same commit.
  ``SERIAL``: always.

Those are *weak* (:attr:`ConsistencyGap.waivable`: a setting may accept them knowingly). A level
that can never be met (``THREE`` with RF 2, a ``LOCAL_*`` level in a data centre without replicas,
``EACH_QUORUM`` on SimpleStrategy, which Cassandra refuses as an LWT's commit level) and ``ANY`` are not: every request would fail. Only ``SimpleStrategy`` (its replicas counted as one
data centre) and ``NetworkTopologyStrategy`` with explicit per-data-centre factors are judged; any
other replication, or none known, gives no verdict (``ANY`` is refused all the same).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

#: Levels whose replica sets overlap pairwise whatever the replication.
ALWAYS_OVERLAP = frozenset({"QUORUM", "EACH_QUORUM", "ALL"})
#: Levels that wait for a fixed number of replicas in any data centre.
COUNTED = {"ONE": 1, "TWO": 2, "THREE": 3}
#: Levels confined to the local data centre.
LOCAL_LEVELS = frozenset({"LOCAL_ONE", "LOCAL_QUORUM"})
_SIMPLE = ""  # the one "data centre" of SimpleStrategy


@dataclass(frozen=True, slots=True)
class ConsistencyGap:
    """Why a consistency pair does not hold on a replication: the setting at fault and a one-line reason.

    ``waivable``: the pair works but loses exactly-once (a setting may accept that); otherwise
    every request would fail, and no setting makes it work.
    """

    setting: str  # "consistency" or "serial_consistency"
    reason: str
    waivable: bool


def replicas(replication: Mapping[str, Any] | Iterable[tuple[str, Any]] | None) -> dict[str, int] | None:
    """Replicas per data centre from a keyspace's replication options (``{"class": ..., dc: "3"}``).

    SimpleStrategy's factor is returned under the data centre ``""``. None when the replication is
    not known: no options, another strategy, a factor that is not a whole number, or
    NetworkTopologyStrategy's ``replication_factor`` shorthand (its data centres are the cluster's).
    A Cassandra 4 transient factor ``"3/1"`` counts its 3 replicas.
    """
    if replication is None:
        return None
    options = {str(k): str(v) for k, v in (replication.items() if isinstance(replication, Mapping) else replication)}
    strategy = options.pop("class", "").rsplit(".", 1)[-1]
    factors: dict[str, int] = {}
    if strategy == "SimpleStrategy":
        options = {_SIMPLE: options.get("replication_factor", "")}
    elif strategy != "NetworkTopologyStrategy" or "replication_factor" in options:
        return None
    for dc, value in options.items():
        full = value.strip().split("/", 1)[0].strip()
        if not full.isdigit():
            return None
        factors[dc] = int(full)
    return factors


def consistency_gap(consistency: str, serial_consistency: str,
                    replication: Mapping[str, Any] | Iterable[tuple[str, Any]] | None,
                    local_dc: str | None, source: str = "") -> ConsistencyGap | None:
    """The first reason ``consistency`` or ``serial_consistency`` does not keep exactly-once on ``replication``.

    ``local_dc``: the data centre the service's requests are coordinated in (None: not known; then
    a keyspace with replicas in one data centre is taken to be read from that one). ``source``: where
    the replication comes from, for the reason (``"from cassandra.replication"``). None when the pair
    holds, or when the replication is unknown (see :func:`replicas`); ``ANY`` is refused anyway.
    """
    if consistency == "ANY":
        return ConsistencyGap("consistency", (
            "ANY cannot be read at (Cassandra refuses reads at ANY, and the service reads its state and txids at "
            "this level) and a write at ANY may exist only as a hint; use LOCAL_QUORUM or QUORUM"), waivable=False)
    factors = replicas(replication)
    if factors is None:
        return None
    held = {dc: n for dc, n in factors.items() if n > 0}
    total = sum(held.values())
    if total == 0:
        return ConsistencyGap("consistency", "the keyspace's replication places no replica in any data centre: "
                                             "every read and write would fail", waivable=False)
    if _SIMPLE in held or (local_dc is None and len(held) == 1):
        local: str | None = next(iter(held))
    else:
        local = local_dc
    facts = _describe(held) + (f", {source}" if source else "")
    for setting, level in (("consistency", consistency), ("serial_consistency", serial_consistency)):
        gap = _never_met(setting, level, held, local, facts=facts)
        if gap is not None:
            return gap
    return (_weak_consistency(consistency, held, total, local, facts=facts)
            or _weak_serial(serial_consistency, held, facts=facts))


def _never_met(setting: str, level: str, held: dict[str, int], local: str | None, *,
               facts: str) -> ConsistencyGap | None:
    total = sum(held.values())
    if level == "EACH_QUORUM" and _SIMPLE in held:
        return ConsistencyGap(setting, ("EACH_QUORUM needs NetworkTopologyStrategy (Cassandra refuses it as the "
                                        "commit level of a lightweight transaction on a SimpleStrategy keyspace): "
                                        "every commit would fail; use QUORUM"), waivable=False)
    k = COUNTED.get(level)
    if k is not None and k > total:
        return ConsistencyGap(setting, (f"{level} waits for {k} replicas and the keyspace keeps {total} replicas "
                                        f"({facts}): every request would fail"), waivable=False)
    if level.startswith("LOCAL_") and local is not None and held.get(local, 0) == 0:
        return ConsistencyGap(setting, (f"{level} waits for replicas in the local data centre {local!r}, which "
                                        f"holds none of the keyspace ({facts}): every request would "
                                        "fail; point local_dc at a data centre that holds replicas"),
                              waivable=False)
    return None


def _weak_consistency(level: str, held: dict[str, int], total: int, local: str | None, *,
                      facts: str) -> ConsistencyGap | None:
    if level in ALWAYS_OVERLAP:
        return None
    if len(held) > 1 and level in LOCAL_LEVELS:
        return ConsistencyGap("consistency", (
            f"{level} waits for the local data centre only and the keyspace is replicated in {len(held)} data "
            f"centres ({facts}): a service that takes over in another data centre can miss the last frozen batch "
            "plan or committed txid of this one (records counted twice or lost); use QUORUM (or EACH_QUORUM)"),
            waivable=True)
    k = 1 if level == "LOCAL_ONE" else COUNTED.get(level)
    n = held[local] if level == "LOCAL_ONE" and local is not None else total
    if k is None or 2 * k > n:  # LOCAL_QUORUM in the one data centre, or a count that is a majority
        return None
    return ConsistencyGap("consistency", (
        f"{level} waits for {k} of the {n} replicas ({facts}), not a majority ({n // 2 + 1}): a read "
        "can miss a frozen batch plan or committed txid that other replicas acknowledged, and losing the replicas "
        "that took it loses it (records counted twice or lost); use LOCAL_QUORUM or QUORUM"), waivable=True)


def _weak_serial(level: str, held: dict[str, int], *, facts: str) -> ConsistencyGap | None:
    if level != "LOCAL_SERIAL" or len(held) < 2:
        return None
    return ConsistencyGap("serial_consistency", (
        f"LOCAL_SERIAL runs Paxos among one data centre's replicas and the keyspace is replicated in {len(held)} "
        f"data centres ({facts}): services in two data centres can both win the lease or the same commit "
        "(records counted twice); use SERIAL"), waivable=True)


def _describe(held: dict[str, int]) -> str:
    if _SIMPLE in held:
        return f"SimpleStrategy, replication factor {held[_SIMPLE]}"
    return ", ".join(f"{dc}: {n}" for dc, n in sorted(held.items()))


def live_replication(strategy: Any) -> dict[str, str] | None:
    """The replication options of a keyspace as the driver's cluster metadata holds them
    (``KeyspaceMetadata.replication_strategy``); None for another strategy or none."""
    from cassandra.metadata import NetworkTopologyStrategy, SimpleStrategy

    if isinstance(strategy, SimpleStrategy):
        return {"class": "SimpleStrategy", "replication_factor": str(strategy.replication_factor)}
    if isinstance(strategy, NetworkTopologyStrategy):
        return {"class": "NetworkTopologyStrategy", **{dc: str(n) for dc, n in strategy.dc_replication_factors.items()}}
    return None
