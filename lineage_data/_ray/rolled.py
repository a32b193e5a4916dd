"""Writes that roll their files by rows, bytes or age: the driver cuts, Ray tasks write.

Ray Data's own write waits for a file's rows (see :mod:`lineage_data._core.rolling`). Here the
driver cuts the stream of block *references* (:func:`compat.output_blocks`, read by a background
thread so a file is cut on time) with a :class:`~lineage_data._core.rolling.Roller` and starts one
write task per cut, running the :class:`~lineage_data._ray.sinks.AccountedSink`; each result is
accounted as it returns. Ray retries a write task whose worker died; the sink commits a file once.
"""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from collections.abc import Callable, Generator
from typing import Any

import pyarrow as pa
import ray
from ray.data.block import BlockAccessor

from lineage_data._core.rolling import Piece, Roller, RollingPolicy
from lineage_data._ray import compat

# Write tasks in flight at once: each holds its blocks in the object store until it is through.
MAX_WRITES_IN_FLIGHT = 4
_END = object()


@ray.remote(num_cpus=1)
def _write(sink: Any, pieces: list[tuple[Any, int, int]], index: int) -> Any:
    refs = list(dict.fromkeys(ref for ref, _, _ in pieces))
    fetched = dict(zip(refs, ray.get(refs), strict=True))
    tables = [
        BlockAccessor.for_block(fetched[ref]).slice(start, start + rows, copy=False)
        for ref, start, rows in pieces
    ]
    return sink.write(tables, compat.write_task_context(index, f"Write({sink.get_name()})"))


def _feed(blocks: Generator[Any, None, None], out: queue.Queue, stop: threading.Event) -> None:
    """Put each output block of the stream on ``out``, then the end; close it once ``stop`` is set."""

    def put(item: Any) -> bool:
        while not stop.is_set():
            with contextlib.suppress(queue.Full):
                out.put(item, timeout=0.2)
                return True
        return False

    try:
        for block in blocks:
            if not put(block):
                return
        put(_END)
    except BaseException as exc:  # noqa: BLE001 - handed to the driver's thread, raised there
        put(exc)
    finally:
        if stop.is_set():
            blocks.close()


class RolledWrite:
    """One rolled write of a sink over one or more streams (a run's passes), then its result."""

    def __init__(self, sink: Any, policy: RollingPolicy, account: Callable[[Any], None]) -> None:
        self._policy = policy
        self._account = account  # gets each write task's result as it returns
        self._ref = ray.put(sink)  # shipped once, not with every task
        self._pending: list[Any] = []
        self._tasks = 0
        self.results: list[Any] = []

    def stream(self, output: Generator[Any, None, None], check: Callable[[], None]) -> None:
        """Write one output stream (:func:`compat.output_blocks`) to the end; ``check()`` each wait."""
        blocks: queue.Queue = queue.Queue(maxsize=64)  # the feeder waits: Ray Data's backpressure
        stop = threading.Event()
        feeder = threading.Thread(
            target=_feed, args=(output, blocks, stop), name="lineage-rolled-write", daemon=True
        )
        feeder.start()
        try:
            self._stream(blocks, check)
        except BaseException:
            stop.set()  # the stream is not read to its end: stop it
            raise

    def _stream(self, blocks: queue.Queue, check: Callable[[], None]) -> None:
        roller = Roller(self._policy)
        while True:
            left = roller.time_left(time.monotonic())
            try:
                item = blocks.get(timeout=0.5 if left is None else min(max(left, 0.0), 0.5))
            except queue.Empty:
                item = None
            check()
            if item is _END:
                break
            if isinstance(item, BaseException):
                raise item
            now = time.monotonic()
            cuts = roller.add(item[0], item[1], item[2], now) if item else roller.due(now)
            for cut in cuts:
                self._submit(cut)
            self._collect(block=False)
        for cut in roller.flush():
            self._submit(cut)

    def tables(self, tables: list[pa.Table]) -> None:
        """Write tables the driver holds (rows it made itself), rolled like a stream."""
        roller = Roller(self._policy)
        for table in tables:
            for cut in roller.add(ray.put(table), table.num_rows, table.nbytes, time.monotonic()):
                self._submit(cut)
        for cut in roller.flush():
            self._submit(cut)

    def finish(self) -> None:
        """Wait for every write task; account each."""
        while self._pending:
            self._collect(block=True)

    def _submit(self, cut: list[Piece]) -> None:
        while len(self._pending) >= MAX_WRITES_IN_FLIGHT:
            self._collect(block=True)
        pieces = [(p.block, p.start, p.rows) for p in cut]
        self._pending.append(_write.remote(self._ref, pieces, self._tasks))
        self._tasks += 1

    def _collect(self, *, block: bool) -> None:
        if not self._pending:
            return
        done, self._pending = ray.wait(
            self._pending,
            num_returns=1 if block else len(self._pending),
            timeout=None if block else 0,
        )
        try:
            results = ray.get(done)
        except BaseException:  # wait out the others, their errors said (Ray logs each unhandled)
            for ref in self._pending:
                with contextlib.suppress(Exception):
                    ray.get(ref)
            self._pending = []
            raise
        for result in results:
            self.results.append(result)
            self._account(result)
