"""The rules, in the order they apply, and the one function that applies them to a plan."""

from __future__ import annotations

from typing import Any, Protocol

from lineage_data._core.physical.batches import CutBatches
from lineage_data._core.physical.block_rows import SizeBlocks
from lineage_data._core.physical.fold import FoldReduces
from lineage_data._core.physical.one_piece import OnePiece
from lineage_data._core.physical.runner import ChooseRunner
from lineage_data._core.physical.steps import PhysicalPlan
from lineage_data._core.physical.terminal import EndInLastStep
from lineage_data._core.plan import Plan


class Rule(Protocol):
    """One physical decision: a physical plan in, the same plan with that decision made out."""

    def apply(self, physical: PhysicalPlan) -> PhysicalPlan:
        """The plan with this rule's decision made."""


# Each rule reads only what the rules before it set: the runner first (folding and batching read
# it), block sizes before folding (a folded reduce keeps its own), the terminal after folding (it
# may be a folded reduce's), one piece last (it reads the last step as folded).
RULES: tuple[Rule, ...] = (
    ChooseRunner(),
    SizeBlocks(),
    FoldReduces(),
    CutBatches(),
    EndInLastStep(),
    OnePiece(),
)


def physical_plan(plan: Plan, **facts: Any) -> PhysicalPlan:
    """The physical plan of ``plan``: every rule of :data:`RULES` applied once, in order.

    ``facts`` are what is known before the run (see :class:`PhysicalPlan`).
    """
    physical = PhysicalPlan.of(plan, **facts)
    for rule in RULES:
        physical = rule.apply(physical)
    return physical
