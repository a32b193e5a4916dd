"""The source's blocks: how ``from_items`` cuts its rows, and what is known of them before the run.

Decides the rows per block of a ``from_items`` source, and gives the fact
:mod:`~lineage_data._core.physical.batches` reads (rows in the smallest source block). Each source
block is one ``ray.put`` on the driver: at most :data:`MAX_SOURCE_BLOCKS` of them, one row per
block for small inputs, so a few heavy parents (PDFs) still expand in parallel.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from lineage_data._core.plan import ItemsSource, Plan, RaySource

MAX_SOURCE_BLOCKS = 64


def items_per_block(rows: int) -> int:
    """Rows per source block of ``from_items`` with ``rows`` rows to run.

    >>> items_per_block(10), items_per_block(1000)
    (1, 16)
    """
    return max(1, -(-rows // MAX_SOURCE_BLOCKS))


def source_block_rows(plan: Plan, in_memory: Callable[[Any], int] | None = None) -> int:
    """Rows in the smallest level-0 block, where known exactly before the run; 0 when not.

    Items: :func:`items_per_block`. A Ray Dataset, when the plan does not cut its rows (a limit, a
    repair pass): ``in_memory(dataset)``, what the engine knows of its blocks without running
    anything (None: nothing). Files, and the runs this library materializes: 0.
    """
    restricted = plan.exclude or plan.only is not None or plan.limit is not None
    match plan.source:
        case ItemsSource() as src:
            roots = src.roots or ()
            return items_per_block(len(plan.select(roots)) if restricted else len(roots))
        case RaySource() as src if not restricted and in_memory is not None:
            return in_memory(src.dataset)
    return 0
