"""The public facade: :class:`LineageDataset`, an immutable lineage plan with Ray Data's verbs.

This module builds plans; what runs them (consumers, writers, ``materialize``) is the base class
:class:`~lineage_data._output.Consumers`.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Unpack

from lineage_data._core import columns as C
from lineage_data._core.errors import PlanError
from lineage_data._core.guard import DEFAULT_MAX_CRASH_RETRIES
from lineage_data._core.physical import physical_plan
from lineage_data._core.physical import source_blocks as physical_source
from lineage_data._core.plan import Plan, RaySource
from lineage_data._core.stages import (
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
from lineage_data._output import Consumers, _Kept
from lineage_data._ray.column_verbs import Columns, Predicate, Rename, WithColumn
from lineage_data.report import RunReport

if TYPE_CHECKING:
    import pyarrow as pa


class LineageDataset(Consumers):
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

    __slots__ = ()  # its state is Consumers' slots

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
        self,
        cls: type[AnyStage],
        fn: Any,
        name: str | None,
        ray: Mapping[str, Any],
        on_error: OnError,
        timeout_s: float | None = None,
        max_crash_retries: int = DEFAULT_MAX_CRASH_RETRIES,
        **own: Any,
    ) -> LineageDataset:
        call, compute = from_options(fn, ray)
        stage = cls(
            name=name or self._plan.unique_name(fn, cls.kind),
            level=self._plan.level,
            call=call,
            compute=compute,
            on_error=on_error,
            timeout_s=_timeout(fn, timeout_s),
            max_crash_retries=max_crash_retries,
            **own,
        )
        return LineageDataset(self._plan.then(stage))

    # -- stages ---------------------------------------------------------------------------------
    # Every stage verb also takes Ray Data's arguments (RayOptions) with Ray's meaning and
    # defaults, and ``max_crash_retries``/``timeout_s`` for inputs that crash or hang the process
    # under a stage (lineage_data._core.guard; docs/guide/fault-tolerance.md).
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
        parent at reduce; binary parent columns (file bytes) are released after expansion unless
        carried. A raising ``fn`` makes the parent FAILED (``on_error="raise"`` stops the run
        instead); zero children make an empty group, not a lost parent.
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

        Arguments mean what they mean in Ray Data 2.60 (give ``batch_size`` when asking for GPUs).
        Batches mix rows of many parents. A row's output value may be a
        :class:`~lineage_data.RecordFailure` or :class:`~lineage_data.GroupFailure`; a different
        number of output rows is a :class:`~lineage_data.ContractError`. Under
        ``on_error="isolate"`` a batch that raises is retried ``max_retries`` times, then halved
        until the rows that raise fail alone.
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
            max_retries=max_retries,
            on_error=on_error,
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
        return self._then(MapRows, fn, name, options, on_error, timeout_s, max_crash_retries)

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
        return self._then(Filter, fn, name, options, on_error, timeout_s, max_crash_retries)

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

        DROPPED children are left out. Any FAILED/SUPPRESSED child makes the parent SUPPRESSED with
        the first cause; ``on_child_failure="skip"`` reduces the rest and lists the missing ordinals
        in ``_lineage_missing``. A raising ``fn`` fails that parent (``on_error="raise"`` stops the
        run). Without ``fn`` every child column becomes an ordered list column. Each parent is
        emitted the moment its own children are all in: no groupby, no barrier.
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
        name = self._plan.unique_name(None, kind)
        return self._then(
            MapBatches, fn, name, ray_remote_args, "raise", batch_format="pyarrow", max_retries=0
        )

    def _check_known(self, names: list[str], verb: str) -> None:
        known = self._plan.columns  # None: not known before the run, not checked
        if known is not None and (missing := [n for n in names if n not in known]):
            raise PlanError(
                f"{verb}: column(s) {missing} are not in the rows (columns: {sorted(known)})"
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
            max_repair_attempts: Repair passes after a fault (default 2): lost roots run again,
                alone; those still missing end FAILED with a ``LostError`` cause. 0: no repair.
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

        The steps say what runs each stage, which reduces run in the actors before them and who
        cuts the batches. Needs no Ray (but for a ``from_ray`` source).
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


def _timeout(fn: Any, timeout_s: float | None) -> float | None:
    """A stage's ``timeout_s``: as given; ``None``: ``fn``'s ``default_timeout_s``; inf: none.

    A connector knows how long its native call may take on a sane input; the user's number wins.
    """
    if timeout_s is None:
        while isinstance(fn, functools.partial):
            fn = fn.func
        timeout_s = getattr(fn, "default_timeout_s", None)
    if isinstance(timeout_s, float) and timeout_s == math.inf:  # an int is never infinite
        return None
    return timeout_s
