"""Rule: the plan's terminal rows are reported by the step that runs its last stage.

Decides :attr:`Step.terminal`. The terminal operator (:class:`~lineage_data._core.terminal.TerminalOp`)
runs on every block that leaves the plan; folded into the last stage's own call it costs one Ray
step fewer per block. That is the last step itself, or the last reduce folded into it. A plan whose
stages all ran before (a kept run) has no step: its terminal rows are a step of their own.
"""

from __future__ import annotations

from dataclasses import replace

from lineage_data._core.physical.steps import PhysicalPlan, Step


def _ending(step: Step, last: int) -> Step:
    if step.then:
        return replace(step, then=tuple(_ending(folded, last) for folded in step.then))
    return replace(step, terminal=step.index == last)


class EndInLastStep:
    """The step (or folded reduce) that runs the plan's last stage reports the terminal rows."""

    def apply(self, physical: PhysicalPlan) -> PhysicalPlan:
        """Mark the step that runs the last stage as terminal."""
        last = len(physical.plan.stages) - 1
        return physical.with_steps(tuple(_ending(step, last) for step in physical.steps))
