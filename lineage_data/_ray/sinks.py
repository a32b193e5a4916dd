"""Accounting for writes: a Datasink wrapper that hands the driver what each write task wrote.

What reached the consumer is the truth: for a write, the write results. :class:`AccountedSink`
returns, beside the wrapped sink's result, the lineage of the rows written, for the driver's ledger.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Callable, Iterable
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from ray.data import Datasink
from ray.data.block import BlockAccessor

from lineage_data._core import columns as C
from lineage_data._ray.compat import start_file_sink, wrap_write_datasink

_LINEAGE = (C.ROOT, C.OUTCOME, C.CAUSE, C.STAGE, C.PATH, C.SIZE, C.BLOCK)
WRITTEN = "(written)"  # the coordinator's counts of what write tasks wrote (progress only)


class AccountedSink(Datasink):
    """Wraps ``inner``: writes the rows a user sees, reports their lineage with the write result.

    The inner sink gets user and public lineage columns (``keep_lineage=False``: user columns only),
    and the failing stage too if its ``lineage_stage_column`` is true (a dead-letter table).
    """

    def __init__(
        self, inner: Any, level: int, *, keep_lineage: bool = True, progress: Any = None
    ) -> None:
        self.inner = inner
        self.level = level
        self.keep_lineage = keep_lineage
        self.progress = progress  # a coordinator client: each write task reports what it wrote
        self.written: list[tuple[pa.Table, float]] = []
        self.started = False  # Ray's file sink was prepared already (see :func:`accounted`)

    @property
    def supports_distributed_writes(self) -> bool:  # noqa: D102
        return bool(self.inner.supports_distributed_writes)

    @property
    def min_rows_per_write(self) -> int | None:  # noqa: D102
        return self.inner.min_rows_per_write

    @property
    def min_bytes_per_write(self) -> int | None:  # noqa: D102
        return self.inner.min_bytes_per_write

    def get_name(self) -> str:  # noqa: D102
        return str(self.inner.get_name())

    def on_write_start(self, schema: Any = None) -> None:  # noqa: D102
        if not self.started:
            self.inner.on_write_start(schema) if schema is not None else self.inner.on_write_start()

    def write(self, blocks: Iterable[Any], ctx: Any) -> tuple[Any, pa.Table, float]:
        """Write the user rows of ``blocks`` with the inner sink; return its result and the lineage."""
        tables = [BlockAccessor.for_block(b).to_arrow() for b in blocks]
        lineage = [t.select([c for c in _LINEAGE if c in t.column_names]) for t in tables]
        tables = [self._visible(t) for t in tables]
        result = self.inner.write([t for t in tables if t.num_rows] or tables[:1], ctx)
        lineage_rows = C.concat(lineage) if lineage else C.empty()
        self._report(lineage_rows)
        return result, lineage_rows, time.time()

    def _report(self, lineage: pa.Table) -> None:
        """Tell the coordinator what this write task wrote, for the progress line (closed plans).

        Ray Data hands the driver the write results only at the end of the write.
        """
        if self.progress is None or self.level or not lineage.num_rows:
            return
        committed = pc.sum(pc.equal(lineage[C.OUTCOME], "PRESENT")).as_py() or 0
        counts = {"committed": committed, "failed": lineage.num_rows - committed, "shards": 1}
        with contextlib.suppress(Exception):  # progress never fails a write
            self.progress.count(WRITTEN, counts)

    def _visible(self, table: pa.Table) -> pa.Table:
        if self.level and C.SIZE in table.column_names:
            table = table.filter(pc.is_null(table[C.SIZE])).drop_columns([C.SIZE])
        if self.keep_lineage and getattr(self.inner, "lineage_stage_column", False):
            stage = table[C.STAGE] if C.STAGE in table.column_names else None
            table = C.public(table)
            return table.append_column(C.STAGE, stage) if stage is not None else table
        return C.public(table, keep_lineage=self.keep_lineage)

    def on_write_complete(self, write_result: Any) -> None:
        """Keep the lineage of every write task; give the inner sink its own results."""
        returns = write_result.write_returns
        self.written += [(lineage, at) for _, lineage, at in returns]
        inner_returns = [inner for inner, _, _ in returns]
        self.inner.on_write_complete(dataclasses.replace(write_result, write_returns=inner_returns))

    def on_write_failed(self, error: Exception) -> None:  # noqa: D102
        self.inner.on_write_failed(error)


def accounted(
    ds: Any,
    level: int,
    collect: Callable[[AccountedSink], None],
    *,
    keep_lineage: bool = True,
    progress: Any = None,
) -> Any:
    """``ds`` whose ``write_datasink`` (used by every Ray ``write_*``) goes through an AccountedSink.

    ``collect`` gets the wrapper once the write is complete.
    """

    def through(original: Callable[..., Any]) -> Callable[..., None]:
        def write_datasink(datasink: Any, **kwargs: Any) -> None:
            sink = AccountedSink(datasink, level, keep_lineage=keep_lineage, progress=progress)
            skip = start_file_sink(datasink)  # Ray prepares file sinks: it cannot see through ours
            if skip is not None:
                sink.started = True
                if skip:
                    return
            original(sink, **kwargs)
            collect(sink)

        return write_datasink

    return wrap_write_datasink(ds, through)
