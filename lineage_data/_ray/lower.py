"""Lowering a lineage plan to a ``ray.data.Dataset``: one Ray Data map step per physical step.

What runs where is decided by :mod:`lineage_data._core.physical`; this module translates its
:class:`~lineage_data._core.physical.PhysicalPlan` to Ray Data calls, no shuffle.
"""

from __future__ import annotations

import functools
import hashlib
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import ray
from ray.data import ActorPoolStrategy

from lineage_data._core import columns as C
from lineage_data._core.errors import WorkerCrashedError
from lineage_data._core.guard import born, set_concurrent
from lineage_data._core.ops import build_op
from lineage_data._core.physical import Batches, Runner, Step, physical_plan
from lineage_data._core.physical import source_blocks as physical_source
from lineage_data._core.plan import FilesSource, ItemsSource, MaterializedSource, Plan, RaySource
from lineage_data._core.source import column_ids, content_ids, ids_digest, with_lineage
from lineage_data._core.stages import AnyStage, Expand
from lineage_data._core.state import Journal
from lineage_data._core.terminal import TerminalOp
from lineage_data._ray import compat
from lineage_data._ray.coordinator import CoordinatorClient
from lineage_data._ray.typestore import TypeStore
from lineage_data._ray.worker import WATCHDOG

R = TypeVar("R")
# What a run's operators talk to: its coordinator, or a flat plan's store (no coordinator at all).
Client = CoordinatorClient | TypeStore

# A stage's step up to this size (pickled) travels inside its operator's closure, a bigger one by
# reference (see _Shipped).
MAX_INLINE_STEP_BYTES = 64 * 1024


@dataclass(frozen=True)
class _Step:
    """What a worker needs to run one stage; ``terminal``: it also reports the terminal rows."""

    plan: Plan
    index: int
    client: Client
    rows_per_block: int
    holders: Any = None
    terminal: bool = False
    keep_parents: bool = False  # the terminal step keeps the headers' parent rows
    then: tuple[_Step, ...] = ()  # reduces folded into this step's actor (_core.physical.fold)

    def build(self, fn: Any = None) -> Callable[[pa.Table], Any]:
        """The stage's operator; ``fn``: its 1:1 user callable, already built (see :meth:`bind`)."""
        stage = self.plan.stages[self.index]
        client = self.client.for_stage(stage.name)
        make = functools.partial(
            build_op,
            self.plan,
            self.index,
            client,
            rows_per_block=self.rows_per_block,
            holders=self.holders,
            watchdog=WATCHDOG,
        )
        op: Any = make(fn=fn) if fn is not None else _constructing(stage, client, make)
        if self.then:
            return _chain([op, *(step.build() for step in self.then)])
        if not self.terminal:
            return op
        end = TerminalOp(self.plan.level, keep_parents=self.keep_parents)
        if isinstance(stage, Expand):
            return lambda batch: (end(block) for block in op(batch))
        return lambda batch: end(op(batch))

    def born(self) -> None:
        """A life of this step's actor begins: journaled per stage (see :func:`_core.guard.born`)."""
        actor = ray.get_runtime_context().get_actor_id() or "(no actor)"
        for step in (self, *self.then):
            stage = step.plan.stages[step.index]
            client = step.client.for_stage(stage.name)
            born(stage.name, client, actor, stage.max_crash_retries)

    def bind(self) -> Any:
        """The user callable of this (1:1) stage, built once for the operators of an actor's threads."""
        stage = self.plan.stages[self.index]
        return _constructing(stage, self.client.for_stage(stage.name), stage.call.bind)


def _chain(ops: list[Callable[[pa.Table], Any]]) -> Callable[[pa.Table], Any]:
    """The operators of a stage and the reduces folded into it, one after the other on each batch.

    A crash in a folded reduce also reads as a crash of the stage's block; that costs no row its
    value (its rows run again as one call, the reduce's journal pins the crash on its parent).
    """

    def chained(batch: pa.Table) -> Any:
        for op in ops:
            batch = op(batch)
        return batch

    return chained


def _constructing(stage: AnyStage, client: Journal, make: Callable[[], R]) -> R:
    """``make()``, which builds the stage's callable class: journaled, bounded when it crashes.

    Ray would restart without end an actor whose constructor kills its process: each attempt is
    journaled under the actor's id, and past ``max_crash_retries`` the stage fails, typed.
    """
    actor = ray.get_runtime_context().get_actor_id() if stage.call.is_class else None
    key = f"constructor of actor {actor}"
    if actor is not None:
        crashes, _ = client.attempt(stage.name, key, ())
        if crashes > stage.max_crash_retries:
            times = "once" if crashes == 1 else f"{crashes} times"
            raise WorkerCrashedError(
                f"stage {stage.name!r}: the actor died {times} while its callable class "
                f"{stage.call.fn.__name__!r} was being built (a crash in its constructor)"
            )
    built = make()
    if actor is not None:
        client.attempt(stage.name, None, (key,))
    return built


