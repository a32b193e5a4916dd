"""Calling user functions on batches: format conversion, failure values, the 1:1 contract, isolation."""

from __future__ import annotations

import asyncio
import inspect
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from lineage_data._core import columns as C
from lineage_data._core import outcomes
from lineage_data._core.conversion import row_columns
from lineage_data._core.errors import ContractError, describe
from lineage_data._core.failures import GroupFailure, is_failure
from lineage_data._core.outcomes import Status
from lineage_data._core.policy import CallPolicy


@dataclass(frozen=True, slots=True)
class BatchResult:
    """A user function's output: values (null where not PRESENT), statuses, GroupFailure flags."""

    table: pa.Table
    statuses: list[Status]
    group: list[bool]


def to_format(table: pa.Table, batch_format: str | None) -> Any:
    """An Arrow batch in a Ray Data batch format, checked before: the one converter of the library."""
    if batch_format in ("default", "numpy"):
        return {name: table[name].to_numpy(zero_copy_only=False) for name in table.column_names}
    if batch_format == "pandas":
        return table.to_pandas()
    return table  # "pyarrow" or None


def _column_values(values: Any) -> list:
    if isinstance(values, pa.ChunkedArray | pa.Array):
        return values.to_pylist()
    if (
        hasattr(values, "tolist")
        and getattr(values, "dtype", None) is not None
        and values.dtype != object
    ):
        return values.tolist()
    return list(values)


def from_output(output: Any, stage: str, expected_rows: int) -> BatchResult:
    """Turn a user function's batch output into values and per-row statuses; check the row count."""
    if isinstance(output, pa.Table):
        _check_shape(output.column_names, output.num_rows, expected_rows, stage)
        return BatchResult(output, [outcomes.PRESENT] * output.num_rows, [False] * output.num_rows)
    if hasattr(output, "to_dict") and hasattr(output, "columns"):  # pandas DataFrame
        output = {str(c): output[c].tolist() for c in output.columns}
    if not isinstance(output, Mapping):
        raise ContractError(
            f"stage {stage!r}: a batch function must return a pyarrow Table, a pandas DataFrame or a "
            f"dict of columns, got {type(output).__name__}"
        )
    columns = {str(k): _column_values(v) for k, v in output.items()}
    lengths = {len(v) for v in columns.values()}
    if len(lengths) > 1:
        raise ContractError(
            f"stage {stage!r}: output columns have different lengths {sorted(lengths)}"
        )
    rows = lengths.pop() if lengths else expected_rows
    _check_shape(list(columns), rows, expected_rows, stage)
    statuses = [outcomes.PRESENT] * rows
    group = [False] * rows
    for values in columns.values():
        for i, value in enumerate(values):
            if is_failure(value) and statuses[i].present:
                statuses[i] = outcomes.from_value(value, stage)
                group[i] = isinstance(value, GroupFailure)
    return BatchResult(_table(columns, rows, statuses, stage), statuses, group)


def _check_shape(names: list[str], rows: int, expected_rows: int, stage: str) -> None:
    reserved = [name for name in names if C.is_reserved(name)]
    if reserved:
        raise ContractError(f"stage {stage!r}: output uses reserved column(s) {reserved}")
    if rows != expected_rows:
        raise ContractError(
            f"stage {stage!r}: expected {expected_rows} output rows for {expected_rows} input rows, got {rows}"
        )


def _table(columns: dict[str, list], rows: int, statuses: list[Status], stage: str) -> pa.Table:
    """Output values as Arrow; a row whose value cannot be stored is FAILED alone (in ``statuses``).

    Rows that are not PRESENT keep no values, so they decide no column type.
    """
    dead = [i for i, status in enumerate(statuses) if not status.present]
    if dead:
        columns = {name: list(values) for name, values in columns.items()}
        for values in columns.values():
            for i in dead:
                values[i] = None
    table, failed = C.build_columns(columns, rows)
    for i, cause in failed.items():
        statuses[i] = outcomes.rejected(cause, stage)
    return table


def failed_rows(n: int, status: Status) -> BatchResult:
    """A result in which all ``n`` rows carry ``status`` and no values."""
    return BatchResult(
        pa.table({"__empty__": pa.nulls(n)}).drop(["__empty__"]), [status] * n, [False] * n
    )


