"""Rule: what runs each stage (Ray tasks or an actor pool), and how many batches an actor takes at once.

Ray Data's own rule (``get_compute_strategy``) restated without Ray; the lowering checks they agree.
"""

from __future__ import annotations

import inspect
from dataclasses import replace

from lineage_data._core.physical.steps import PhysicalPlan, Runner
from lineage_data._core.stages import AnyStage, Compute, Filter, MapBatches, MapRows


def runner(stage: AnyStage) -> Runner:
    """An actor pool for a callable class, tasks for anything else."""
    return Runner.POOL if stage.call.is_class else Runner.TASKS


def accelerated(compute: Compute) -> bool:
    """True when a stage asks for GPUs, custom resources or an accelerator type."""
    return bool(
        compute.num_gpus or {"resources", "accelerator_type"} & set(compute.ray_remote_args)
    )


def cpu_function(stage: AnyStage) -> bool:
    """True for a function on CPUs: not a class (an actor pool), no GPUs, no custom resources."""
    return not (stage.call.is_class or accelerated(stage.compute))


def batches_in_flight(stage: AnyStage) -> int:
    """How many batches one actor of ``stage`` runs at once, by Ray Data's own rule.

    Only a 1:1 stage runs several: an expansion or a reduce keeps per-actor order.
    """
    strategy = stage.compute.strategy
    k = getattr(strategy, "max_concurrent_calls_per_actor", None) or 1
    if (
        k <= 1
        or runner(stage) is Runner.TASKS
        or not isinstance(stage, MapBatches | MapRows | Filter)
    ):
        return 1
    is_async = inspect.iscoroutinefunction(inspect.getattr_static(stage.call.fn, "__call__", None))
    return k if is_async or getattr(strategy, "enable_true_multi_threading", False) else 1


class ChooseRunner:
    """Sets every step's :func:`runner` and :func:`batches_in_flight`."""

    def apply(self, physical: PhysicalPlan) -> PhysicalPlan:
        """Set each step's runner and threads."""
        steps = []
        for step in physical.steps:
            stage = physical.plan.stages[step.index]
            steps.append(replace(step, runner=runner(stage), threads=batches_in_flight(stage)))
        return replace(physical, steps=tuple(steps))
