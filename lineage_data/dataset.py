"""The public facade: :class:`LineageDataset`, an immutable lineage plan with Ray Data's verbs.

Stage verbs take Ray Data 2.60's arguments with Ray's meaning and defaults (``compute=``,
``concurrency=``, ``batch_format``, ``fn_args``/``fn_kwargs``, ``fn_constructor_args``/
``fn_constructor_kwargs``, ``num_cpus``/``num_gpus``/``memory`` and Ray's named remote arguments);
consumers take Ray's consumer arguments. What differs is written in each docstring: a row is a root's
row or a child's row, and every source root ends as exactly one output row at level 0.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Unpack

from lineage_data._core import columns as C
from lineage_data._core.batching import rebatch
from lineage_data._core.errors import LineageError, PlanError
from lineage_data._core.guard import DEFAULT_MAX_CRASH_RETRIES
from lineage_data._core.ledger import view
from lineage_data._core.physical import physical_plan
from lineage_data._core.physical import source_blocks as physical_source
from lineage_data._core.plan import MaterializedSource, Plan, RaySource
from lineage_data._core.rolling import RollingPolicy
from lineage_data._core.stages import (
    BATCH_FORMATS,
    DEFAULT_BATCH_FORMAT,
    AnyStage,
    BatchFormat,
    Expand,
    Filter,
    MapBatches,
    MapRows,
    OnChildFailure,
    OnError,
    RayOptions,
    Reduce,
    from_options,
)
from lineage_data._core.udf import to_format
from lineage_data._ray.column_verbs import Columns, Predicate, Rename, WithColumn
from lineage_data.report import RunReport

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa
    import ray.data

# Ray Data's consumer defaults (ray.data.Dataset.iter_batches / take / take_batch / show).
DEFAULT_BATCH_SIZE = 256
DEFAULT_TAKE = 20


@dataclass(frozen=True)
class _Kept:
    """The output of a materialized run: blocks in the Ray object store and the run's report.

    At an open level the blocks hold group headers too (the plan goes on from them), and the rows of
    roots that left no row at that level are kept apart (``stand_ins``): a consumer reads
    :func:`~lineage_data._core.ledger.view` of each block, then those.
    """

    refs: tuple[Any, ...]
    report: RunReport
    level: int = 0
    stand_ins: tuple[Any, ...] = ()

    def tables(self) -> Iterator[pa.Table]:
        """The kept output as a consumer of the run saw it (all columns, lineage included)."""
        import ray

        for ref in self.refs:
            table = ray.get(ref)
            yield view(table) if self.level else table
        for ref in self.stand_ins:
            yield ray.get(ref)

    def dataset(self) -> ray.data.Dataset:
        """The same as a Ray Dataset (already accounted: no lineage run)."""
        import ray

        refs: list[Any] = list(self.refs) or [ray.put(C.empty())]
        ds: Any = ray.data.from_arrow_refs(refs)
        if self.level:
            ds = ds.map_batches(view, batch_format="pyarrow", batch_size=None)
            if self.stand_ins:
                ds = ds.union(ray.data.from_arrow_refs(list(self.stand_ins)))
        return ds


class LineageDataset:
    """A lineage plan over one source. Every verb returns a new dataset; nothing runs until consumed.

    Example:
        >>> import lineage_data as ld
        >>> ds = ld.from_items([{"doc": "a", "n": 2}], id_column="doc")
        >>> pages = ds.expand_lineage(lambda row: ({"page": i} for i in range(row["n"])), name="pages")
        >>> print(pages.reduce_lineage(name="docs").explain())
        source items (id_column='doc') -> level 0
          [0] expand 'pages': level 0 -> 1
          [1] reduce 'docs': level 1 -> 0, on_child_failure=fail
        physical plan: the Ray Data steps after the source
          1. [0] expand 'pages': tasks; whole blocks; children in blocks of 1024 rows
          2. [1] reduce 'docs': tasks; whole blocks; reports the terminal rows; output blocks in one piece
    """

    __slots__ = ("_kept", "_last_run", "_plan")

    def __init__(self, plan: Plan, *, kept: _Kept | None = None) -> None:
        self._plan = plan
        self._last_run: RunReport | None = kept.report if kept is not None else None
        self._kept = kept

    @property
    def plan(self) -> Plan:
        """The immutable plan this dataset stands for."""
        return self._plan

    @property
    def level(self) -> int:
        """The level of the rows this dataset yields (0 = source rows)."""
        return self._plan.level

    def _then(
        self, cls: type[AnyStage], fn: Any, name: str | None, ray: Mapping[str, Any], **own: Any
    ) -> LineageDataset:
        if "timeout_s" in own:
            own["timeout_s"] = _timeout(fn, own["timeout_s"])
        call, compute = from_options(fn, ray)
        stage = cls(
            name=name or self._plan.unique_name(fn, cls.kind),
            level=self._plan.level,
            call=call,
            compute=compute,
            **own,
        )
        return LineageDataset(self._plan.then(stage))

    # -- stages ---------------------------------------------------------------------------------
    # Every stage verb also takes Ray Data's arguments (RayOptions: compute, concurrency, fn_args,
    # fn_kwargs, fn_constructor_args, fn_constructor_kwargs, num_cpus, num_gpus, memory and Ray's
    # other remote arguments), with Ray's meaning and defaults. And two of ours for inputs that
    # crash or hang the process under a stage (see lineage_data._core.guard): ``max_crash_retries``
    # (a block whose worker died is isolated; a row, parent or group that has killed its worker
    # max_crash_retries + 1 times, at least once alone, ends FAILED with WorkerCrashedError) and
    # ``timeout_s`` (a call of the function
    # on one batch, row or group, or the wait for an expansion's next child, that takes longer ends
    # its process; the input fails with TimeoutError; on Ray only). ``timeout_s=None`` takes the
    # function's own ``default_timeout_s`` where it has one (the connectors' PDF and video
    # functions do), ``math.inf`` none at all.
    def expand_lineage(
        self,
        fn: Callable[..., Iterable[dict]] | type,
        *,
        name: str | None = None,
        carry: Sequence[str] | None = None,
        batch_size: int | None = None,
        on_error: OnError = "isolate",
        timeout_s: float | None = None,
        max_crash_retries: int = DEFAULT_MAX_CRASH_RETRIES,
        **options: Unpack[RayOptions],
    ) -> LineageDataset:
        """Open a level: ``fn(row, *fn_args, **fn_kwargs) -> Iterable[dict]`` gives a row's children.

        Like Ray's ``flat_map``, with order and a parent kept: children are numbered in the order ``fn``
        yields them. ``carry`` names parent columns copied to every child and given back to the
        parent at reduce. Binary parent columns (file bytes) are released after expansion unless
        carried. A raising ``fn`` makes the parent FAILED (``on_error="raise"`` stops the run
        instead); zero children make an empty group, not a lost parent. ``compute``/``concurrency``
        and the resource arguments mean what they mean for Ray's ``flat_map``.
        """
        return self._then(
            Expand,
            fn,
            name,
            options,
            carry=tuple(carry or ()),
            batch_size=batch_size,
            on_error=on_error,
            timeout_s=timeout_s,
            max_crash_retries=max_crash_retries,
        )

    def map_batches(
        self,
        fn: Callable[..., Any] | type,
        *,
        name: str | None = None,
        batch_size: int | None = None,
        batch_format: BatchFormat = DEFAULT_BATCH_FORMAT,
        on_error: OnError = "isolate",
        max_retries: int = 1,
        timeout_s: float | None = None,
        max_crash_retries: int = DEFAULT_MAX_CRASH_RETRIES,
        **options: Unpack[RayOptions],
    ) -> LineageDataset:
        """A 1:1 batch stage, as Ray's ``map_batches``; ``fn`` sees the user columns of PRESENT rows.

        Arguments mean what they mean in Ray Data 2.60: no ``compute`` runs a function as tasks and a
        callable class on an autoscaling actor pool; ``batch_format="default"`` is a dict of numpy
        arrays; ``batch_size=None`` takes whole blocks (give one when asking for GPUs). Batches mix
        rows of many parents. A row's output value may be :class:`~lineage_data.RecordFailure` or
        :class:`~lineage_data.GroupFailure`; a different number of output rows is a
        :class:`~lineage_data.ContractError`. Under ``on_error="isolate"`` a batch that raises is
        retried ``max_retries`` times, then halved until the rows that raise fail alone.
        """
        if options.get("num_gpus") and batch_size is None:
            raise PlanError(
                "map_batches: give batch_size when asking for GPUs (as Ray Data requires); the best "
                "size depends on the model, the data and the GPU"
            )
        return self._then(
            MapBatches,
            fn,
            name,
            options,
            batch_size=batch_size,
            batch_format=batch_format,
            on_error=on_error,
            max_retries=max_retries,
            timeout_s=timeout_s,
            max_crash_retries=max_crash_retries,
        )

    def map(
        self,
        fn: Callable[[dict], dict] | type,
        *,
        name: str | None = None,
        on_error: OnError = "isolate",
        timeout_s: float | None = None,
        max_crash_retries: int = DEFAULT_MAX_CRASH_RETRIES,
        **options: Unpack[RayOptions],
    ) -> LineageDataset:
        """A 1:1 row stage, as Ray's ``map``: ``fn(row) -> dict`` (or a failure value).

        Same rules as :meth:`map_batches`; a row that raises fails alone under ``on_error="isolate"``.
        """
        return self._then(
            MapRows,
            fn,
            name,
            options,
            on_error=on_error,
            timeout_s=timeout_s,
            max_crash_retries=max_crash_retries,
        )

    def filter(
        self,
        fn: Callable[[dict], bool] | type | None = None,
        expr: Any = None,
        *,
        name: str | None = None,
        on_error: OnError = "isolate",
        timeout_s: float | None = None,
        max_crash_retries: int = DEFAULT_MAX_CRASH_RETRIES,
        **options: Unpack[RayOptions],
    ) -> LineageDataset:
        """Keep rows where ``fn(row)`` is true, or where the Ray expression ``expr`` holds.

        As Ray's ``filter``: give exactly one of ``fn`` and ``expr`` (a ``ray.data.expressions``
        predicate such as ``col("pages") > 3``; Ray's deprecated string form is not taken). Unlike
        Ray, a row filtered out is not gone: it becomes a DROPPED row (a tombstone) so that every
        root still ends as one row and the counts stay exact; ``keep_lineage=False`` consumers and
        :meth:`iter_torch_batches` leave it out.
        """
        if (fn is None) == (expr is None):
            raise PlanError("filter: give exactly one of fn and expr")
        if expr is not None:
            if not type(expr).__module__.startswith("ray.data"):
                raise PlanError(
                    f"filter: expr must be a ray.data.expressions predicate, got {type(expr).__name__}"
                )
            if any(k.startswith("fn_") for k in options):
                raise PlanError("filter: fn_args/fn_kwargs/fn_constructor_* need fn, not expr")
            fn = Predicate(expr)
        return self._then(
            Filter,
            fn,
            name,
            options,
            on_error=on_error,
            timeout_s=timeout_s,
            max_crash_retries=max_crash_retries,
        )

    def reduce_lineage(
        self,
        fn: Callable[..., dict] | type | None = None,
        *,
        name: str | None = None,
        on_child_failure: OnChildFailure = "fail",
        on_error: OnError = "isolate",
        timeout_s: float | None = None,
        max_crash_retries: int = DEFAULT_MAX_CRASH_RETRIES,
        **options: Unpack[RayOptions],
    ) -> LineageDataset:
        """Close a level: ``fn(parent, children, *fn_args, **fn_kwargs) -> dict``, children in order.

        ``fn`` may be a callable class, built once per actor with ``fn_constructor_args``/
        ``fn_constructor_kwargs`` (a tokenizer, a model); ``compute`` and the resource arguments mean
        what they mean for :meth:`map_batches`. DROPPED children are left out. Any FAILED/SUPPRESSED
        child makes the parent SUPPRESSED with the first cause; ``on_child_failure="skip"`` reduces
        the rest and lists the missing ordinals in ``_lineage_missing``. A raising ``fn`` fails that
        parent (``on_error="raise"`` stops the run). Without ``fn`` every child column becomes an
        ordered list column. Each parent is emitted the moment its own children are all in: no
        groupby, no barrier. Given no ``compute`` or resources, a reduce right after a stage on a
        CPU actor pool runs in that pool's actors (after a GPU stage, as tasks of its own; see the
        cluster guide, "Resources").
        """
        return self._then(
            Reduce,
            fn,
            name,
            options,
            on_child_failure=on_child_failure,
            on_error=on_error,
            timeout_s=timeout_s,
            max_crash_retries=max_crash_retries,
        )

    # -- column verbs (1:1 stages that keep the lineage columns) --------------------------------
    def select_columns(self, cols: str | Sequence[str], **ray_remote_args: Any) -> LineageDataset:
        """Keep only these user columns (the lineage columns stay). An unknown column raises."""
        names = [cols] if isinstance(cols, str) else list(cols)
        self._check_known(names, "select_columns")
        return self._column_stage("select_columns", Columns(names, keep=True), ray_remote_args)

    def drop_columns(self, cols: str | Sequence[str], **ray_remote_args: Any) -> LineageDataset:
        """Drop these user columns (the lineage columns stay). An unknown column raises."""
        names = [cols] if isinstance(cols, str) else list(cols)
        self._check_known(names, "drop_columns")
        return self._column_stage("drop_columns", Columns(names, keep=False), ray_remote_args)

    def rename_columns(
        self, names: Mapping[str, str] | Sequence[str], **ray_remote_args: Any
    ) -> LineageDataset:
        """Rename user columns: a mapping old -> new, or the full list of new names in order."""
        if isinstance(names, Mapping):
            self._check_known(list(names), "rename_columns")
            bad = [n for n in names.values() if C.is_reserved(str(n))]
        else:
            bad = [n for n in names if C.is_reserved(str(n))]
        if bad:
            raise PlanError(f"rename_columns: {bad} use the reserved prefix {C.PREFIX!r}")
        return self._column_stage("rename_columns", Rename(names), ray_remote_args)

    def with_column(self, column_name: str, expr: Any, **ray_remote_args: Any) -> LineageDataset:
        """Add or replace a user column from a Ray Data expression (``ray.data.expressions``).

        ``expr`` may also be a function of the batch (an Arrow table) returning the column's values.
        """
        if C.is_reserved(column_name):
            raise PlanError(f"with_column: {column_name!r} uses the reserved prefix {C.PREFIX!r}")
        if not callable(expr) and not type(expr).__module__.startswith("ray.data"):
            raise PlanError(
                f"with_column: expr must be a ray.data.expressions expression or a function of the "
                f"batch, got {type(expr).__name__}"
            )
        return self._column_stage("with_column", WithColumn(column_name, expr), ray_remote_args)

    def _column_stage(
        self, kind: str, fn: Any, ray_remote_args: Mapping[str, Any]
    ) -> LineageDataset:
        # A column verb is a batch stage over Arrow batches that raises on a wrong column name
        # (a typo must stop the run, not fail every row one by one).
        return self._then(
            MapBatches,
            fn,
            self._plan.unique_name(None, kind),
            ray_remote_args,
            batch_format="pyarrow",
            on_error="raise",
            max_retries=0,
        )

    def _check_known(self, names: list[str], verb: str) -> None:
        known = self._plan.columns
        missing = [n for n in names if known is not None and n not in known]
        if missing:
            raise PlanError(
                f"{verb}: column(s) {missing} are not in the rows (columns: {sorted(known or ())})"
            )

    # -- plan options -----------------------------------------------------------------------------
    def limit(self, limit: int) -> LineageDataset:
        """Only the first ``limit`` source roots, run lazily (Ray's ``limit``, counted in roots).

        At level 0 that is ``limit`` output rows; at an open level, every row of those roots. Only
        those roots run: the run stops early, its helpers are gone when the consumer returns.
        """
        if not isinstance(limit, int) or limit < 0:
            raise PlanError(f"limit must be an int >= 0, got {limit!r}")
        if self._kept is not None and self.level:
            raise PlanError(
                "limit/take: this dataset was materialized at an open level; read it "
                "whole (iter_batches, take_all) or materialize a closed plan"
            )
        current = self._plan.limit
        return LineageDataset(
            replace(self._plan, limit=limit if current is None else min(current, limit))
        )

    def with_options(self, *, max_repair_attempts: int | None = None) -> LineageDataset:
        """This dataset with execution options.

        Args:
            max_repair_attempts: Repair passes after a fault (default 2): roots that did not reach the
                consumer are run again, alone; those still missing end FAILED with a ``LostError``
                cause. 0 turns repair off (lost roots fail at once).
        """
        plan = self._plan
        if max_repair_attempts is not None:
            if max_repair_attempts < 0:
                raise PlanError(f"max_repair_attempts must be >= 0, got {max_repair_attempts}")
            plan = replace(plan, max_repair_attempts=max_repair_attempts)
        return LineageDataset(plan, kept=self._kept if plan == self._plan else None)

    def exclude_roots(self, roots: Iterable[str]) -> LineageDataset:
        """This dataset without the given source roots (used to resume a run); they are not expected."""
        return LineageDataset(
            replace(self._plan, exclude=self._plan.exclude | frozenset(map(str, roots)))
        )

    # -- inspection -----------------------------------------------------------------------------
    def explain(self) -> str:
        """The lineage plan as text: levels, stages, carried columns; then its Ray Data steps.

        The steps are the physical plan the run lowers (:mod:`lineage_data._core.physical`): what
        runs each stage, which reduces run in the actors before them, who cuts the batches. Needs
        no Ray (but for a ``from_ray`` source, whose blocks Ray's plan knows).
        """
        plan = self._plan
        if isinstance(plan.source, RaySource):  # Ray is loaded: the source is a Ray Dataset
            from lineage_data._ray.lower import source_block_rows

            rows = source_block_rows(plan)
        else:
            rows = physical_source.source_block_rows(plan)
        return plan.explain() + "\n" + physical_plan(plan, source_block_rows=rows).explain()

    def __repr__(self) -> str:
        names = ", ".join(f"{s.kind.value}:{s.name}" for s in self._plan.stages)
        return (
            f"LineageDataset(source={self._plan.source.kind}, stages=[{names}], level={self.level})"
        )

    def report(self) -> RunReport:
        """The report of this dataset's last execution (every consumer leaves one)."""
        if self._last_run is None:
            raise LineageError(
                "this dataset has not been executed yet: consume it first (take_all, write_...)"
            )
        return self._last_run

    def stats(self) -> str:
        """The last execution's report as text (Ray's ``stats()``: what ran, what it produced)."""
        return self.report().summary()

    def schema(self) -> pa.Schema:
        """The output schema: user columns and the public lineage columns.

        Like Ray's ``schema()`` this may run part of the plan: the rows of the first root (or none
        when the plan's output is already known).
        """
        if self._kept is not None:
            table = next(self._kept.tables(), None)
            if table is not None:
                return C.public(table).schema
        return self.limit(1).to_arrow().schema

    def columns(self) -> list[str]:
        """The output column names (see :meth:`schema`)."""
        return list(self.schema().names)

    # -- execution ------------------------------------------------------------------------------
    def _execution(self) -> Any:
        from lineage_data._ray.execute import Execution

        return Execution(self._plan, on_report=self._set_report)

    def _set_report(self, report: RunReport) -> None:
        self._last_run = report

    def _tables(
        self, *, prefetch_batches: int = 1, keep_lineage: bool = True
    ) -> Iterator[pa.Table]:
        """Accounted output blocks as a user sees them. Nothing starts before the first ``next``."""
        if self._kept is not None:
            for table in self._kept.tables():
                yield C.public(table, keep_lineage=keep_lineage)
            return
        execution = self._execution()
        for table in execution.iter_tables(prefetch_batches=prefetch_batches):
            yield C.public(table, keep_lineage=keep_lineage)

    def iter_batches(
        self,
        *,
        prefetch_batches: int = 1,
        batch_size: int | None = DEFAULT_BATCH_SIZE,
        batch_format: BatchFormat = DEFAULT_BATCH_FORMAT,
        drop_last: bool = False,
        local_shuffle_buffer_size: int | None = None,
        local_shuffle_seed: int | None = None,
        keep_lineage: bool = True,
    ) -> Iterator[Any]:
        """Stream output batches as parents commit (Ray's ``iter_batches`` arguments and defaults).

        Each row carries the public lineage columns (``_lineage_root``, ``_lineage_outcome``,
        ``_lineage_cause``); ``keep_lineage=False`` yields committed rows' user columns only. The
        run is checked when the stream ends; abandoning the iterator stops the run and its helpers.
        ``drop_last`` drops a last short batch (its rows were delivered, and are in the report).
        """
        _check_format(batch_format)
        tables = self._tables(prefetch_batches=prefetch_batches, keep_lineage=keep_lineage)
        for batch in rebatch(
            tables,
            batch_size=batch_size,
            drop_last=drop_last,
            local_shuffle_buffer_size=local_shuffle_buffer_size,
            local_shuffle_seed=local_shuffle_seed,
        ):
            yield to_format(batch, batch_format)

    def iter_rows(self, *, prefetch_batches: int = 1, keep_lineage: bool = True) -> Iterator[dict]:
        """Stream output rows as parents commit; the run is checked when the stream ends."""
        for table in self._tables(prefetch_batches=prefetch_batches, keep_lineage=keep_lineage):
            yield from table.to_pylist()

    def iter_torch_batches(
        self,
        *,
        prefetch_batches: int = 1,
        batch_size: int | None = DEFAULT_BATCH_SIZE,
        dtypes: Any = None,
        device: str = "auto",
        collate_fn: Callable[[dict[str, Any]], Any] | None = None,
        drop_last: bool = False,
        local_shuffle_buffer_size: int | None = None,
        local_shuffle_seed: int | None = None,
    ) -> Iterator[Any]:
        """Batches of torch tensors (Ray's ``iter_torch_batches``) for training.

        Training reads values: only committed rows, user columns only (the lineage columns are text);
        failed and dropped roots are in :meth:`report`. ``collate_fn`` gets a dict of numpy arrays.
        """
        import torch

        target = ("cuda" if torch.cuda.is_available() else "cpu") if device == "auto" else device
        for batch in self.iter_batches(
            prefetch_batches=prefetch_batches,
            batch_size=batch_size,
            batch_format="numpy",
            drop_last=drop_last,
            local_shuffle_buffer_size=local_shuffle_buffer_size,
            local_shuffle_seed=local_shuffle_seed,
            keep_lineage=False,
        ):
            if collate_fn is not None:
                yield collate_fn(batch)
                continue
            out = {}
            for column, values in batch.items():
                dtype = dtypes.get(column) if isinstance(dtypes, Mapping) else dtypes
                out[column] = torch.as_tensor(values, dtype=dtype, device=target)
            yield out

    def take(self, limit: int = DEFAULT_TAKE, *, keep_lineage: bool = True) -> list[dict]:
        """The rows of the first ``limit`` roots (:meth:`limit`); only those roots run."""
        limited = self.limit(limit)
        try:
            return limited.take_all(keep_lineage=keep_lineage)
        finally:
            self._last_run = limited._last_run

    def take_batch(
        self,
        batch_size: int = DEFAULT_TAKE,
        *,
        batch_format: BatchFormat = DEFAULT_BATCH_FORMAT,
        keep_lineage: bool = True,
    ) -> Any:
        """The rows of the first ``batch_size`` roots as one batch; only those roots run."""
        _check_format(batch_format)
        limited = self.limit(batch_size)
        try:
            return to_format(limited.to_arrow(keep_lineage=keep_lineage), batch_format)
        finally:
            self._last_run = limited._last_run

    def take_all(self, limit: int | None = None, *, keep_lineage: bool = True) -> list[dict]:
        """Every output row (one per source root for a closed plan).

        As in Ray, ``limit`` is a guard: more rows than that raise ``ValueError``.
        """
        rows = list(self.iter_rows(keep_lineage=keep_lineage))
        if limit is not None and len(rows) > limit:
            raise ValueError(f"the dataset has more than the given limit of {limit} rows")
        return rows

    def show(self, limit: int = DEFAULT_TAKE, *, keep_lineage: bool = True) -> None:
        """Print the rows of the first ``limit`` roots."""
        for row in self.take(limit, keep_lineage=keep_lineage):
            print(row)

    def to_arrow(self, *, keep_lineage: bool = True) -> pa.Table:
        """Every output row as one Arrow table."""
        import pyarrow as pa

        tables = [t for t in self._tables(keep_lineage=keep_lineage) if t.num_rows]
        if not tables:
            return pa.table({}) if not keep_lineage else C.public(C.empty())
        return pa.concat_tables(tables, promote_options="permissive")

    def to_pandas(self, limit: int | None = None, *, keep_lineage: bool = True) -> pd.DataFrame:
        """Every output row as a pandas DataFrame; as in Ray, more than ``limit`` rows raise."""
        table = self.to_arrow(keep_lineage=keep_lineage)
        if limit is not None and table.num_rows > limit:
            raise ValueError(
                f"the dataset has more than the given limit of {limit} rows: {table.num_rows}"
            )
        return table.to_pandas()

    def count(self) -> int:
        """The number of output rows (one per root for a closed plan)."""
        return sum(t.num_rows for t in self._tables())

    def materialize(self) -> LineageDataset:
        """Run once and keep the output in the Ray object store.

        Returns a lineage dataset that every consumer reads again without re-running (its
        :meth:`report` is this run's), and that can be continued with more stages. A closed plan's
        rows are the new source (failed roots stay failed). At an open level the plan goes on where
        it was: ``expand -> map_batches(model) -> materialize()`` can then be reduced, filtered or
        mapped further, as often as wanted, without running the model again; the outcomes and the
        report are those of the whole plan run at once.

        Example:
            >>> import lineage_data as ld
            >>> docs = ld.from_items([{"doc": "a", "n": 2}, {"doc": "b", "n": 1}], id_column="doc")
            >>> pages = docs.expand_lineage(lambda d: ({"page": i} for i in range(d["n"])))
            >>> kept = pages.map(lambda p: {"score": p["page"] * 10}).materialize()
            >>> total = kept.reduce_lineage(lambda d, ps: {"total": sum(p["score"] for p in ps)})
            >>> sorted((r["_lineage_root"], r["total"]) for r in total.take_all())
            [('a', 10), ('b', 0)]
        """
        if self._kept is not None:
            return self
        if self.level:
            return self._materialize_open()
        import ray

        refs = tuple(
            ray.put(t) for t in self._execution().iter_tables(prefetch_batches=1) if t.num_rows
        )
        report = self.report()
        source = MaterializedSource(
            refs=refs, id_column=C.ROOT, roots=self._delivered(report), columns=None
        )
        return LineageDataset(
            Plan(source, max_repair_attempts=self._plan.max_repair_attempts),
            kept=_Kept(refs, report),
        )

    def _materialize_open(self) -> LineageDataset:
        """:meth:`materialize` at an open level: every row kept, headers and parent rows included."""
        import ray

        from lineage_data._ray.execute import Execution

        execution = Execution(self._plan, on_report=self._set_report, keep_parents=True)
        refs, stand_ins = [], []
        for rows, extra in execution.iter_kept():
            if rows.num_rows:
                refs.append(ray.put(rows))
            if extra.num_rows:
                stand_ins.append(ray.put(extra))
        report = self.report()
        plan = self._plan
        source = MaterializedSource(
            refs=tuple(refs),
            id_column=C.ROOT,
            level=self.level,
            roots=self._delivered(report),
            done=len(plan.stages),
            counts=tuple(
                (stage, tuple(sorted(c.items()))) for stage, c in report.stage_counts().items()
            ),
            established=tuple(
                (stage, tuple(names)) for stage, names in sorted(execution.columns().items())
            ),
        )
        continued = Plan(source, plan.stages, max_repair_attempts=plan.max_repair_attempts)
        kept = _Kept(tuple(refs), report, level=self.level, stand_ins=tuple(stand_ins))
        return LineageDataset(continued, kept=kept)

    def _delivered(self, report: RunReport) -> tuple[str, ...]:
        """The roots a run delivered, in source order where the source names its roots.

        (So that ``take(n)`` of a materialized run picks the same ``n`` roots as of the plan.)
        """
        roots = tuple(report.parents["root"].to_list())
        named = self._plan.source.roots
        if named is None:
            return roots
        delivered = set(roots)
        return tuple(r for r in named if r in delivered)

    def write_parquet(self, path: str, *, keep_lineage: bool = True, **kwargs: Any) -> None:
        """Write with Ray Data's ``write_parquet`` (same arguments); the run is checked afterwards."""
        self._write(lambda ds: ds.write_parquet(path, **kwargs), keep_lineage)

    def write_json(self, path: str, *, keep_lineage: bool = True, **kwargs: Any) -> None:
        """Write with Ray Data's ``write_json`` (same arguments); the run is checked afterwards."""
        self._write(lambda ds: ds.write_json(path, **kwargs), keep_lineage)

    def write_csv(self, path: str, *, keep_lineage: bool = True, **kwargs: Any) -> None:
        """Write with Ray Data's ``write_csv`` (same arguments); the run is checked afterwards."""
        self._write(lambda ds: ds.write_csv(path, **kwargs), keep_lineage)

    def write_datasink(
        self,
        datasink: Any,
        *,
        rows_per_write: int | None = None,
        max_bytes_per_write: int | None = None,
        max_write_interval_s: float | None = None,
        keep_lineage: bool = True,
        **kwargs: Any,
    ) -> None:
        """Write the output to a Ray Data ``Datasink``; the run is checked afterwards.

        With ``rows_per_write``, ``max_bytes_per_write`` or ``max_write_interval_s`` the output is
        cut into write tasks as a streaming file sink rolls its files: a task gets exactly
        ``rows_per_write`` rows, or fewer when its rows reach ``max_bytes_per_write`` bytes or its
        first row is ``max_write_interval_s`` seconds old, whichever comes first. The driver cuts
        block references, never rows (:mod:`lineage_data._ray.rolled`); ``kwargs`` (Ray Data's
        write options) apply only without these three.
        """
        if rows_per_write is None and max_bytes_per_write is None and max_write_interval_s is None:
            self._write(lambda ds: ds.write_datasink(datasink, **kwargs), keep_lineage)
            return
        if kwargs:
            raise TypeError(f"write_datasink: {sorted(kwargs)} cannot go with a rolled write")
        policy = RollingPolicy(rows_per_write, max_bytes_per_write, max_write_interval_s)
        if self._kept is not None:  # already accounted and materialized: cut by rows only

            def prepare(ds: Any) -> Any:
                if rows_per_write is None:
                    return ds
                return ds.repartition(target_num_rows_per_block=rows_per_write, strict=True)

            self._write(lambda ds: ds.write_datasink(datasink), keep_lineage, prepare)
            return
        self._execution().write_rolled(datasink, policy, keep_lineage=keep_lineage)

    def _write(
        self,
        action: Callable[[Any], Any],
        keep_lineage: bool,
        prepare: Callable[[Any], Any] | None = None,
    ) -> None:
        if self._kept is not None:  # already accounted: a plain Ray write of what a consumer sees
            ds = self._kept.dataset().map_batches(
                _public_batch, fn_kwargs={"keep_lineage": keep_lineage}, batch_format="pyarrow"
            )
            action(prepare(ds) if prepare else ds)
            return
        self._execution().write(action, prepare=prepare, keep_lineage=keep_lineage)

    def to_ray(self) -> ray.data.Dataset:
        """The lowered, lazy Ray Data Dataset (public lineage columns + user columns).

        Its helper actors start with this call and stop when its one execution ends (or when the
        dataset is garbage collected unexecuted). Lineage accounting (repair, the report) is only
        done by this class's own consumers.
        """
        if self._kept is not None:
            return self._kept.dataset().map_batches(_public_batch, batch_format="pyarrow")
        from lineage_data._ray.execute import detached_dataset

        return detached_dataset(self._plan)


def _timeout(fn: Any, timeout_s: float | None) -> float | None:
    """A stage's ``timeout_s``: as given; ``None``: ``fn``'s ``default_timeout_s``; inf: none.

    A connector knows how long its native call may take on a sane input (a PDF page, a video
    clip) and says so on its function or class; the user's number, or ``math.inf``, wins.
    """
    if timeout_s is None:
        while isinstance(fn, functools.partial):
            fn = fn.func
        timeout_s = getattr(fn, "default_timeout_s", None)
    if isinstance(timeout_s, int | float) and math.isinf(timeout_s) and timeout_s > 0:
        return None
    return timeout_s


def _public_batch(batch: pa.Table, keep_lineage: bool = True) -> pa.Table:
    return C.public(batch, keep_lineage=keep_lineage)


def _check_format(batch_format: str | None) -> None:
    if batch_format not in BATCH_FORMATS:
        raise ValueError(f"batch_format must be one of {BATCH_FORMATS}, got {batch_format!r}")
