"""Rule: who cuts a step's input into the stage's ``batch_size`` batches, Ray Data or the operator.

Each batch Ray Data cuts pays per column, the lineage columns included; a block taken whole pays that
once, and the operator still calls the function on ``batch_size`` rows at a time.
"""

from __future__ import annotations

from dataclasses import replace

from lineage_data._core.physical.block_rows import batches_per_block
from lineage_data._core.physical.runner import cpu_function
from lineage_data._core.physical.steps import Batches, PhysicalPlan
from lineage_data._core.plan import Plan
from lineage_data._core.stages import Expand, MapBatches


def who_cuts(plan: Plan, index: int, source_block_rows: int) -> Batches:
    """Who cuts the batches of stage ``index``.

    The operator where it gives the same batches, or where a CPU function's blocks of children hold
    several (:func:`batches_per_block`); else Ray Data.
    """
    stage = plan.stages[index]
    if not isinstance(stage, Expand | MapBatches) or stage.batch_size is None:
        return Batches.WHOLE
    if cuts_source_blocks(plan, index, source_block_rows):
        return Batches.OPERATOR
    if isinstance(stage, MapBatches) and stage.level > 0 and batches_per_block(stage) > 1:
        return Batches.OPERATOR
    return Batches.RAY


def cuts_source_blocks(plan: Plan, index: int, source_block_rows: int) -> bool:
    """True when the level-0 ``map_batches`` at ``index`` takes whole source blocks and cuts them.

    Only where Ray Data would not bundle them: the source's blocks, each at least a batch.
    """
    stage = plan.stages[index]
    if not (isinstance(stage, MapBatches) and stage.batch_size and cpu_function(stage)):
        return False
    upstream = plan.stages[: index + 1]  # tasks keep their input blocks whole; actors re-cut them
    sourced = all(s.level == 0 and not s.call.is_class for s in upstream)
    return sourced and stage.batch_size <= source_block_rows


class CutBatches:
    """Sets every step's batches (:func:`who_cuts`) and their size."""

    def apply(self, physical: PhysicalPlan) -> PhysicalPlan:
        """Set each step's batching."""
        plan, rows = physical.plan, physical.source_block_rows
        steps = []
        for step in physical.steps:
            stage = plan.stages[step.index]
            size = stage.batch_size if isinstance(stage, Expand | MapBatches) else None
            steps.append(replace(step, batches=who_cuts(plan, step.index, rows), batch_size=size))
        return replace(physical, steps=tuple(steps))