class _Shipped:
    """A stage's :class:`_Step`, shipped to the workers inside the operator's closure or by reference.

    A small step travels by value: a reference would make every task a borrower of the driver's
    object (0.5 s of CPU over 200 tiny tasks, measured). A big one (a function closing over a large
    table) is put in the object store once per pass.
    """

    def __init__(self, step: _Step) -> None:
        pickled = ray.cloudpickle.dumps(step)
        self.step: _Step | None = step if len(pickled) <= MAX_INLINE_STEP_BYTES else None
        self.ref: Any = ray.put(step) if self.step is None else None
        stages = step.plan.stages
        self.name = "->".join(stages[s.index].name for s in (step, *step.then))
        self.key = (step.client.name, step.index)

    def get(self) -> _Step:
        return self.step if self.step is not None else ray.get(self.ref)


def _actor_class(shipped: _Shipped, generator: bool, threads: int = 1) -> type:
    """A callable class holding one operator (built once per actor).

    ``threads`` > 1: Ray calls the actor from that many threads at once; each thread gets an
    operator of its own, all sharing the one user callable.
    """

    class StageActor:
        def __init__(self) -> None:
            step = shipped.get()
            if threads > 1:
                set_concurrent()
                self._fn = step.bind()
                self._step = step
                self._local = threading.local()
            self._run = step.build(self._fn) if threads > 1 else step.build()
            step.born()
            self._spare: Any = self._run  # the first thread to call takes the operator built here

        def _op(self) -> Callable[[pa.Table], Any]:
            if threads == 1:
                return self._run
            run = getattr(self._local, "run", None)
            if run is None:
                run, self._spare = self._spare, None  # one thread wins the spare (atomic swap)
                self._local.run = run = run or self._step.build(self._fn)
            return run

        if generator:

            def __call__(self, batch: pa.Table) -> Any:
                yield from self._op()(batch)

        else:

            def __call__(self, batch: pa.Table) -> Any:
                return self._op()(batch)

    StageActor.__name__ = StageActor.__qualname__ = shipped.name
    return StageActor


def _threaded(compute: Any, threads: int) -> Any:
    """``compute`` for our (synchronous) actor class: true threads when ``threads`` > 1, else none."""
    if compute.enable_true_multi_threading == (threads > 1):
        return compute
    compute = compat.with_true_threads(compute, threads > 1)
    if threads > 1 and (compute.max_tasks_in_flight_per_actor or 0) < threads:
        compute.max_tasks_in_flight_per_actor = max(
            threads, ray.data.DataContext.get_current().max_tasks_in_flight_per_actor or 0
        )
    return compute


# Operators of task-based steps, built once per worker process and pass: their caches (column
# types, holder handles) outlive a single batch.
_OPS: OrderedDict[tuple[str, int], Callable[[pa.Table], Any]] = OrderedDict()
_MAX_OPS = 32


def _op(shipped: _Shipped) -> Callable[[pa.Table], Any]:
    op = _OPS.get(shipped.key)
    if op is None:
        op = _OPS[shipped.key] = shipped.get().build()
        while len(_OPS) > _MAX_OPS:
            _OPS.popitem(last=False)
    return op


def _task_fn(shipped: _Shipped, generator: bool) -> Any:
    """A function for task-based steps, named after the stage (Ray shows it in operator names)."""

    def expand_task(batch: pa.Table) -> Any:
        yield from _op(shipped)(batch)

    def stage_task(batch: pa.Table) -> pa.Table:
        return _op(shipped)(batch)

    fn: Any = expand_task if generator else stage_task
    fn.__name__ = fn.__qualname__ = shipped.name
    return fn


def compute_strategy(stage: AnyStage) -> Any:
    """The strategy Ray Data itself would choose for the user's ``fn`` and arguments."""
    call, compute = stage.call, stage.compute
    return compat.compute_strategy(
        call.fn if call.fn is not None else _no_fn,
        call.constructor_args or None,
        compute.strategy,
        compute.concurrency,
    )


def _no_fn(batch: Any) -> Any:  # a reduce without fn runs as a function does
    return batch


