"""The source's blocks: how ``from_items`` cuts its rows, and their size known before the run.

At most :data:`MAX_SOURCE_BLOCKS` (each a ``ray.put``), one row each for small inputs, so a few heavy
parents (PDFs) still expand in parallel.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from lineage_data._core.plan import ItemsSource, Plan, RaySource

MAX_SOURCE_BLOCKS = 64


def items_per_block(rows: int) -> int:
    """Rows per source block of ``from_items`` with ``rows`` rows to run."""
    return max(1, -(-rows // MAX_SOURCE_BLOCKS))


def source_block_rows(plan: Plan, in_memory: Callable[[Any], int] | None = None) -> int:
    """Rows in the smallest level-0 block, where known exactly before the run; 0 when not.

    ``in_memory(dataset)``: what the engine knows of a Ray Dataset's blocks without running anything.
    """
    restricted = plan.exclude or plan.only is not None or plan.limit is not None
    match plan.source:
        case ItemsSource(roots=roots):
            return items_per_block(len(plan.select(roots)) if restricted else len(roots))
        case RaySource() as src if not restricted and in_memory is not None:
            return in_memory(src.dataset)
    return 0
