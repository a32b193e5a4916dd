"""Building the batch operator of each stage; shared by the Ray layer and the in-process executor."""

from __future__ import annotations

from typing import Any

from lineage_data._core.expand import DEFAULT_ROWS_PER_BLOCK, ExpandOp
from lineage_data._core.plan import Kind, Plan
from lineage_data._core.reduce import ReduceOp
from lineage_data._core.rowwise import RowStageOp


def opening_expand(plan: Plan, index: int) -> int:
    """The index of the ``expand_lineage`` that the reduce at ``index`` closes."""
    depth = 0
    for i in range(index - 1, -1, -1):
        kind = plan.stages[i].kind
        if kind is Kind.REDUCE:
            depth += 1
        elif kind is Kind.EXPAND:
            if depth == 0:
                return i
            depth -= 1
    raise ValueError(f"stage {index} closes no expansion")


def child_producer(plan: Plan, index: int) -> str:
    """The stage whose output columns the children of the reduce at ``index`` carry.

    The closest stage before it that emits rows of the reduce's level: a 1:1 map, an inner reduce, or
    the opening expansion (filters keep their input's columns).
    """
    level = plan.stages[index].level
    for i in range(index - 1, opening_expand(plan, index) - 1, -1):
        stage = plan.stages[i]
        if stage.level_out == level and stage.kind is not Kind.FILTER:
            return stage.name
    return plan.stages[opening_expand(plan, index)].name


def build_op(
    plan: Plan,
    index: int,
    coordinator: Any,
    *,
    rows_per_block: int = DEFAULT_ROWS_PER_BLOCK,
    holders: Any = None,
) -> ExpandOp | RowStageOp | ReduceOp:
    """The operator for stage ``index`` of ``plan``, talking to ``coordinator``.

    A reduce needs ``holders`` for its partial groups (see :class:`ReduceOp`).
    """
    stage = plan.stages[index]
    if stage.kind is Kind.EXPAND:
        return ExpandOp(stage, index, coordinator, rows_per_block=rows_per_block)
    if stage.kind is Kind.REDUCE:
        carry = plan.stages[opening_expand(plan, index)].carry
        if holders is None:
            raise ValueError(f"reduce stage {stage.name!r} needs holders for its partial groups")
        return ReduceOp(
            stage,
            coordinator,
            holders=holders,
            carry=carry,
            children_of=child_producer(plan, index),
        )
    return RowStageOp(stage, index, coordinator)
