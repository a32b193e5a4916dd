"""Rule: a reduce right after a 1:1 stage on a CPU actor pool runs in that stage's actors.

Ray Data never fuses a task into an actor pool's step: the reduce would be one more task per block
(3 % slower on CPU-bound OCR, bench/README "Reduces in the model's actor").
"""

from __future__ import annotations

from dataclasses import replace

from lineage_data._core.physical.runner import accelerated, runner
from lineage_data._core.physical.steps import PhysicalPlan, Runner, Step
from lineage_data._core.stages import AnyStage, Filter, MapBatches, MapRows, Reduce


def folds_into(host: AnyStage, stage: AnyStage) -> bool:
    """True when ``stage``, a reduce with no compute of its own, runs in the actors of ``host``.

    Not after an actor on an accelerator: it would wait while the reduce runs.
    """
    if not isinstance(stage, Reduce) or not isinstance(host, MapBatches | MapRows | Filter):
        return False
    own = stage.compute
    if stage.call.is_class or own.describe() or own.ray_remote_args:
        return False
    return runner(host) is Runner.POOL and not accelerated(host.compute)


class FoldReduces:
    """Each run of reduces that :func:`folds_into` the step before them joins that step's ``then``."""

    def apply(self, physical: PhysicalPlan) -> PhysicalPlan:
        """Move the folded reduces' steps into their host's."""
        stages = physical.plan.stages
        steps: list[Step] = []
        for step in physical.steps:
            host = steps[-1] if steps else None
            if host is not None and folds_into(stages[host.index], stages[step.index]):
                steps[-1] = replace(host, then=(*host.then, step))
            else:
                steps.append(step)
        return replace(physical, steps=tuple(steps))
