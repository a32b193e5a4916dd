"""How big blocks are: the sizes the expansion cuts its children's blocks by, rows and bytes.

The rows are chosen by a physical rule (:mod:`lineage_data._core.physical.block_rows`); bytes cut a
block earlier when rows are large.
"""

from __future__ import annotations

from collections.abc import Mapping

# Rows per block when nothing downstream says how it batches.
DEFAULT_ROWS_PER_BLOCK = 16
# Rows per block when no stage runs a function per batch of the children: fewer blocks are cheaper.
WIDE_ROWS_PER_BLOCK = 1024
# A block is cut at this many bytes even before it has its rows, so large rows (rendered pages,
# frames) spread early and the object store moves reasonable pieces.
TARGET_BLOCK_BYTES = 4 * 1024 * 1024

_FIXED = frozenset({int, float, bool, type(None)})  # 8 bytes each (by exact type: runs per child)
_SIZED = (str, bytes, bytearray, memoryview)  # their length (a tuple: isinstance's fast path)


def row_bytes(row: Mapping) -> int:
    """About how many bytes ``row`` takes in Arrow: strings and bytes by length, else 8 a value."""
    total = 0
    for value in row.values():
        if type(value) in _FIXED:
            total += 8
        elif isinstance(value, _SIZED):
            total += len(value)
        elif isinstance(value, list | tuple):
            total += 8 * len(value)
        else:
            total += int(getattr(value, "nbytes", 8))
    return total
