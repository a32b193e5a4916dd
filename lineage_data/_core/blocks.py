"""How big the blocks after an expansion are: sized from the work that reads them, not a constant.

Every block costs the runtime the same (a task or an actor call, an object in the store), so thousands of
5-child parents should share blocks; but a 427-child parent must still be cut into several blocks, or
one GPU actor gets all of it. A block of one downstream batch does both: the parent spreads over
``children / batch_size`` actors, and small parents fill the batch together. Rows that are large fill a
block by bytes first (:data:`TARGET_BLOCK_BYTES`, applied by the expansion as it emits children).

Example:
    >>> from lineage_data._core.plan import Plan, Source
    >>> from lineage_data._core.stages import Compute, Expand, MapBatches, Reduce, UserFn
    >>> plan = Plan(Source(), (
    ...     Expand(name="pages", call=UserFn(iter), level=0),
    ...     MapBatches(name="ocr", call=UserFn(len), level=1, batch_size=32, compute=Compute(num_gpus=1)),
    ...     Reduce(name="docs", call=UserFn(None), level=1),
    ... ))
    >>> rows_per_block(plan, 0)
    32
"""

from __future__ import annotations

from collections.abc import Mapping

from lineage_data._core.plan import Plan
from lineage_data._core.stages import Compute, Expand, MapBatches, Reduce

# Rows per block when nothing downstream says how it batches (the historical default).
DEFAULT_ROWS_PER_BLOCK = 16
# Rows per block when the children go straight to a reduce, or out of the plan: no stage runs a
# function per batch of them, so fewer, bigger blocks are cheaper (and complete more parents in one).
WIDE_ROWS_PER_BLOCK = 1024
# A block is cut at this many bytes of children even before it has its rows: a few MB, so large rows
# (rendered pages, frames) spread early and the object store moves reasonable pieces.
TARGET_BLOCK_BYTES = 4 * 1024 * 1024


def rows_per_block(plan: Plan, index: int) -> int:
    """Rows per block of the children that the expansion at ``index`` emits.

    The first stage on the children's level with a ``batch_size`` decides: one block is one of its
    batches (several for a CPU function, see :func:`batches_per_block`). A stage before it without one (``filter``, ``map``, ``map_batches`` taking whole blocks)
    may be costly per row, so the blocks stay small (:data:`DEFAULT_ROWS_PER_BLOCK`) if no stage says
    more; so do the blocks of a nested expansion (each child is a parent again and should spread).
    Children that go straight to a reduce or out of the plan take wide blocks.
    """
    unsized = False
    for stage in plan.stages[index + 1 :]:
        if isinstance(stage, Expand):
            return DEFAULT_ROWS_PER_BLOCK
        if isinstance(stage, Reduce):
            break
        if isinstance(stage, MapBatches) and stage.batch_size is not None:
            return batches_per_block(stage) * stage.batch_size
        unsized = True
    return DEFAULT_ROWS_PER_BLOCK if unsized else WIDE_ROWS_PER_BLOCK


def batches_per_block(stage: MapBatches) -> int:
    """How many of the stage's batches one block holds.

    One for a stage on an actor pool, on GPUs or on custom resources: each block is a work item an
    actor or an accelerator takes, so a big parent spreads over all of them. A CPU function runs as Ray tasks, where every block
    costs a task: blocks of several batches, up to :data:`WIDE_ROWS_PER_BLOCK` rows (the task still
    calls the function batch by batch), so thousands of small parents do not cost thousands of tasks.
    """
    if not cpu_function(stage):
        return 1
    return max(1, WIDE_ROWS_PER_BLOCK // (stage.batch_size or WIDE_ROWS_PER_BLOCK))


def cpu_function(stage: MapBatches) -> bool:
    """True for a function on CPUs: not a class (an actor pool), no GPUs, no custom resources."""
    return not (stage.call.is_class or accelerated(stage.compute))


def accelerated(compute: Compute) -> bool:
    """True when a stage asks for GPUs, custom resources or an accelerator type."""
    return bool(
        compute.num_gpus or {"resources", "accelerator_type"} & set(compute.ray_remote_args)
    )


def cuts_source_blocks(plan: Plan, index: int, source_block_rows: int) -> bool:
    """True when the level-0 ``map_batches`` at ``index`` takes whole source blocks and cuts them.

    Ray Data cuts each block into ``batch_size`` batches, and every batch then pays per column, the
    lineage columns included: Ray slices them, our operator checks them, Ray joins the outputs again.
    Taken whole, a block pays that once and only the user's columns are cut (the function still gets
    ``batch_size`` rows at a time). Only where that gives the same batches: a CPU function whose
    blocks are the source's (every stage before it at level 0, none on an actor pool) and are known
    to hold at least a batch each (``source_block_rows``; 0: unknown), since Ray Data would bundle
    smaller blocks into one batch.
    """
    stage = plan.stages[index]
    if not (isinstance(stage, MapBatches) and stage.batch_size and cpu_function(stage)):
        return False
    upstream = plan.stages[: index + 1]  # tasks keep their input blocks whole; actors re-cut them
    sourced = all(s.level == 0 and not s.call.is_class for s in upstream)
    return sourced and stage.batch_size <= source_block_rows


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
