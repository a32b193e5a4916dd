"""The end of a plan: what leaves the workers for the consumer."""

from __future__ import annotations

import pyarrow as pa

from lineage_data._core import columns as C


class TerminalOp:
    """Last operator of every lowered plan: strips the bookkeeping the consumer's ledger does not need.

    A plan ending at an open level keeps its group headers, from which the driver's ledger counts a
    root complete; ``keep_parents`` keeps their parent rows too (to be continued with a reduce).
    """

    def __init__(self, level: int, *, keep_parents: bool = False) -> None:
        self._level = level
        self._keep_parents = keep_parents

    def __call__(self, table: pa.Table) -> pa.Table:
        table = C.conform(table)
        if self._level == 0:
            return table.drop_columns([C.SIZE, C.PARENT, C.PATH])
        return table if self._keep_parents else table.drop_columns([C.PARENT])
