"""Lowering a lineage plan to a ``ray.data.Dataset``: one Ray Data map step per stage, no shuffle.

A reduce right after a 1:1 stage on a CPU actor pool runs in that stage's actors (see
:func:`folds_into`); every other stage is a step of its own.
"""

from __future__ import annotations

import hashlib
import inspect
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
from lineage_data._core.blocks import accelerated, batches_per_block, cuts_source_blocks
from lineage_data._core.blocks import rows_per_block as block_rows
from lineage_data._core.errors import WorkerCrashedError
from lineage_data._core.guard import born, set_concurrent
from lineage_data._core.ops import build_op
from lineage_data._core.plan import FilesSource, ItemsSource, MaterializedSource, Plan, RaySource
from lineage_data._core.source import column_ids, content_ids, ids_digest, with_lineage
from lineage_data._core.stages import AnyStage, Expand, Filter, MapBatches, MapRows, Reduce
from lineage_data._core.terminal import TerminalOp
from lineage_data._ray import compat

R = TypeVar("R")

# Lineage steps of their own (reduce; terminal when a plan has no stage) run as plain 1-CPU tasks: on a
# small machine fractional-CPU tasks start many more worker processes and were 5x slower here.
# from_items: at most this many source blocks (each is one ray.put on the driver), one row per block
# for small inputs, so a few heavy parents (PDFs) still expand in parallel.
MAX_SOURCE_BLOCKS = 64
# A stage's step up to this size (pickled) travels inside its operator's closure, a bigger one by
# reference (see _Shipped).
MAX_INLINE_STEP_BYTES = 64 * 1024


