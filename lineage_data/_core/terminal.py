"""The end of a plan: report each source root's terminal row, strip bookkeeping columns."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from lineage_data._core import columns as C


class TerminalOp:
    """Last operator of every lowered plan; one coordinator call per batch.

    For a closed plan (level 0) every row is a source root's terminal row. For a plan that ends with open
    levels, each root is accounted for by the header of its level-1 group (exactly one per root), and
    headers are removed from the output.
    """

    def __init__(
        self, level: int, coordinator: Any, *, clock: Callable[[], float] = time.time
    ) -> None:
        self._level = level
        self._coordinator = coordinator
        self._clock = clock

    def __call__(self, table: pa.Table) -> pa.Table:
        """Process one output batch."""
        table = C.conform(table)
        if self._level == 0:
            terminal = table
            out = table
        else:
            terminal = table.filter(C.depth_mask(table, 1, header=True))
            out = table.filter(pc.is_null(table[C.SIZE]))
        if terminal.num_rows:
            self._coordinator.record_terminal(
                terminal[C.ROOT].to_pylist(),
                terminal[C.OUTCOME].to_pylist(),
                terminal[C.CAUSE].to_pylist(),
                terminal[C.STAGE].to_pylist(),
                self._clock(),
            )
        drop = [C.SIZE, C.PARENT] + ([C.PATH] if self._level == 0 else [])
        return out.drop_columns(drop)
