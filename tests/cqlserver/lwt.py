"""Lightweight transactions: evaluate IF conditions, apply or report current values.

Follows Cassandra 4.x (`ModificationStatement.buildCasResultSet`, `CQL3CasRequest`):

* applied: a single row `[applied]=true`;
* not applied: `[applied]=false` followed by the rows Cassandra's CAS read
  returned. Conditions on clustering rows read exactly those rows; with only
  static conditions, the first live row of the partition is read. Columns read
  (`columnsToRead`): all statics if a statement writes a static column, else
  the static condition columns; likewise for regular columns and "writes a
  clustering row". Selected columns are the condition columns in IF order (a
  batch prepends the primary key columns); with IF EXISTS / IF NOT EXISTS all
  columns (`SELECT *` order), unread ones null. A partition with no live row
  but live static content yields one row of static values. When nothing at all
  was read the result has only the `[applied]` column.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .errors import InvalidRequest
from .results import Rows, metadata_id
from .schema import CLUSTERING, PARTITION_KEY, STATIC, Column, Table
from .storage import Partition, TableData
from .types import BOOLEAN, ColumnSpec, compare
from .writes import Condition, WritePlan, apply_write


@dataclass
class _RowChecks:
    exists: bool | None = None  # True: IF EXISTS, False: IF NOT EXISTS
    conditions: list[Condition] = field(default_factory=list)


def _holds(cond: Condition, current: Any) -> bool:
    t = cond.column.type
    if cond.op == "IN":
        return any((v is None and current is None) or
                   (v is not None and current is not None and compare(t, current, v) == 0) for v in cond.value)
    if cond.op in ("=", "!="):
        equal = (current is None and cond.value is None) or (
            current is not None and cond.value is not None and compare(t, current, cond.value) == 0)
        return equal if cond.op == "=" else not equal
    if current is None:
        return False
    cmp = compare(t, current, cond.value)
    return {"<": cmp < 0, "<=": cmp <= 0, ">": cmp > 0, ">=": cmp >= 0}[cond.op]


def _set_exists(checks: _RowChecks, exists: bool) -> None:
    if checks.exists is not None and checks.exists != exists:
        raise InvalidRequest("Cannot mix IF EXISTS and IF NOT EXISTS conditions for the same row")
    if checks.conditions:
        raise InvalidRequest(f"Cannot mix IF conditions and IF {'' if exists else 'NOT '}EXISTS for the same row")
    checks.exists = exists


def _add_condition(checks: _RowChecks, cond: Condition) -> None:
    if checks.exists is not None:
        raise InvalidRequest("Cannot mix IF conditions and IF NOT EXISTS for the same row")
    checks.conditions.append(cond)


def validate_conditional(plans: list[WritePlan], is_batch: bool) -> None:
    """Reject conditional shapes Cassandra rejects (IN, multi-partition, custom timestamps)."""
    tables = {p.table.qualified for p in plans}
    if len(tables) > 1:
        raise InvalidRequest("Batch with conditions cannot span multiple tables")
    keys = {pk for p in plans for pk in p.partition_keys}
    for plan in plans:
        if not plan.conditional:
            continue
        if len(plan.partition_keys) > 1:
            verb = "deletions" if plan.kind == "delete" else "updates"
            raise InvalidRequest(f"IN on the partition key is not supported with conditional {verb}")
        if plan.clustering_keys is not None and len(plan.clustering_keys) > 1:
            verb = "deletions" if plan.kind == "delete" else "updates"
            raise InvalidRequest(f"IN on the clustering key columns is not supported with conditional {verb}")
    if len(keys) > 1:
        raise InvalidRequest("Batch with conditions cannot span multiple partitions")
    if any(p.custom_timestamp for p in plans):
        what = "BATCH" if is_batch else "updates"
        raise InvalidRequest(f"Cannot provide custom timestamp for conditional {what}")


def execute_cas(plans: list[WritePlan], data: TableData, now: float, is_batch: bool) -> tuple[bool, Rows]:
    """Check every plan's conditions against the current partition, then apply all or none."""
    validate_conditional(plans, is_batch)
    table = plans[0].table
    pk = plans[0].partition_keys[0]
    part = data.get(pk) or Partition()
    rows_checks: dict[tuple, _RowChecks] = {}
    static_checks = _RowChecks()
    for plan in plans:
        if not plan.conditional:
            continue
        ck = plan.clustering_keys[0] if plan.clustering_keys else None
        if plan.if_exists or plan.if_not_exists:
            if plan.updates_regular and ck is not None:
                _set_exists(rows_checks.setdefault(ck, _RowChecks()), plan.if_exists)
            else:
                _set_exists(static_checks, plan.if_exists)
        for cond in plan.conditions:
            if cond.column.kind == STATIC:
                _add_condition(static_checks, cond)
            elif ck is None:
                raise InvalidRequest("DELETE statements must restrict all PRIMARY KEY columns with equality "
                                     "relations in order to use IF condition on non static columns")
            else:
                _add_condition(rows_checks.setdefault(ck, _RowChecks()), cond)

    applied = _static_holds(static_checks, part, now) and all(
        _row_holds(checks, part, ck, now) for ck, checks in rows_checks.items())
    spec = ColumnSpec(table.keyspace, table.name, "[applied]", BOOLEAN)
    if applied:
        for plan in plans:
            apply_write(plan, data, now)
        rows = Rows([spec], [[True]])
    else:
        rows = _failure_rows(plans, table, pk, part, rows_checks, static_checks, spec, now, is_batch)
    # Cassandra reports CAS results with the empty metadata id of the prepared statement (v5).
    rows.metadata_id = metadata_id(None)
    return applied, rows


