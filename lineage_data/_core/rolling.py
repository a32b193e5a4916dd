"""When a streaming write cuts its next file: at a row count, a byte size or an age, whichever first.

Ray Data bundles a write's blocks by row count only, and waits for the count: a job smaller or slower
than one file's rows writes everything at its end. A streaming file sink (Flink's ``FileSink`` and its
rolling policy: part size, rollover interval) also cuts a file a fixed time after its first row, so a
slow job has durable output early and a small one still streams. No library we use does this for Ray
Data, hence this small class: the driver feeds it the output blocks' sizes as they come (references
only, never the rows) and starts one write task per cut.

Example:
    >>> roller = Roller(RollingPolicy(rows=3, interval_s=10.0))
    >>> roller.add("a", rows=2, nbytes=20, now=0.0)
    []
    >>> [[(p.block, p.start, p.rows) for p in cut] for cut in roller.add("b", 2, 20, now=1.0)]
    [[('a', 0, 2), ('b', 0, 1)]]
    >>> roller.time_left(now=5.0)  # the open file holds b's last row since t=1
    6.0
    >>> [[(p.block, p.start, p.rows) for p in cut] for cut in roller.due(now=11.0)]
    [[('b', 1, 1)]]
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class RollingPolicy:
    """Cut a file at ``rows`` rows, ``nbytes`` bytes or ``interval_s`` after its first row.

    ``None`` turns a bound off; rows and bytes must be positive, the interval non-negative.
    """

    rows: int | None = None
    nbytes: int | None = None
    interval_s: float | None = None

    def __post_init__(self) -> None:
        if (self.rows is not None and self.rows < 1) or (
            self.nbytes is not None and self.nbytes < 1
        ):
            raise ValueError("a rolling policy's rows and bytes must be positive")
        if self.interval_s is not None and self.interval_s < 0:
            raise ValueError("a rolling policy's interval must not be negative")


@dataclass(frozen=True, slots=True)
class Piece:
    """Rows ``start .. start + rows`` of ``block`` (a block reference: the roller never reads it)."""

    block: Hashable
    start: int
    rows: int


class Roller:
    """Cuts a stream of blocks into files by a :class:`RollingPolicy` (see the module's docstring).

    A block that overflows the row bound is split: every file but a time- or byte-cut one holds
    exactly ``rows`` rows. Bytes are counted per block (a block's bytes spread over its rows).
    """

    def __init__(self, policy: RollingPolicy) -> None:
        self._policy = policy
        self._open: list[Piece] = []
        self._rows = 0
        self._bytes = 0.0
        self._since: float | None = None  # when the open file got its first row

    def add(self, block: Hashable, rows: int, nbytes: int, now: float) -> list[list[Piece]]:
        """Take the next block of the stream; return the files it completes (oldest first)."""
        cuts = self.due(now)
        start = 0
        per_row = nbytes / rows if rows else 0.0
        while start < rows:  # (an empty block adds nothing)
            take = rows - start
            if self._policy.rows is not None:
                take = min(take, self._policy.rows - self._rows)
            self._open.append(Piece(block, start, take))
            if self._since is None:
                self._since = now
            self._rows += take
            self._bytes += take * per_row
            start += take
            if self._full():
                cuts.append(self._cut())
        return cuts

    def due(self, now: float) -> list[list[Piece]]:
        """The open file if it is older than the interval (else nothing)."""
        left = self.time_left(now)
        return [self._cut()] if left is not None and left <= 0 else []

    def time_left(self, now: float) -> float | None:
        """Seconds until the open file is due by age; None when none is open or no interval."""
        if self._since is None or self._policy.interval_s is None:
            return None
        return self._since + self._policy.interval_s - now

    def flush(self) -> list[list[Piece]]:
        """The open file, whatever its size (the end of the stream)."""
        return [self._cut()] if self._open else []

    def _full(self) -> bool:
        policy = self._policy
        return (policy.rows is not None and self._rows >= policy.rows) or (
            policy.nbytes is not None and self._bytes >= policy.nbytes
        )

    def _cut(self) -> list[Piece]:
        cut, self._open = self._open, []
        self._rows, self._bytes, self._since = 0, 0.0, None
        return cut