@dataclass(frozen=True)
class _Step:
    """What a worker needs to run one stage.

    For the last stage of a plan the terminal step is folded in: one Ray step fewer per block. ``then``:
    the reduces that run in this stage's actors, after it (:func:`folds_into`).
    """

    plan: Plan
    index: int
    client: Any
    rows_per_block: int
    holders: Any = None
    terminal: bool = False
    keep_parents: bool = False  # the terminal step keeps the headers' parent rows
    then: tuple[_Step, ...] = ()  # reduces folded into this step's actor (see folds_into)

    def build(self, fn: Any = None) -> Callable[[pa.Table], Any]:
        """The stage's operator; ``fn``: its 1:1 user callable, already built (see :meth:`bind`)."""
        stage = self.plan.stages[self.index]
        client = self.client.for_stage(stage.name)
        if fn is not None:
            op: Any = build_op(
                self.plan,
                self.index,
                client,
                rows_per_block=self.rows_per_block,
                watchdog=True,
                fn=fn,
            )
        else:
            op = _constructing(
                stage,
                client,
                lambda: build_op(
                    self.plan,
                    self.index,
                    client,
                    rows_per_block=self.rows_per_block,
                    holders=self.holders,
                    watchdog=True,
                ),
            )
        if self.then:
            return _chain([op, *(step.build() for step in self.then)])
        if not self.terminal:
            return op
        end = TerminalOp(self.plan.level, keep_parents=self.keep_parents)
        if isinstance(self.plan.stages[self.index], Expand):
            return lambda batch: (end(block) for block in op(batch))
        return lambda batch: end(op(batch))

    def born(self) -> None:
        """A life of this step's actor begins (a process start: Ray restarts a dead actor).

        Journaled per stage it runs (see :func:`lineage_data._core.guard.born`): an actor whose lives
        keep dying before they finish anything isolates its blocks, then fails its stage, typed.
        """
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

    A crash in a folded reduce also reads as a crash of the block the stage before it finished (its
    end is journaled with its next attempt, as usual). That costs no row its value: the retry runs
    the stage's block isolated, and its rows, never seen crashing alone, run again as one call
    (:meth:`Guard.batch <lineage_data._core.guard.Guard.batch>`), while the reduce's own journal
    pins the crash on its parent (tests/faults/test_fault_crashes.py).
    """

    def chained(batch: pa.Table) -> Any:
        for op in ops:
            batch = op(batch)
        return batch

    return chained


def folds_into(host: AnyStage, stage: AnyStage) -> bool:
    """True when ``stage``, a reduce, runs in the actors of ``host``, the stage right before it.

    Ray Data fuses a task step into the task step before it, never into an actor pool's: a reduce
    after a model on a CPU actor pool would be a step of its own, one more task per block with its
    launch, its input's trip through the object store, and its latency at the end of the run. On
    CPU-bound OCR the plan ran at the floor without its two reduces and 4 % over it with them as
    tasks; run in the recognizer's actors, they were 3 % faster than as tasks (bench/README,
    "Reduces in the model's actor"). So a reduce the user gave no compute of its own (a function or
    none: no strategy, no resources) runs in the actor of a 1:1 stage on CPUs, right after the
    actor's call. Not after an actor on GPUs or custom resources: the accelerator would wait while
    the reduce runs. The reduce keeps its own journal, policy and timeout; a timeout or a crash in
    it ends the actor, which Ray restarts (its model is built again).
    """
    if not isinstance(stage, Reduce) or not isinstance(host, MapBatches | MapRows | Filter):
        return False
    own = stage.compute
    if stage.call.is_class or own.describe() or own.ray_remote_args:
        return False
    return isinstance(compute_strategy(host), ActorPoolStrategy) and not accelerated(host.compute)


def _constructing(stage: AnyStage, client: Any, make: Callable[[], R]) -> R:
    """``make()``, which builds the stage's callable class: journaled, bounded when it crashes.

    A callable class is built in its actor: a constructor that kills its process every time would be
    restarted by Ray without end. Each attempt is journaled under the actor's id (the same across its
    restarts); past max_crash_retries the stage fails, typed.
    """
    journaled = stage.call.is_class and hasattr(client, "attempt")  # (a flat plan: no journal)
    actor = ray.get_runtime_context().get_actor_id() if journaled else None
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

    A small step (the usual one: the plan without its source, the user's function) travels by value:
    Ray Data sends each task its operator closure anyway, and an object reference inside it would make
    every task a borrower of the driver's object (a round of ownership messages per task: 0.5 s of CPU
    over 200 tiny tasks, measured). A big one (a function closing over a large table) lives in the
    object store once per pass and each worker fetches it once; actor constructor arguments stay small
    and inline either way (Ray warns about restartable actors whose arguments live in the object store).
    """

    def __init__(self, step: _Step) -> None:
        pickled = ray.cloudpickle.dumps(step)
        self.step: _Step | None = step if len(pickled) <= MAX_INLINE_STEP_BYTES else None
        self.ref = ray.put(step) if self.step is None else None
        stages = step.plan.stages
        self.name = "->".join(stages[s.index].name for s in (step, *step.then))
        self.key = (step.client.name, step.index)

    def get(self) -> _Step:
        if self.step is not None:
            return self.step
        assert self.ref is not None
        step: _Step = ray.get(self.ref)
        return step