def _static_holds(checks: _RowChecks, part: Partition, now: float) -> bool:
    if checks.exists is not None and part.static_live(now) != checks.exists:
        return False
    return all(_holds(c, part.static_value(c.column.name, now)) for c in checks.conditions)


def _row_holds(checks: _RowChecks, part: Partition, ck: tuple, now: float) -> bool:
    row = part.rows.get(ck)
    live = row is not None and row.live(now)
    if checks.exists is not None and live != checks.exists:
        return False
    return all(_holds(c, row.value(c.column.name, now) if live and row else None) for c in checks.conditions)


def _failure_rows(plans: list[WritePlan], table: Table, pk: tuple, part: Partition,
                  rows_checks: dict[tuple, _RowChecks], static_checks: _RowChecks,
                  applied_spec: ColumnSpec, now: float, is_batch: bool) -> Rows:
    any_exists = static_checks.exists is not None or any(c.exists is not None for c in rows_checks.values())
    conditioned = [c.column for p in plans if p.conditional for c in p.conditions]
    # CQL3CasRequest.columnsToRead(): everything of a row kind the batch writes, else the condition columns.
    read_static = ({c.name for c in table.statics} if any(p.updates_static for p in plans)
                   else {c.name for c in conditioned if c.kind == STATIC})
    read_regular = ({c.name for c in table.regulars} if any(p.updates_regular for p in plans)
                    else {c.name for c in conditioned if c.kind != STATIC})
    if any_exists:
        selection = table.select_order()
    else:
        selection = []
        for col in (table.primary_key if is_batch else []) + conditioned:
            if col not in selection:
                selection.append(col)

    live_rows = [(ck, row) for ck, row in part.rows.items() if row.live(now)]
    live_rows.sort(key=lambda item: table.clustering_sort_key(item[0]))
    read = [(ck, row) for ck, row in live_rows if ck in rows_checks] if rows_checks else live_rows[:1]

    def value(col: Column, ck: tuple | None, row: Any) -> Any:
        if col.kind == PARTITION_KEY:
            return pk[col.position]
        if col.kind == CLUSTERING:
            return None if ck is None else ck[col.position]
        if col.kind == STATIC:
            return part.static_value(col.name, now) if col.name in read_static else None
        return row.value(col.name, now) if row is not None and col.name in read_regular else None

    out = [[False] + [value(col, ck, row) for col in selection] for ck, row in read]
    if not out and any(part.static_value(name, now) is not None for name in read_static):
        out.append([False] + [value(col, None, None) for col in selection])  # static-only partition
    if not out:
        return Rows([applied_spec], [[False]])
    specs = [ColumnSpec(table.keyspace, table.name, c.name, c.type) for c in selection]
    return Rows([applied_spec, *specs], out)