@dataclass(frozen=True, slots=True)
class BatchCaller:
    """Calls one stage's batch function under its :class:`~lineage_data._core.policy.CallPolicy`."""

    fn: Callable[..., Any]
    policy: CallPolicy
    batch_format: str | None

    def __call__(self, table: pa.Table) -> BatchResult:
        """Run the function over ``table`` (user columns only)."""
        return self.policy.batch(
            self._once,
            table,
            size=lambda t: t.num_rows,
            halves=lambda t: (t.slice(0, t.num_rows // 2), t.slice(t.num_rows // 2)),
            merge=lambda left, right: merge(left, right, self.policy.stage),
            fail=lambda t, status: failed_rows(t.num_rows, status),
        )

    def _once(self, table: pa.Table) -> BatchResult:
        output = awaited(self.fn(to_format(table, self.batch_format)))
        return from_output(output, self.policy.stage, table.num_rows)


def _filled(result: BatchResult, schema: pa.Schema) -> pa.Table:
    if result.table.num_columns:
        return result.table
    n = len(result.statuses)
    return pa.table({f.name: pa.nulls(n, f.type) for f in schema}, schema=schema)


def merge(left: BatchResult, right: BatchResult, stage: str) -> BatchResult:
    """Concatenate two results in row order (a side with no values gets nulls).

    Halves whose column types do not unify are rebuilt row by row: the rows that do not fit fail.
    """
    tables = [_filled(left, right.table.schema), _filled(right, left.table.schema)]
    statuses = left.statuses + right.statuses
    try:
        table = pa.concat_tables(tables, promote_options="permissive")
    except (pa.ArrowException, TypeError, ValueError):
        rows = tables[0].to_pylist() + tables[1].to_pylist()  # neither side is empty
        table = _table(row_columns(rows), len(rows), statuses, stage)
    return BatchResult(table, statuses, left.group + right.group)


def merge_all(results: Sequence[BatchResult], stage: str) -> BatchResult:
    """:func:`merge` of many results, in row order: one concatenation where their columns allow.

    Else they merge in pairs as a balanced tree: one by one was quadratic (a 20,000-row block in
    batches of one row took 14.5 s).
    """
    if len(results) == 1:
        return results[0]
    if all(r.table.num_columns for r in results):
        try:
            table = pa.concat_tables([r.table for r in results], promote_options="permissive")
        except (pa.ArrowException, TypeError, ValueError):
            pass  # the rows that do not fit fail: merge in pairs
        else:
            statuses = [s for r in results for s in r.statuses]
            return BatchResult(table, statuses, [g for r in results for g in r.group])
    level = list(results)
    while len(level) > 1:
        pairs = range(0, len(level) - 1, 2)
        merged = [merge(level[i], level[i + 1], stage) for i in pairs]
        level = merged + ([level[-1]] if len(level) % 2 else [])
    return level[0]


@dataclass(frozen=True, slots=True)
class RowCaller:
    """Calls a row function (``map``, or ``filter`` as a ``predicate``) over a batch, row by row."""

    fn: Callable[..., Any]
    policy: CallPolicy
    predicate: bool

    def __call__(self, table: pa.Table) -> BatchResult:
        """Run the function on every row of ``table`` (user columns only)."""
        called = [self._one(row) for row in table.to_pylist()]
        statuses = [status for _, status, _ in called]
        columns = row_columns([value or {} for value, _, _ in called])
        table = _table(columns, len(called), statuses, self.policy.stage)
        return BatchResult(table, statuses, [group for _, _, group in called])

    def _one(self, row: dict) -> tuple[dict | None, Status, bool]:
        stage = self.policy.stage
        value, failure = self.policy.call(lambda r: awaited(self.fn(r)), row, on="a row")
        if failure is not None:
            return None, failure, False
        if not is_failure(value):
            if self.predicate:
                if value:
                    return row, outcomes.PRESENT, False
                return None, outcomes.dropped(stage), False
            if not isinstance(value, Mapping):
                cause = f"stage {stage!r}: map fn must return a dict per row, got {type(value).__name__}"
                return None, outcomes.rejected(describe(ContractError(cause)), stage), False
            # a failure value in place of a column's value fails the row
            failed = next((v for v in value.values() if is_failure(v)), None)
            if failed is None:
                return dict(value), outcomes.PRESENT, False
            value = failed
        return None, outcomes.from_value(value, stage), isinstance(value, GroupFailure)


# One event loop per process for user functions that are coroutines (``async def __call__``), in a
# daemon thread: the calls of every thread of an actor (several batches in flight) share it, as an
# async engine (vLLM's) needs one loop for all its requests.
_loop: asyncio.AbstractEventLoop | None = None
_loop_lock = threading.Lock()


def awaited(value: Any) -> Any:
    """``value``, or its result when it is awaitable (run on the process's user-code loop)."""
    if not inspect.isawaitable(value):
        return value
    global _loop
    with _loop_lock:
        if _loop is None:
            _loop = asyncio.new_event_loop()
            threading.Thread(target=_loop.run_forever, name="lineage-udf-loop", daemon=True).start()
    return asyncio.run_coroutine_threadsafe(_as_coroutine(value), _loop).result()


async def _as_coroutine(value: Any) -> Any:
    return await value
