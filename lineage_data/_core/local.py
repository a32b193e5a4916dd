"""An in-process executor: the same operators and state as a Ray run, with no Ray.

It runs a plan stage by stage over random batches in a shuffled arrival order, so tests can check that
batching and order never change the result. It is also handy to debug a plan on a laptop.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa

from lineage_data._core import columns as C
from lineage_data._core.errors import AccountingError, PlanError
from lineage_data._core.expand import DEFAULT_ROWS_PER_BLOCK
from lineage_data._core.ops import build_op
from lineage_data._core.plan import Plan
from lineage_data._core.reduce import GroupBuffer
from lineage_data._core.source import root_ids, with_lineage
from lineage_data._core.state import LineageState
from lineage_data._core.terminal import TerminalOp


@dataclass(frozen=True, slots=True)
class LocalRun:
    """Output rows (public lineage columns + user columns) and the run's state."""

    rows: list[dict]
    state: LineageState


def _batches(
    table: pa.Table, rng: random.Random, batch_size: int | None, shuffle: bool
) -> Iterator[pa.Table]:
    order = list(range(table.num_rows))
    if shuffle:
        rng.shuffle(order)
    table = table.take(pa.array(order, pa.int64()))
    start = 0
    while start < table.num_rows:
        size = batch_size or table.num_rows
        if shuffle and batch_size:
            size = rng.randint(1, batch_size)
        yield table.slice(start, size)
        start += size


def run_local(
    plan: Plan,
    *,
    batch_size: int | None = 8,
    seed: int = 0,
    shuffle: bool = True,
    rows_per_block: int = DEFAULT_ROWS_PER_BLOCK,
) -> LocalRun:
    """Execute ``plan`` (a ``from_items`` source) in this process.

    Raises:
        AccountingError: a source root did not reach exactly one terminal row.
    """
    if plan.source.kind != "items":
        raise PlanError("run_local executes from_items sources only")
    items = plan.source.payload
    roots = plan.source.roots or root_ids(items, plan.source.id_column)
    keep = [i for i, r in enumerate(roots) if r not in plan.exclude]
    state = LineageState(stages=[s.name for s in plan.stages], derived=plan.derived_stages())
    state.register_roots(roots)
    state.exclude_roots(plan.exclude)
    table = with_lineage(pa.Table.from_pylist([items[i] for i in keep]), [roots[i] for i in keep])
    rng = random.Random(seed)
    tables = [table]
    for index in range(len(plan.stages)):
        op = build_op(plan, index, state, rows_per_block=rows_per_block, holders=GroupBuffer())
        current = C.concat(tables)
        outputs: list[pa.Table] = []
        for batch in _batches(current, rng, batch_size, shuffle):
            result = op(batch)
            outputs.extend([result] if isinstance(result, pa.Table) else list(result))
        tables = outputs
    terminal = TerminalOp(plan.level, state)
    rows = [row for t in tables for row in terminal(t).to_pylist()]
    accounting = state.accounting()
    if not accounting.ok:
        raise AccountingError(f"run did not account for every root: {accounting}")
    return LocalRun(rows, state)
