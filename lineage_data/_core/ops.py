"""Building the batch operator of each stage; shared by the Ray layer and the in-process executor."""

from __future__ import annotations

from typing import Any, assert_never, cast

from lineage_data._core.expand import DEFAULT_ROWS_PER_BLOCK, ExpandOp
from lineage_data._core.guard import Watchdog
from lineage_data._core.plan import Plan
from lineage_data._core.reduce import ReduceOp
from lineage_data._core.rowwise import RowStageOp
from lineage_data._core.stages import Expand, Filter, MapBatches, MapRows, Reduce
from lineage_data._core.state.protocols import OperatorClient, StageClient


def opening_expand(plan: Plan, index: int) -> int:
    """The index of the ``expand_lineage`` that the reduce at ``index`` closes."""
    depth = 0
    for i in range(index - 1, -1, -1):
        stage = plan.stages[i]
        if isinstance(stage, Reduce):
            depth += 1
        elif isinstance(stage, Expand):
            if depth == 0:
                return i
            depth -= 1
    raise ValueError(f"stage {index} closes no expansion")


def child_producer(plan: Plan, index: int) -> str:
    """The stage whose output columns the children of the reduce at ``index`` carry.

    The closest stage before it that emits rows of its level, filters aside (they keep their input's):
    the opening expansion at the latest.
    """
    level = plan.stages[index].level
    opened = plan.stages[opening_expand(plan, index) : index]
    return next(
        s.name for s in reversed(opened) if s.level_out == level and not isinstance(s, Filter)
    )


def build_op(
    plan: Plan,
    index: int,
    coordinator: StageClient | OperatorClient,
    *,
    rows_per_block: int = DEFAULT_ROWS_PER_BLOCK,
    holders: Any = None,
    watchdog: Watchdog | None = None,
    fn: Any = None,
) -> ExpandOp | RowStageOp | ReduceOp:
    """The operator for stage ``index`` of ``plan``, talking to ``coordinator``.

    A reduce needs ``holders`` for its partial groups (see :class:`ReduceOp`). ``watchdog``: the
    process's, to enforce ``timeout_s`` (None: not enforced). ``fn``: a 1:1 stage's callable, already
    built (shared by the operators of one actor's threads).
    """
    stage = plan.stages[index]
    # A plan with an expansion always runs under a coordinator (only a flat plan's source-level 1:1
    # stages get a StageClient alone: Plan.flat), so its expand and reduce get the whole table.
    fenced = cast(OperatorClient, coordinator)
    match stage:
        case Expand():
            return ExpandOp(stage, fenced, rows_per_block=rows_per_block, watchdog=watchdog)
        case Reduce():
            opening = plan.stages[opening_expand(plan, index)]
            assert isinstance(opening, Expand)
            return ReduceOp(
                stage,
                fenced,
                holders=holders,
                carry=opening.carry,
                children_of=child_producer(plan, index),
                watchdog=watchdog,
            )
        case MapBatches() | MapRows() | Filter():
            return RowStageOp(stage, index, coordinator, watchdog=watchdog, fn=fn)
        case _:
            assert_never(stage)