def _actor_class(shipped: _Shipped, generator: bool, threads: int = 1) -> type:
    """A callable class holding one operator (built once per actor). Built here, not in a loop.

    ``threads`` > 1: Ray calls the actor from that many threads at once (several batches in flight);
    each thread gets an operator of its own, all sharing the one user callable built here.
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


def batches_in_flight(stage: AnyStage, compute: Any) -> int:
    """How many batches one actor of ``stage`` runs at once, by Ray Data's own rule.

    ``ActorPoolStrategy(max_concurrent_calls_per_actor=k)`` runs k calls of an actor at once when its
    ``__call__`` is a coroutine function, or when ``enable_true_multi_threading=True``; otherwise
    one at a time. Only a 1:1 stage (``map_batches``, ``map``, ``filter``) runs several at once here:
    an expansion or a reduce holds per-actor order, so it always runs one.
    """
    k = getattr(compute, "max_concurrent_calls_per_actor", None) or 1
    if k <= 1 or not isinstance(stage, MapBatches | MapRows | Filter):
        return 1
    call = inspect.getattr_static(stage.call.fn, "__call__", None) if stage.call.is_class else None
    is_async = inspect.iscoroutinefunction(call)
    return k if is_async or compute.enable_true_multi_threading else 1


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


# Operators of task-based steps, built once per worker process and pass (a task worker runs one task
# at a time): their caches (established column types, holder handles) outlive a single batch.
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
    if generator:

        def expand_task(batch: pa.Table) -> Any:
            yield from _op(shipped)(batch)

        fn: Any = expand_task
    else:

        def stage_task(batch: pa.Table) -> pa.Table:
            return _op(shipped)(batch)

        fn = stage_task
    fn.__name__ = fn.__qualname__ = shipped.name
    return fn


def compute_strategy(stage: AnyStage) -> Any:
    """The strategy Ray Data itself would choose for the user's ``fn`` and arguments.

    Ray's own rule (:func:`compat.compute_strategy`): ``compute`` as given, else
    ``concurrency`` (an int: tasks for a function, a fixed actor pool for a class; a tuple: an
    autoscaling pool), else tasks for a function and an autoscaling actor pool for a class.
    """
    call, compute = stage.call, stage.compute
    return compat.compute_strategy(
        call.fn if call.fn is not None else _no_fn,
        call.constructor_args or None,
        compute.strategy,
        compute.concurrency,
    )


def _no_fn(batch: Any) -> Any:  # a reduce without fn runs as a function does
    return batch


def lower_stage(
    ds: ray.data.Dataset, step: _Step, shipped: _Shipped, *, whole_blocks: bool = False
) -> Any:
    """Append one stage to ``ds``: the user's strategy and resources, our operator inside.

    ``whole_blocks``: the operator gets whole blocks and cuts the function's batches itself.
    """
    stage = step.plan.stages[step.index]
    generator = isinstance(stage, Expand)
    compute = compute_strategy(stage)
    actors = isinstance(compute, ActorPoolStrategy)
    if actors:
        threads = batches_in_flight(stage, compute)
        compute = _threaded(compute, threads)
        fn: Any = _actor_class(shipped, generator, threads)
    else:
        fn = _task_fn(shipped, generator)
    # A reduce takes whole blocks: each reduces the parents its block completes; partial groups
    # wait in the plan's hash-partitioned holder actors.
    batch_size = stage.batch_size if isinstance(stage, Expand | MapBatches) else None
    if isinstance(stage, MapBatches) and stage.level > 0 and batches_per_block(stage) > 1:
        whole_blocks = True  # one hand-off and commit per block
    if whole_blocks:
        batch_size = None  # the operator cuts the batches
    # Ray's public map_batches refuses GPUs without a batch size; Ray's own row verbs (map, filter,
    # flat_map) go through map_batches_internal, which does not. map_batches checked it at plan time.
    ds = ds.map_batches_internal(
        fn,
        batch_format="pyarrow",
        batch_size=batch_size,
        compute=compute,
        zero_copy_batch=True,
        **stage.compute.resources(),
    )
    if generator:
        # Ray merges a task's yielded batches into one block; this split is fused into the same task
        # (no shuffle) and keeps children in small blocks so one huge parent spreads over many workers.
        ds = ds.repartition(target_num_rows_per_block=step.rows_per_block)
    return ds


def in_one_piece(ds: ray.data.Dataset, stage: AnyStage) -> ray.data.Dataset:
    """``ds`` (whose last step runs ``stage``) with each output block's columns in one chunk each.

    Ray Data builds a task's output block from the batches it returned: every column is chunked once
    per batch, and Ray's Arrow serializer pays Python work per chunk of every column (~30 us each,
    measured). A block of five 1,024-row batches with the lineage columns took 2.0 ms to serialize,
    0.56 ms in one piece. The step is fused into the stage's own task (same strategy, same
    resources), so it adds no task and no copy through the object store. Steps Ray would not fuse (an
    actor pool; an expansion, whose blocks are re-cut after it) are left alone.
    """
    compute = compute_strategy(stage)
    if isinstance(compute, ActorPoolStrategy) or isinstance(stage, Expand):
        return ds
    return ds.map_batches_internal(
        one_piece,
        batch_format="pyarrow",
        batch_size=None,
        compute=compute,
        zero_copy_batch=True,
        **stage.compute.resources(),
    )


# Combining copies the rows: past this many bytes per chunk of a column, the copy costs more than the
# serializer's per-chunk work it saves (~30 us per chunk, ~0.1 ms per MB copied).
_MAX_BYTES_PER_CHUNK = 256 * 1024


def one_piece(table: pa.Table) -> pa.Table:
    """``table`` with each column in one chunk, where that is cheaper to ship than its chunks."""
    if not table.num_columns:
        return table
    chunks = sum(column.num_chunks for column in table.columns)
    if chunks <= table.num_columns or table.nbytes > _MAX_BYTES_PER_CHUNK * chunks:
        return table
    if any(isinstance(kind, pa.ExtensionType) for kind in table.schema.types):
        return compat.combine_chunks(table)  # Ray's joins its extension (tensor) columns too
    return table.combine_chunks()  # ten times faster than Ray's, which goes column by column


def source_dataset(plan: Plan, client: Any) -> ray.data.Dataset:
    """The level-0 rows of ``plan`` with their lineage columns (excluded roots left out).

    Sources that know their roots up front (items, files) need no registration: the driver expects
    them. A Ray Dataset source registers the ids of each block with ``client`` as it reads them,
    idempotently per block (a retried source task registers the same block again). A flat plan's
    client registers nothing (a :class:`~lineage_data._ray.typestore.TypeStore`): its rows are tagged
    with their block instead, and the consumer's ledger refuses duplicate ids.
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
            registry = client.for_stage("from_ray") if hasattr(client, "register_roots") else None
            return _ray_dataset(plan, src, registry)
        case MaterializedSource() as src:
            return _materialized_dataset(plan, src)
    raise ValueError(f"unknown source {plan.source!r}")


