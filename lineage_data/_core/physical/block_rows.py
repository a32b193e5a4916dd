"""Rule: how many rows a block of an expansion's children holds, sized from the work that reads them.

Every block costs a task or an actor call, so small parents should share blocks, yet a 427-child
parent must spread over several actors: a block of one downstream batch does both.
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

    The first stage on their level with a ``batch_size`` decides. Blocks stay small after a stage
    without one (it may be costly per row) or before a nested expansion; else they are wide.
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

    One on an actor pool or an accelerator, so a big parent spreads; a CPU function's task per block
    takes up to :data:`WIDE_ROWS_PER_BLOCK` rows, so small parents do not cost a task each.
    """
    if not cpu_function(stage):
        return 1
    return max(1, WIDE_ROWS_PER_BLOCK // (stage.batch_size or WIDE_ROWS_PER_BLOCK))


class SizeBlocks:
    """Sets every step's rows per block: the plan's fixed size, else :func:`rows_per_block`."""

    def apply(self, physical: PhysicalPlan) -> PhysicalPlan:
        """Set each step's rows per block."""
        fixed, plan = physical.rows_per_block, physical.plan
        steps = tuple(
            replace(step, rows_per_block=fixed or rows_per_block(plan, step.index))
            for step in physical.steps
        )
        return replace(physical, steps=steps)
