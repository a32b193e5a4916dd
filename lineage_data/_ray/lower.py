"""Lowering a lineage plan to a ``ray.data.Dataset``: one Ray Data map step per stage, no shuffle."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import ray
from ray.data import ActorPoolStrategy

from lineage_data._core import columns as C
from lineage_data._core.expand import DEFAULT_ROWS_PER_BLOCK
from lineage_data._core.ops import build_op
from lineage_data._core.plan import Kind, Plan, Stage
from lineage_data._core.source import content_ids, root_ids, with_lineage
from lineage_data._core.terminal import TerminalOp

# Small fixed CPU shares keep the lineage steps from fusing with user steps of other resource shapes and
# let them run beside fractional-CPU actor pools on small machines.
REDUCER_CPUS = 0.25
TERMINAL_CPUS = 0.25
ITEMS_PER_BLOCK = 4


def _actor_class(plan: Plan, index: int, client: Any, rows_per_block: int, generator: bool) -> type:
    """A callable class holding one operator (built once per actor). Built here, not in a loop."""

    class StageActor:
        def __init__(self) -> None:
            self._op = build_op(plan, index, client, rows_per_block=rows_per_block)

        if generator:

            def __call__(self, batch: pa.Table) -> Any:
                yield from self._op(batch)

        else:

            def __call__(self, batch: pa.Table) -> Any:
                return self._op(batch)

    StageActor.__name__ = StageActor.__qualname__ = (
        f"Lineage_{plan.stages[index].kind.value}_{index}"
    )
    return StageActor


def _task_fn(plan: Plan, index: int, client: Any, rows_per_block: int, generator: bool) -> Any:
    """A function for task-based steps; the operator is cheap to build (its fn is a plain function)."""
    if generator:

        def expand_task(batch: pa.Table) -> Any:
            yield from build_op(plan, index, client, rows_per_block=rows_per_block)(batch)

        return expand_task

    def stage_task(batch: pa.Table) -> pa.Table:
        return build_op(plan, index, client)(batch)

    return stage_task


def _compute(stage: Stage) -> Any:
    if stage.concurrency is None:
        return ActorPoolStrategy(size=1) if stage.is_class else None
    if isinstance(stage.concurrency, tuple):
        return ActorPoolStrategy(min_size=stage.concurrency[0], max_size=stage.concurrency[1])
    return ActorPoolStrategy(size=stage.concurrency)


def _resources(stage: Stage) -> dict[str, Any]:
    args: dict[str, Any] = dict(stage.ray_remote_args)
    if stage.num_cpus is not None:
        args["num_cpus"] = stage.num_cpus
    if stage.num_gpus is not None:
        args["num_gpus"] = stage.num_gpus
    return args


def lower_stage(
    ds: ray.data.Dataset, plan: Plan, index: int, client: Any, rows_per_block: int
) -> Any:
    """Append stage ``index`` of ``plan`` to ``ds``."""
    stage = plan.stages[index]
    if stage.kind is Kind.REDUCE:
        args = _resources(stage)
        args.setdefault("num_cpus", REDUCER_CPUS)
        return ds.map_batches(
            _actor_class(plan, index, client, rows_per_block, generator=False),
            batch_format="pyarrow",
            batch_size=None,
            compute=ActorPoolStrategy(size=1),
            **args,
        )
    generator = stage.kind is Kind.EXPAND
    compute = _compute(stage)
    fn = (
        _actor_class(plan, index, client, rows_per_block, generator)
        if compute is not None
        else _task_fn(plan, index, client, rows_per_block, generator)
    )
    ds = ds.map_batches(
        fn,
        batch_format="pyarrow",
        batch_size=stage.batch_size,
        compute=compute,
        zero_copy_batch=True,
        **_resources(stage),
    )
    if generator:
        # Ray merges a task's yielded batches into one block; this split is fused into the same task
        # (no shuffle) and keeps children in small blocks so one huge parent spreads over many workers.
        ds = ds.repartition(target_num_rows_per_block=rows_per_block)
    return ds


def source_dataset(plan: Plan, client: Any) -> ray.data.Dataset:
    """The level-0 rows of ``plan`` with their lineage columns; roots are registered with ``client``."""
    src = plan.source
    if src.kind == "items":
        items = [dict(item) for item in src.payload]
        roots = root_ids(items, src.id_column)
        client.register_roots(roots)
        client.exclude_roots(sorted(plan.exclude))
        keep = [i for i, r in enumerate(roots) if r not in plan.exclude]
        tables = [
            with_lineage(pa.Table.from_pylist([items[i] for i in chunk]), [roots[i] for i in chunk])
            for chunk in (
                keep[j : j + ITEMS_PER_BLOCK] for j in range(0, len(keep), ITEMS_PER_BLOCK)
            )
        ]
        return ray.data.from_arrow(tables or [C.empty()])
    if src.kind == "files":
        from lineage_data._ray.datasource import FileDatasource

        fs, files = src.payload
        client.register_roots([uri for uri, _ in files])
        client.exclude_roots(sorted(plan.exclude))
        files = [(uri, size) for uri, size in files if uri not in plan.exclude]
        per_task = int(src.options.get("files_per_task", 1))
        return ray.data.read_datasource(FileDatasource(fs, files, files_per_task=per_task))
    if src.kind == "ray":
        client.exclude_roots(sorted(plan.exclude))
        id_column, exclude = src.id_column, plan.exclude

        def inject_roots(batch: pa.Table) -> pa.Table:
            if id_column is None:
                ids = content_ids(batch)
            else:
                ids = [str(v) for v in batch[id_column].to_pylist()]
            client.register_roots(ids)
            table = with_lineage(batch, ids)
            if exclude:
                keep = [i for i, r in enumerate(ids) if r not in exclude]
                table = table.take(keep)
            return table

        return src.payload.map_batches(inject_roots, batch_format="pyarrow", batch_size=None)
    raise ValueError(f"unknown source kind {src.kind!r}")


def lower(
    plan: Plan, client: Any, *, rows_per_block: int = DEFAULT_ROWS_PER_BLOCK
) -> ray.data.Dataset:
    """The whole plan as a lazy Ray Dataset ending in the terminal step."""
    ds = source_dataset(plan, client)
    ds.context.raise_original_map_exception = True
    for index in range(len(plan.stages)):
        ds = lower_stage(ds, plan, index, client, rows_per_block)
    level = plan.level

    def terminal(batch: pa.Table) -> pa.Table:
        return TerminalOp(level, client)(batch)

    return ds.map_batches(terminal, batch_format="pyarrow", batch_size=None, num_cpus=TERMINAL_CPUS)
