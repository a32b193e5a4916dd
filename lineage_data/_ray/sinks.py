"""Accounting for writes: a Datasink wrapper that hands the driver what each write task wrote.

What reached the consumer is the truth: for a write, that is the write results Ray collects from the
write tasks. :class:`AccountedSink` writes the user rows with the wrapped sink and returns, beside the
sink's own result, the lineage columns of the rows written, which the driver feeds to its ledger.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterable
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from ray.data import Datasink
from ray.data.block import BlockAccessor

from lineage_data._core import columns as C

_LINEAGE = (C.ROOT, C.OUTCOME, C.CAUSE, C.STAGE, C.PATH, C.SIZE, C.BLOCK)


class AccountedSink(Datasink):
    """Wraps ``inner``: writes the rows a user sees, reports their lineage with the write result.

    The inner sink gets user columns and the public lineage columns (``keep_lineage=False``: committed
    rows' user columns only). A sink that keeps a dead-letter table may ask for the failing stage too,
    with a true ``lineage_stage_column`` attribute.
    """

    def __init__(self, inner: Any, level: int, *, keep_lineage: bool = True) -> None:
        self.inner = inner
        self.level = level
        self.keep_lineage = keep_lineage
        self.written: list[tuple[pa.Table, float]] = []

    @property
    def supports_distributed_writes(self) -> bool:  # noqa: D102
        return bool(self.inner.supports_distributed_writes)

    @property
    def min_rows_per_write(self) -> int | None:  # noqa: D102
        return self.inner.min_rows_per_write

    def get_name(self) -> str:  # noqa: D102
        return str(self.inner.get_name())

    def on_write_start(self, schema: Any = None) -> None:  # noqa: D102
        if not getattr(self, "_started", False):
            self.inner.on_write_start(schema) if schema is not None else self.inner.on_write_start()

    def write(self, blocks: Iterable[Any], ctx: Any) -> tuple[Any, pa.Table, float]:
        """Write the user rows of ``blocks`` with the inner sink; return its result and the lineage."""
        tables = [BlockAccessor.for_block(b).to_arrow() for b in blocks]
        lineage = [t.select([c for c in _LINEAGE if c in t.column_names]) for t in tables]
        if self.level:
            tables = [
                t.filter(pc.is_null(t[C.SIZE])).drop_columns([C.SIZE])
                if C.SIZE in t.column_names
                else t
                for t in tables
            ]
        tables = [self._visible(t) for t in tables]
        result = self.inner.write([t for t in tables if t.num_rows] or tables[:1], ctx)
        return result, C.concat(lineage) if lineage else C.empty(), time.time()

    def _visible(self, table: pa.Table) -> pa.Table:
        if self.keep_lineage and getattr(self.inner, "lineage_stage_column", False):
            stage = table[C.STAGE] if C.STAGE in table.column_names else None
            table = C.public(table)
            return table.append_column(C.STAGE, stage) if stage is not None else table
        return C.public(table, keep_lineage=self.keep_lineage)

    def on_write_complete(self, write_result: Any) -> None:
        """Keep the lineage of every write task; give the inner sink its own results."""
        inner_returns = []
        for value in write_result.write_returns:
            inner, lineage, at = value
            inner_returns.append(inner)
            self.written.append((lineage, at))
        self.inner.on_write_complete(dataclasses.replace(write_result, write_returns=inner_returns))

    def on_write_failed(self, error: Exception) -> None:  # noqa: D102
        self.inner.on_write_failed(error)


def accounted(
    ds: Any, level: int, collect: Callable[[AccountedSink], None], *, keep_lineage: bool = True
) -> Any:
    """``ds`` whose ``write_datasink`` (used by every Ray ``write_*``) goes through an AccountedSink.

    ``collect`` gets the wrapper once the write is complete.
    """
    original = ds.write_datasink

    def write_datasink(datasink: Any, **kwargs: Any) -> None:
        sink = AccountedSink(datasink, level, keep_lineage=keep_lineage)
        from ray.data.datasource.file_datasink import _FileDatasink

        if isinstance(datasink, _FileDatasink):
            # Ray prepares file sinks (save mode, directory) before running; it cannot see through us.
            datasink.on_write_start()
            sink._started = True  # type: ignore[attr-defined]
            if getattr(datasink, "_skip_write", False):
                return
        original(sink, **kwargs)
        collect(sink)

    ds.write_datasink = write_datasink
    return ds
