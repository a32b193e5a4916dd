"""Rule: the step running the last stage (or a reduce folded into it) reports the terminal rows.

In the last stage's own call, the terminal operator costs no Ray step of its own.
"""

from __future__ import annotations

from dataclasses import replace

from lineage_data._core.physical.steps import PhysicalPlan, Step


def _ending(step: Step, last: int) -> Step:
    if step.then:
        return replace(step, then=tuple(_ending(folded, last) for folded in step.then))
    return replace(step, terminal=step.index == last)


class EndInLastStep:
    """Sets :attr:`Step.terminal` on the step (or folded reduce) that runs the last stage."""

    def apply(self, physical: PhysicalPlan) -> PhysicalPlan:
        """Mark the step that runs the last stage as terminal."""
        last = len(physical.plan.stages) - 1
        return replace(physical, steps=tuple(_ending(step, last) for step in physical.steps))
