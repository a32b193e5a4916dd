"""How big blocks are: the sizes the expansion cuts its children's blocks by, rows and bytes.

How many rows a block of children holds is decided by a physical rule, from the work that reads
them (:mod:`lineage_data._core.physical.block_rows`); bytes cut a block earlier when rows are large.

Example:
    >>> row_bytes({"page": b"x" * 1000, "n": 3})
    1008
"""

from __future__ import annotations

from collections.abc import Mapping

# Rows per block when nothing downstream says how it batches (the historical default).
DEFAULT_ROWS_PER_BLOCK = 16
# Rows per block when the children go straight to a reduce, or out of the plan: no stage runs a
# function per batch of them, so fewer, bigger blocks are cheaper (and complete more parents in one).
WIDE_ROWS_PER_BLOCK = 1024
# A block is cut at this many bytes of children even before it has its rows: a few MB, so large rows
# (rendered pages, frames) spread early and the object store moves reasonable pieces.
TARGET_BLOCK_BYTES = 4 * 1024 * 1024


_FIXED = frozenset(
    {int, float, bool, type(None)}
)  # 8 bytes each (by exact type: this runs per child)


def row_bytes(row: Mapping) -> int:
    """About how many bytes ``row`` takes in Arrow: strings and bytes by length, the rest 8 a value.

    >>> row_bytes({"page": b"x" * 1000, "n": 3})
    1008
    """
    total = 0
    for value in row.values():
        kind = type(value)
        if kind in _FIXED:
            total += 8
        elif kind is str or kind is bytes:
            total += len(value)
        else:
            total += _value_bytes(value)
    return total


def _value_bytes(value: object) -> int:
    if isinstance(value, str | bytes | bytearray | memoryview):
        return len(value)
    if isinstance(value, list | tuple):
        return 8 * len(value)
    return int(getattr(value, "nbytes", 8))
