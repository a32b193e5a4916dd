"""Lowering a lineage plan to a ``ray.data.Dataset``: one Ray Data map step per stage, no shuffle."""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import ray
from ray.data import ActorPoolStrategy

from lineage_data._core import columns as C
from lineage_data._core.expand import DEFAULT_ROWS_PER_BLOCK
from lineage_data._core.ops import build_op
from lineage_data._core.plan import Kind, Plan, Stage
from lineage_data._core.source import content_ids, items_table, root_ids, with_lineage
from lineage_data._core.terminal import TerminalOp

# Lineage steps of their own (reduce; terminal when a plan has no stage) run as plain 1-CPU tasks: on a
# small machine fractional-CPU tasks start many more worker processes and were 5x slower here.
# from_items: at most this many source blocks (each is one ray.put on the driver), one row per block
# for small inputs, so a few heavy parents (PDFs) still expand in parallel.
MAX_SOURCE_BLOCKS = 64


@dataclass(frozen=True)
class _Step:
    """What a worker needs to run one stage.

    For the last stage of a plan the terminal step is folded in: one Ray step fewer per block.
    """

    plan: Plan
    index: int
    client: Any
    rows_per_block: int
    holders: Any = None
    terminal: bool = False

    def build(self) -> Callable[[pa.Table], Any]:
        stage = self.plan.stages[self.index]
        op = build_op(
            self.plan,
            self.index,
            self.client.for_stage(stage.name),
            rows_per_block=self.rows_per_block,
            holders=self.holders,
        )
        if not self.terminal:
            return op
        end = TerminalOp(self.plan.level)
        if self.plan.stages[self.index].kind is Kind.EXPAND:
            return lambda batch: (end(block) for block in op(batch))
        return lambda batch: end(op(batch))


def _actor_class(step: _Step, generator: bool) -> type:
    """A callable class holding one operator (built once per actor). Built here, not in a loop."""

    class StageActor:
        def __init__(self) -> None:
            self._run = step.build()

        if generator:

            def __call__(self, batch: pa.Table) -> Any:
                yield from self._run(batch)

        else:

            def __call__(self, batch: pa.Table) -> Any:
                return self._run(batch)

    StageActor.__name__ = StageActor.__qualname__ = step.plan.stages[step.index].name
    return StageActor


# Operators of task-based steps, built once per worker process and pass (a task worker runs one task
# at a time): their caches (established column types, holder handles) outlive a single batch.
_OPS: OrderedDict[tuple[str, int], Callable[[pa.Table], Any]] = OrderedDict()
_MAX_OPS = 32


def _op(step: _Step) -> Callable[[pa.Table], Any]:
    key = (step.client.helper.name, step.index)
    op = _OPS.get(key)
    if op is None:
        op = _OPS[key] = step.build()
        while len(_OPS) > _MAX_OPS:
            _OPS.popitem(last=False)
    return op


def _task_fn(step: _Step, generator: bool) -> Any:
    """A function for task-based steps, named after the stage (Ray shows it in operator names)."""
    if generator:

        def expand_task(batch: pa.Table) -> Any:
            yield from _op(step)(batch)

        fn: Any = expand_task
    else:

        def stage_task(batch: pa.Table) -> pa.Table:
            return _op(step)(batch)

        fn = stage_task
    fn.__name__ = fn.__qualname__ = step.plan.stages[step.index].name
    return fn


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


def lower_stage(ds: ray.data.Dataset, step: _Step) -> Any:
    """Append one stage to ``ds``."""
    stage = step.plan.stages[step.index]
    if stage.kind is Kind.REDUCE:
        # A task step (many run at once): each reduces the parents its block completes; partial
        # groups wait in the stage's hash-partitioned holder actors.
        return ds.map_batches(
            _task_fn(step, False), batch_format="pyarrow", batch_size=None, **_resources(stage)
        )
    generator = stage.kind is Kind.EXPAND
    compute = _compute(stage)
    fn = _actor_class(step, generator) if compute is not None else _task_fn(step, generator)
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
        ds = ds.repartition(target_num_rows_per_block=step.rows_per_block)
    return ds


def source_dataset(plan: Plan, client: Any) -> ray.data.Dataset:
    """The level-0 rows of ``plan`` with their lineage columns (excluded roots left out).

    Sources that know their roots up front (items, files) need no registration: the driver expects
    them. A Ray Dataset source registers the ids of each block with ``client`` as it reads them,
    idempotently per block (a retried source task registers the same block again).
    """
    src = plan.source
    if src.kind == "items":
        items = src.payload
        roots = src.roots or root_ids(items, src.id_column)
        keep = [i for i, r in enumerate(roots) if plan.keeps(r)]
        if len(keep) != len(roots):
            items, roots = [items[i] for i in keep], [roots[i] for i in keep]
        table = items_table(list(items), list(roots))
        per_block = max(1, -(-table.num_rows // MAX_SOURCE_BLOCKS))
        tables = [table.slice(j, per_block) for j in range(0, table.num_rows, per_block)]
        return ray.data.from_arrow(tables or [C.empty()])
    if src.kind == "files":
        from lineage_data._ray.datasource import FileDatasource

        fs, files = src.payload
        files = [(uri, size) for uri, size in files if plan.keeps(uri)]
        per_task = int(src.options.get("files_per_task", 1))
        return ray.data.read_datasource(FileDatasource(fs, files, files_per_task=per_task))
    if src.kind == "ray":
        id_column, exclude, only = src.id_column, plan.exclude, plan.only
        client = client.for_stage("from_ray")

        def inject_roots(batch: pa.Table) -> pa.Table:
            if id_column is None:
                ids = content_ids(batch)
            else:
                # from_items' rule: a row with no id (None, or no id column at all) is a PlanError
                names = batch.column_names
                values = batch[id_column].to_pylist() if id_column in names else [None] * len(batch)
                ids = root_ids([{id_column: v} for v in values], id_column)
            digest = hashlib.sha1("\x00".join(ids).encode()).hexdigest()
            client.register_roots(ids, digest)
            table = with_lineage(batch, ids)
            if exclude or only is not None:
                keep = [
                    i for i, r in enumerate(ids)
                    if r not in exclude and (only is None or r in only)
                ]
                table = table.take(keep)
            return table

        return src.payload.map_batches(inject_roots, batch_format="pyarrow", batch_size=None)
    raise ValueError(f"unknown source kind {src.kind!r}")


def lower(
    plan: Plan,
    client: Any,
    holder_sets: dict[int, Any],
    *,
    rows_per_block: int = DEFAULT_ROWS_PER_BLOCK,
) -> ray.data.Dataset:
    """The whole plan as a lazy Ray Dataset; its last step also reports terminal rows.

    ``holder_sets`` maps the index of every reduce stage to its group holders.
    """
    ds = source_dataset(plan, client)
    ds.context.raise_original_map_exception = True
    shipped = plan.for_workers()  # stage closures must not carry the source rows to every task
    last = len(plan.stages) - 1
    for index in range(len(plan.stages)):
        step = _Step(shipped, index, client, rows_per_block, holder_sets.get(index), index == last)
        ds = lower_stage(ds, step)
    if plan.stages:
        return ds
    level = plan.level

    def terminal(batch: pa.Table) -> pa.Table:
        return TerminalOp(level)(batch)

    return ds.map_batches(terminal, batch_format="pyarrow", batch_size=None)
