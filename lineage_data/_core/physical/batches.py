"""Rule: who cuts a step's input into the stage's ``batch_size`` batches, Ray Data or the operator.

Decides :attr:`Step.batches` from the stage's ``batch_size``, its runner and resources, the stages
before it and the rows of the source's blocks. Ray Data cuts each block into ``batch_size`` batches
(and bundles smaller blocks into one), and every batch then pays per column, the lineage columns
included: Ray slices them, our operator checks them, Ray joins the outputs again. Taken whole, a
block pays that once and only the user's columns are cut: the operator still calls the function on
``batch_size`` rows at a time (:class:`~lineage_data._core.rowwise.RowStageOp` cuts any block
bigger than a batch). A stage without ``batch_size`` (``map``, ``filter``, a reduce, whose blocks
each reduce the parents they complete while partial groups wait in the holders) takes whole blocks.
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

    The operator, in whole blocks, where that gives the same batches (:func:`cuts_source_blocks`),
    and for a CPU function on children, whose blocks hold several of its batches (one hand-off and
    commit per block, see :func:`~lineage_data._core.physical.block_rows.batches_per_block`).
    Ray Data for any other stage with a ``batch_size``.
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

    Only where that gives the same batches as Ray Data's: a CPU function whose blocks are the
    source's (every stage before it at level 0, none on an actor pool) and are known to hold at
    least a batch each (``source_block_rows``; 0: unknown), since Ray Data would bundle smaller
    blocks into one batch.
    """
    stage = plan.stages[index]
    if not (isinstance(stage, MapBatches) and stage.batch_size and cpu_function(stage)):
        return False
    upstream = plan.stages[: index + 1]  # tasks keep their input blocks whole; actors re-cut them
    sourced = all(s.level == 0 and not s.call.is_class for s in upstream)
    return sourced and stage.batch_size <= source_block_rows


class CutBatches:
    """Every step: :func:`who_cuts` its batches, and their size."""

    def apply(self, physical: PhysicalPlan) -> PhysicalPlan:
        """Set each step's batching."""
        plan, rows = physical.plan, physical.source_block_rows
        steps = []
        for step in physical.steps:
            batches = who_cuts(plan, step.index, rows)
            stage = plan.stages[step.index]
            size = stage.batch_size if isinstance(stage, Expand | MapBatches) else None
            steps.append(replace(step, batches=batches, batch_size=size))
        return physical.with_steps(tuple(steps))
