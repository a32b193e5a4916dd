"""When a streaming write cuts its next file: at a row count, a byte size or an age, whichever first.

Ray Data bundles a write's blocks by row count only, and waits for the count: a job smaller or slower
than one file's rows writes everything at its end. Like a streaming file sink's rolling policy
(Flink's ``FileSink``), this also cuts a file a fixed time after its first row. The driver feeds it
the output blocks' sizes as they come (references only, never the rows), one write task per cut.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class RollingPolicy:
    """A file's bounds: ``rows``, ``nbytes`` or ``interval_s`` after its first row (None: no bound)."""

    rows: int | None = None
    nbytes: int | None = None
    interval_s: float | None = None

    def __post_init__(self) -> None:
        if any(bound is not None and bound < 1 for bound in (self.rows, self.nbytes)):
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
    """Cuts a stream of blocks into files by a :class:`RollingPolicy`.

    A block that overflows the row bound is split: every file but a time- or byte-cut one holds
    exactly ``rows`` rows. A block's bytes are spread evenly over its rows.
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