def lower_stage(ds: ray.data.Dataset, step: _Step, shipped: _Shipped, planned: Step) -> Any:
    """Append one physical step to ``ds``: the user's strategy and resources, our operator inside."""
    stage = step.plan.stages[step.index]
    generator = isinstance(stage, Expand)
    compute = compute_strategy(stage)
    actors = isinstance(compute, ActorPoolStrategy)
    if actors != (planned.runner is Runner.POOL):
        raise AssertionError(  # _core.physical.runner restates Ray's rule: it must still agree
            f"stage {stage.name!r}: Ray Data runs it with {type(compute).__name__}, the physical "
            f"plan on {planned.runner.value}"
        )
    if actors:
        compute = _threaded(compute, planned.threads)
        fn: Any = _actor_class(shipped, generator, planned.threads)
    else:
        fn = _task_fn(shipped, generator)
    batch_size = planned.batch_size if planned.batches is Batches.RAY else None
    ds = _map(ds, fn, stage, compute, batch_size)
    if generator:
        # Ray merges a task's yielded batches into one block; this split is fused into the same task
        # (no shuffle) and keeps children in small blocks so one huge parent spreads over many workers.
        ds = ds.repartition(target_num_rows_per_block=step.rows_per_block)
    if planned.one_piece:  # each output block in one chunk a column, fused into the stage's tasks
        ds = _map(ds, one_piece, stage, compute_strategy(stage))
    return ds


def _map(
    ds: ray.data.Dataset, fn: Any, stage: AnyStage, compute: Any, batch_size: int | None = None
) -> ray.data.Dataset:
    # Ray's public map_batches refuses GPUs without a batch size; Ray's own row verbs (map, filter,
    # flat_map) go through map_batches_internal, which does not. map_batches checked it at plan time.
    return ds.map_batches_internal(
        fn,
        batch_format="pyarrow",
        batch_size=batch_size,
        compute=compute,
        zero_copy_batch=True,
        **stage.compute.resources(),
    )


# Combining copies the rows: past this many bytes per chunk of a column, the copy costs more than the
# serializer's per-chunk work it saves (~30 us per chunk, ~0.1 ms per MB copied).
_MAX_BYTES_PER_CHUNK = 256 * 1024


def one_piece(table: pa.Table) -> pa.Table:
    """``table`` with each column in one chunk, where that is cheaper to ship than its chunks."""
    chunks = sum(column.num_chunks for column in table.columns)
    if chunks <= table.num_columns or table.nbytes > _MAX_BYTES_PER_CHUNK * chunks:
        return table
    if any(isinstance(kind, pa.ExtensionType) for kind in table.schema.types):
        return compat.combine_chunks(table)  # Ray's joins its extension (tensor) columns too
    return table.combine_chunks()  # ten times faster than Ray's, which goes column by column


def source_dataset(plan: Plan, client: Client) -> ray.data.Dataset:
    """The level-0 rows of ``plan`` with their lineage columns (excluded roots left out).

    A Ray Dataset source registers each block's ids with a coordinator as it reads them (a retried
    task registers the same block again); a flat plan's rows are tagged with their block instead.
    """
    match plan.source:
        case ItemsSource() as src:
            return _items_dataset(plan, src)
        case FilesSource() as src:
            from lineage_data._ray.datasource import FileDatasource

            files = [src.files[i] for i in plan.select(src.roots or ())]
            return ray.data.read_datasource(
                FileDatasource(src.reader, files, files_per_task=src.files_per_task)
            )
        case RaySource() as src:
            return _ray_dataset(plan, src, client)
        case MaterializedSource() as src:
            return _materialized_dataset(plan, src)
    raise ValueError(f"unknown source {plan.source!r}")


def _items_dataset(plan: Plan, src: ItemsSource) -> ray.data.Dataset:
    table = src.rows(plan.select(src.roots))
    per_block = physical_source.items_per_block(table.num_rows)
    tables = [table.slice(j, per_block) for j in range(0, table.num_rows, per_block)]
    # Not from_arrow: it asks a remote task per table for the metadata the driver has (0.27 s).
    return ray.data.from_blocks(tables or [C.empty()])


def source_block_rows(plan: Plan) -> int:
    """Rows in the smallest level-0 block, where known exactly before the run; 0 when not.

    A Ray Dataset held in memory tells from its block metadata, unless a block is over Ray's target
    block size (Ray may split it); a lazy read: 0.
    """
    return physical_source.source_block_rows(plan, _in_memory_block_rows)


