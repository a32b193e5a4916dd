"""Rule: a reduce right after a 1:1 stage on a CPU actor pool runs in that stage's actors.

Decides :attr:`Step.then` (the reduces folded into a step) from the stages' kinds, callables,
compute and resources. Ray Data fuses a task step into the task step before it, never into an actor
pool's: a reduce after a model on a CPU actor pool would be a step of its own, one more task per
block with its launch, its input's trip through the object store, and its latency at the end of
the run. On CPU-bound OCR the plan ran at the floor without its two reduces and 4 % over it with
them as tasks; run in the recognizer's actors, they were 3 % faster than as tasks (bench/README,
"Reduces in the model's actor").
"""

from __future__ import annotations

from dataclasses import replace

from lineage_data._core.physical.runner import accelerated, runner
from lineage_data._core.physical.steps import PhysicalPlan, Runner, Step
from lineage_data._core.stages import AnyStage, Filter, MapBatches, MapRows, Reduce


def folds_into(host: AnyStage, stage: AnyStage) -> bool:
    """True when ``stage``, a reduce, runs in the actors of ``host``, the stage right before it.

    A reduce the user gave no compute of its own (a function or none: no strategy, no resources)
    runs in the actor of a 1:1 stage on CPUs, right after the actor's call. Not after an actor on
    GPUs or custom resources: the accelerator would wait while the reduce runs. The reduce keeps its
    own journal, policy and timeout; a timeout or a crash in it ends the actor, which Ray restarts
    (its model is built again).
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
        return physical.with_steps(tuple(steps))
