"""An in-process executor: the same operators and state as a Ray run, with no Ray.

It runs a plan stage by stage over random batches in a shuffled order, so tests can check that
batching and order never change the result.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa

from lineage_data._core import columns as C
from lineage_data._core.errors import AccountingError, PlanError
from lineage_data._core.expand import DEFAULT_ROWS_PER_BLOCK
from lineage_data._core.ledger import Ledger
from lineage_data._core.ops import build_op
from lineage_data._core.plan import ItemsSource, Plan
from lineage_data._core.reduce import GroupBuffer
from lineage_data._core.state import LineageState, derived_counts
from lineage_data._core.terminal import TerminalOp


@dataclass(frozen=True, slots=True)
class LocalRun:
    """Output rows (public lineage columns + user columns), the run's state and its ledger."""

    rows: list[dict]
    state: LineageState
    ledger: Ledger
    plan: Plan

    def snapshot(self) -> dict:
        """Per-stage counts, terminal rows and calls, as a Ray run reports them."""
        terminal = self.ledger.terminal()
        names = [s.name for s in self.plan.stages]
        snap = self.state.snapshot()
        counts = snap["counts"] | derived_counts(names, self.plan.derived_stages(), terminal)
        return {"counts": counts, "terminal": terminal, "progress": {"reports": snap["reports"]}}


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
    """Execute ``plan`` (a ``from_items`` source) here; every root must be accounted for."""
    if not isinstance(plan.source, ItemsSource):
        raise PlanError("run_local executes from_items sources only")
    roots = plan.source.roots
    keep = [i for i, r in enumerate(roots) if plan.keeps(r)]
    state = LineageState()
    ledger = Ledger(plan.level, [roots[i] for i in keep], started_at=0.0)
    rng = random.Random(seed)
    tables = [plan.source.rows(keep)]
    for index in range(len(plan.stages)):
        op = build_op(plan, index, state, rows_per_block=rows_per_block, holders=GroupBuffer())
        outputs: list[pa.Table] = []
        for batch in _batches(C.concat(tables), rng, batch_size, shuffle):
            result = op(batch)
            outputs.extend([result] if isinstance(result, pa.Table) else list(result))
        tables = outputs
    terminal = TerminalOp(plan.level)
    rows = [row for t in tables for row in ledger.take(terminal(t), 0.0).to_pylist()]
    missing, unexpected = ledger.missing(), ledger.unexpected()
    if missing or unexpected or ledger.duplicates:
        raise AccountingError(
            f"run did not account for every root: missing {missing[:10]}, unexpected "
            f"{unexpected[:10]}, {ledger.duplicates} duplicate(s)"
        )
    return LocalRun(rows, state, ledger, plan)