def _items_dataset(plan: Plan, src: ItemsSource) -> ray.data.Dataset:
    table = src.rows(plan.select(src.roots))  # from_items converted the rows, checked their roots
    per_block = _items_per_block(table.num_rows)
    tables = [table.slice(j, per_block) for j in range(0, table.num_rows, per_block)]
    # Not from_arrow: it asks a remote task per table for the metadata the driver has in hand (64
    # tasks, 0.27 s before the first row of every run; 0.9 s while the workers start, measured).
    return ray.data.from_blocks(tables or [C.empty()])


def _items_per_block(rows: int) -> int:
    return max(1, -(-rows // MAX_SOURCE_BLOCKS))


def source_block_rows(plan: Plan) -> int:
    """Rows in the smallest level-0 block, where known exactly before the run; 0 when not.

    Items: this module's own cut. A Ray Dataset held in memory (``from_items``, ``from_arrow``,
    a materialized one): the block metadata Ray keeps in its plan (nothing runs), unless a block is
    over Ray's target block size (Ray may split it as it passes) or the plan cuts its rows (a limit,
    a repair pass). A lazy read (its blocks are known only as they come), files, and the runs this
    library materializes (``MaterializedSource``): 0.
    """
    restricted = plan.exclude or plan.only is not None or plan.limit is not None
    match plan.source:
        case ItemsSource() as src:
            roots = src.roots or ()
            return _items_per_block(len(plan.select(roots)) if restricted else len(roots))
        case RaySource() as src if not restricted:
            return _in_memory_block_rows(src.dataset)
    return 0


def _in_memory_block_rows(ds: ray.data.Dataset) -> int:
    blocks = compat.in_memory_blocks(ds)  # None: another Ray version (a sizing hint only)
    if blocks is None:
        return 0
    limit = ds.context.target_max_block_size
    rows = [meta.num_rows for meta in blocks]
    if not blocks or None in rows or any((m.size_bytes or 0) > (limit or 2**62) for m in blocks):
        return 0
    return min(rows)


def _ray_dataset(plan: Plan, src: RaySource, client: Any) -> ray.data.Dataset:
    """The user's dataset with lineage columns; ``client`` None: tagged, not registered (flat plan)."""
    id_column = src.id_column
    # The closure travels with every source task: it must not hold the plan, whose source is the
    # user's Dataset (its block refs and schemas: ~200 KB and 10 ms to unpickle per task, measured).
    roots = Plan(src.stripped(), exclude=plan.exclude, only=plan.only)
    restricted = bool(plan.exclude) or plan.only is not None

    def inject_roots(batch: pa.Table) -> pa.Table:
        ids = content_ids(batch) if id_column is None else column_ids(batch, id_column)
        if not isinstance(ids, pa.Array):
            ids = pa.array(ids, pa.string())
        name = _block_name(ids)
        table = with_lineage(batch, ids)
        if client is None:  # no call at all: the ledger compares the tags (see Ledger)
            table = table.append_column(C.BLOCK, pa.array(np.full(len(ids), _tag(name), np.int64)))
        else:
            client.register_roots(ids, name)
        return table.filter(roots.kept(ids)) if restricted else table

    # Datasets derived from the user's share its DataContext: ours gets a copy, so the settings and
    # execution callbacks the run puts on it never reach the user's own dataset.
    source = compat.deep_copy(src.dataset)
    source = source if plan.limit is None else source.limit(plan.limit)
    return source.map_batches(inject_roots, batch_format="pyarrow", batch_size=None)


def _block_name(ids: pa.StringArray) -> str:
    """A source block's name: the same when Ray runs its task again, another for any other block.

    The task's index in its operator (Ray passes the same context to a retried task) and the ids'
    digest: two blocks with the same ids are duplicates when they come from different tasks (two
    such blocks of one task cannot be told from a re-run of it).
    """
    task = compat.map_task_name()  # None where Ray moved it: the digest alone
    return (f"{task}:" if task is not None else "") + ids_digest(ids)


def _tag(name: str) -> int:
    """A block's name as a nonzero signed 64-bit integer (what the :data:`C.BLOCK` column holds)."""
    tag = int.from_bytes(
        hashlib.blake2b(name.encode(), digest_size=8).digest(), "little", signed=True
    )
    return tag or 1


def _materialized_dataset(plan: Plan, src: MaterializedSource) -> ray.data.Dataset:
    """The kept blocks: terminal rows as new roots (level 0), or the rows of an open level as kept."""
    ds = ray.data.from_arrow_refs(list(src.refs))
    restricted = plan.exclude or plan.only is not None or plan.limit is not None
    if not restricted and not src.level:
        return ds.map_batches(C.as_roots, batch_format="pyarrow", batch_size=None)
    if not restricted:
        return ds
    known = list(src.roots or ())
    wanted = pa.array(sorted(known[i] for i in plan.select(known)), pa.string())
    level = src.level

    def keep_roots(batch: pa.Table) -> pa.Table:
        kept = batch.filter(pc.is_in(batch[C.ROOT], value_set=wanted))
        return kept if level else C.as_roots(kept)

    return ds.map_batches(keep_roots, batch_format="pyarrow", batch_size=None)


def lower(
    plan: Plan,
    client: Any,
    holder_sets: dict[int, Any],
    *,
    rows_per_block: int | None = None,
    keep_parents: bool = False,
) -> ray.data.Dataset:
    """The whole plan as a lazy Ray Dataset; its last step also reports terminal rows.

    ``holder_sets`` maps the index of every reduce stage to its group holders. Stages a materialized
    source's rows have been through already (``plan.done``) are not run again. ``keep_parents``: an
    open level's group headers keep their parent rows (a run materialized to be continued).
    """
    ds = source_dataset(plan, client)
    ds.context.raise_original_map_exception = True
    shipped = plan.for_workers()  # stage closures must not carry the source rows to every task
    last = len(plan.stages) - 1
    sourced = source_block_rows(plan)

    def step(index: int, then: tuple[_Step, ...] = ()) -> _Step:
        rows = rows_per_block or block_rows(plan, index)  # one downstream batch (see _core.blocks)
        terminal = index == last and not then
        return _Step(
            shipped, index, client, rows, holder_sets.get(index), terminal, keep_parents, then
        )

    index = plan.done
    host = None
    while index < len(plan.stages):
        host = plan.stages[index]
        folded = index + 1
        while folded <= last and folds_into(host, plan.stages[folded]):
            folded += 1
        lowered = step(index, tuple(step(i) for i in range(index + 1, folded)))
        whole = cuts_source_blocks(plan, index, sourced)
        ds = lower_stage(ds, lowered, _Shipped(lowered), whole_blocks=whole)
        index = folded
    if host is not None:
        return in_one_piece(ds, host)
    end = TerminalOp(plan.level, keep_parents=keep_parents)

    def terminal(batch: pa.Table) -> pa.Table:
        return end(batch)

    return ds.map_batches(terminal, batch_format="pyarrow", batch_size=None)
