"""Rule: how many rows a block of an expansion's children holds, sized from the work that reads them.

Decides :attr:`Step.rows_per_block` from the stages after the expansion (and the plan's fixed size,
where a caller gives one). Every block costs the runtime the same (a task or an actor call, an
object in the store), so thousands of 5-child parents should share blocks; but a 427-child parent
must still be cut into several blocks, or one GPU actor gets all of it. A block of one downstream
batch does both: the parent spreads over ``children / batch_size`` actors, and small parents fill
the batch together. Rows that are large fill a block by bytes first
(:data:`~lineage_data._core.blocks.TARGET_BLOCK_BYTES`, applied by the expansion as it emits).

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

from dataclasses import replace

from lineage_data._core.blocks import DEFAULT_ROWS_PER_BLOCK, WIDE_ROWS_PER_BLOCK
from lineage_data._core.physical.runner import cpu_function
from lineage_data._core.physical.steps import PhysicalPlan
from lineage_data._core.plan import Plan
from lineage_data._core.stages import Expand, MapBatches, Reduce


def rows_per_block(plan: Plan, index: int) -> int:
    """Rows per block of the children that the expansion at ``index`` emits.

    The first stage on the children's level with a ``batch_size`` decides: one block is one of its
    batches (several for a CPU function, see :func:`batches_per_block`). A stage before it without
    one (``filter``, ``map``, ``map_batches`` taking whole blocks) may be costly per row, so the
    blocks stay small (:data:`DEFAULT_ROWS_PER_BLOCK`) if no stage says more; so do the blocks of a
    nested expansion (each child is a parent again and should spread). Children that go straight
    to a reduce or out of the plan take wide blocks.
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
    actor or an accelerator takes, so a big parent spreads over all of them. A CPU function runs as
    Ray tasks, where every block costs a task: blocks of several batches, up to
    :data:`WIDE_ROWS_PER_BLOCK` rows (the task still calls the function batch by batch), so
    thousands of small parents do not cost thousands of tasks.
    """
    if not cpu_function(stage):
        return 1
    return max(1, WIDE_ROWS_PER_BLOCK // (stage.batch_size or WIDE_ROWS_PER_BLOCK))


class SizeBlocks:
    """Every step: the plan's fixed block size, else :func:`rows_per_block` of its stage."""

    def apply(self, physical: PhysicalPlan) -> PhysicalPlan:
        """Set each step's rows per block."""
        fixed, plan = physical.rows_per_block, physical.plan
        return physical.with_steps(
            tuple(
                replace(step, rows_per_block=fixed or rows_per_block(plan, step.index))
                for step in physical.steps
            )
        )