def _in_memory_block_rows(ds: ray.data.Dataset) -> int:
    blocks = compat.in_memory_blocks(ds) or []
    limit = ds.context.target_max_block_size or 2**62
    rows = [meta.num_rows for meta in blocks]
    if not blocks or None in rows or any((m.size_bytes or 0) > limit for m in blocks):
        return 0
    return min(rows)


def _ray_dataset(plan: Plan, src: RaySource, client: Client) -> ray.data.Dataset:
    """The user's dataset with lineage columns; a flat plan's rows tagged, not registered."""
    registry = client.for_stage("from_ray") if isinstance(client, CoordinatorClient) else None
    id_column = src.id_column
    # The closure travels with every source task: it must not hold the user's Dataset (~200 KB).
    roots = Plan(src.stripped(), exclude=plan.exclude, only=plan.only)
    restricted = bool(plan.exclude) or plan.only is not None

    def inject_roots(batch: pa.Table) -> pa.Table:
        ids = content_ids(batch) if id_column is None else column_ids(batch, id_column)
        if not isinstance(ids, pa.Array):
            ids = pa.array(ids, pa.string())
        name = _block_name(ids)
        table = with_lineage(batch, ids)
        if registry is None:  # no call at all: the ledger compares the tags (see Ledger)
            table = table.append_column(C.BLOCK, pa.array(np.full(len(ids), _tag(name), np.int64)))
        else:
            registry.register_roots(ids, name)
        return table.filter(roots.kept(ids)) if restricted else table

    # Our settings and execution callbacks must not reach the user's dataset's (shared) DataContext.
    source = compat.deep_copy(src.dataset)
    source = source if plan.limit is None else source.limit(plan.limit)
    return source.map_batches(inject_roots, batch_format="pyarrow", batch_size=None)


def _block_name(ids: pa.StringArray) -> str:
    """A source block's name: the same when Ray runs its task again, another for any other block.

    The task's name and the ids' digest: blocks with the same ids from two tasks are duplicates.
    """
    task = compat.map_task_name()
    return (f"{task}:" if task is not None else "") + ids_digest(ids)


def _tag(name: str) -> int:
    """A block's name as a nonzero signed 64-bit integer (what the :data:`C.BLOCK` column holds)."""
    tag = int.from_bytes(
        hashlib.blake2b(name.encode(), digest_size=8).digest(), "little", signed=True
    )
    return tag or 1


def _materialized_dataset(plan: Plan, src: MaterializedSource) -> ray.data.Dataset:
    """The kept blocks: terminal rows as new roots (level 0), or an open level's rows as kept."""
    ds = ray.data.from_arrow_refs(list(src.refs))
    if not plan.exclude and plan.only is None and plan.limit is None:
        return (
            ds if src.level else ds.map_batches(C.as_roots, batch_format="pyarrow", batch_size=None)
        )
    known = list(src.roots or ())
    wanted = pa.array(sorted(known[i] for i in plan.select(known)), pa.string())
    level = src.level

    def keep_roots(batch: pa.Table) -> pa.Table:
        kept = batch.filter(pc.is_in(batch[C.ROOT], value_set=wanted))
        return kept if level else C.as_roots(kept)

    return ds.map_batches(keep_roots, batch_format="pyarrow", batch_size=None)


def lower(
    plan: Plan,
    client: Client,
    holder_sets: dict[int, Any],
    *,
    keep_parents: bool = False,
) -> ray.data.Dataset:
    """The whole plan as a lazy Ray Dataset; its last step also reports terminal rows.

    ``holder_sets``: each reduce stage's group holders, by index. ``keep_parents``: an open level's
    group headers keep their parent rows.
    """
    ds = source_dataset(plan, client)
    ds.context.raise_original_map_exception = True
    physical = physical_plan(
        plan, source_block_rows=source_block_rows(plan), keep_parents=keep_parents
    )
    shipped = plan.for_workers()  # stage closures must not carry the source rows to every task

    def worker_step(planned: Step) -> _Step:
        then = tuple(worker_step(folded) for folded in planned.then)
        return _Step(
            shipped,
            planned.index,
            client,
            planned.rows_per_block,
            holders=holder_sets.get(planned.index),
            terminal=planned.terminal,
            keep_parents=physical.keep_parents,
            then=then,
        )

    for planned in physical.steps:
        step = worker_step(planned)
        ds = lower_stage(ds, step, _Shipped(step), planned)
    if physical.steps:
        return ds
    end = TerminalOp(plan.level, keep_parents=keep_parents)

    def terminal(batch: pa.Table) -> pa.Table:
        return end(batch)

    return ds.map_batches(terminal, batch_format="pyarrow", batch_size=None)
