"""The public facade: :class:`LineageDataset`, an immutable lineage plan with Ray Data's verbs."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from lineage_data._core.errors import LineageError, PlanError
from lineage_data._core.plan import Kind, Plan, Stage
from lineage_data.report import RunReport

if TYPE_CHECKING:
    import pyarrow as pa
    import ray.data


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
    """

    __slots__ = ("_last_run", "_plan")

    def __init__(self, plan: Plan) -> None:
        self._plan = plan
        self._last_run: RunReport | None = None

    @property
    def plan(self) -> Plan:
        """The immutable plan this dataset stands for."""
        return self._plan

    @property
    def level(self) -> int:
        """The level of the rows this dataset yields (0 = source rows)."""
        return self._plan.level

    def _then(self, kind: Kind, fn: Any, name: str | None, **options: Any) -> LineageDataset:
        stage_name = name or self._plan.unique_name(fn, kind)
        stage = Stage(kind=kind, name=stage_name, fn=fn, level=self._plan.level, **options)
        return LineageDataset(self._plan.then(stage))

    # -- stages ---------------------------------------------------------------------------------
    def expand_lineage(
        self,
        fn: Callable[..., Iterable[dict]] | type,
        *,
        name: str | None = None,
        carry: Sequence[str] | None = None,
        fn_kwargs: Mapping[str, Any] | None = None,
        fn_constructor_kwargs: Mapping[str, Any] | None = None,
        batch_size: int | None = None,
        concurrency: int | tuple[int, int] | None = None,
        num_cpus: float | None = None,
        num_gpus: float | None = None,
        on_error: str = "isolate",
        **ray_remote_args: Any,
    ) -> LineageDataset:
        """Open a level: ``fn(row) -> Iterable[dict]`` gives each row's ordered children.

        ``carry`` names parent columns copied to every child and given back to the parent at reduce.
        Binary parent columns (file bytes) are released after expansion unless carried. A raising ``fn``
        makes the parent FAILED (``on_error="raise"`` stops the run instead); zero children make an empty
        group, not a lost parent.
        """
        return self._then(
            Kind.EXPAND,
            fn,
            name,
            carry=tuple(carry or ()),
            fn_kwargs=dict(fn_kwargs or {}),
            fn_constructor_kwargs=dict(fn_constructor_kwargs or {}),
            batch_size=batch_size,
            concurrency=concurrency,
            num_cpus=num_cpus,
            num_gpus=num_gpus,
            on_error=on_error,
            ray_remote_args=ray_remote_args,
        )

    def map_batches(
        self,
        fn: Callable[..., Any] | type,
        *,
        name: str | None = None,
        batch_size: int | None = None,
        batch_format: str = "pyarrow",
        concurrency: int | tuple[int, int] | None = None,
        num_cpus: float | None = None,
        num_gpus: float | None = None,
        fn_kwargs: Mapping[str, Any] | None = None,
        fn_constructor_kwargs: Mapping[str, Any] | None = None,
        on_error: str = "isolate",
        max_retries: int = 1,
        **ray_remote_args: Any,
    ) -> LineageDataset:
        """A 1:1 batch stage. ``fn`` sees the user columns of PRESENT rows only.

        A row's output value may be :class:`~lineage_data.RecordFailure` or
        :class:`~lineage_data.GroupFailure`. A different number of output rows is a
        :class:`~lineage_data.ContractError`. Under ``on_error="isolate"`` a batch that raises is retried
        ``max_retries`` times, then halved until the rows that raise fail alone.
        """
        return self._then(
            Kind.MAP,
            fn,
            name,
            batch_size=batch_size,
            batch_format=batch_format,
            concurrency=concurrency,
            num_cpus=num_cpus,
            num_gpus=num_gpus,
            fn_kwargs=dict(fn_kwargs or {}),
            fn_constructor_kwargs=dict(fn_constructor_kwargs or {}),
            on_error=on_error,
            max_retries=max_retries,
            ray_remote_args=ray_remote_args,
        )

    def map(
        self,
        fn: Callable[[dict], dict] | type,
        *,
        name: str | None = None,
        concurrency: int | tuple[int, int] | None = None,
        num_cpus: float | None = None,
        num_gpus: float | None = None,
        fn_kwargs: Mapping[str, Any] | None = None,
        fn_constructor_kwargs: Mapping[str, Any] | None = None,
        on_error: str = "isolate",
        **ray_remote_args: Any,
    ) -> LineageDataset:
        """A 1:1 row stage: ``fn(row) -> dict`` (or a failure value); same rules as :meth:`map_batches`."""
        return self._then(
            Kind.MAP_ROWS,
            fn,
            name,
            concurrency=concurrency,
            num_cpus=num_cpus,
            num_gpus=num_gpus,
            fn_kwargs=dict(fn_kwargs or {}),
            fn_constructor_kwargs=dict(fn_constructor_kwargs or {}),
            on_error=on_error,
            ray_remote_args=ray_remote_args,
        )

    def filter(
        self,
        fn: Callable[[dict], bool] | type,
        *,
        name: str | None = None,
        concurrency: int | tuple[int, int] | None = None,
        num_cpus: float | None = None,
        fn_kwargs: Mapping[str, Any] | None = None,
        fn_constructor_kwargs: Mapping[str, Any] | None = None,
        on_error: str = "isolate",
        **ray_remote_args: Any,
    ) -> LineageDataset:
        """Keep rows where ``fn(row)`` is true; the others become DROPPED tombstones (counts stay exact)."""
        return self._then(
            Kind.FILTER,
            fn,
            name,
            concurrency=concurrency,
            num_cpus=num_cpus,
            fn_kwargs=dict(fn_kwargs or {}),
            fn_constructor_kwargs=dict(fn_constructor_kwargs or {}),
            on_error=on_error,
            ray_remote_args=ray_remote_args,
        )

    def reduce_lineage(
        self,
        fn: Callable[[dict, list[dict]], dict] | None = None,
        *,
        name: str | None = None,
        on_child_failure: str = "fail",
        fn_kwargs: Mapping[str, Any] | None = None,
        num_cpus: float | None = None,
        **ray_remote_args: Any,
    ) -> LineageDataset:
        """Close a level: ``fn(parent, children) -> dict`` with children in ordinal order.

        DROPPED children are left out. Any FAILED/SUPPRESSED child makes the parent SUPPRESSED with the
        first cause; ``on_child_failure="skip"`` reduces the rest and lists the missing ordinals in
        ``_lineage_missing``. Without ``fn`` every child column becomes an ordered list column. Each
        parent is emitted the moment its own children are all in: no groupby, no barrier.
        """
        return self._then(
            Kind.REDUCE,
            fn,
            name,
            on_child_failure=on_child_failure,
            fn_kwargs=dict(fn_kwargs or {}),
            num_cpus=num_cpus,
            ray_remote_args=ray_remote_args,
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
        return LineageDataset(plan)

    def exclude_roots(self, roots: Iterable[str]) -> LineageDataset:
        """This dataset without the given source roots (used to resume a run); they are not expected."""
        return LineageDataset(
            replace(self._plan, exclude=self._plan.exclude | frozenset(map(str, roots)))
        )

    # -- inspection -----------------------------------------------------------------------------
    def explain(self) -> str:
        """The lineage plan as text: levels, stages, carried columns. Needs no Ray."""
        return self._plan.explain()

    def __repr__(self) -> str:
        names = ", ".join(f"{s.kind.value}:{s.name}" for s in self._plan.stages)
        return (
            f"LineageDataset(source={self._plan.source.kind}, stages=[{names}], level={self.level})"
        )

    def report(self) -> RunReport:
        """The report of this dataset's last execution."""
        if self._last_run is None:
            raise LineageError(
                "this dataset has not been executed yet: consume it first (take_all, write_...)"
            )
        return self._last_run

    # -- execution ------------------------------------------------------------------------------
    def _execution(self) -> Any:
        from lineage_data._ray.execute import Execution

        return Execution(self._plan, on_report=self._set_report)

    def _set_report(self, report: RunReport) -> None:
        self._last_run = report

    def iter_batches(
        self, *, batch_size: int | None = None, batch_format: str = "pyarrow"
    ) -> Iterator[Any]:
        """Stream output batches as parents commit; the run is checked when the stream ends."""
        return self._execution().iter_batches(batch_size=batch_size, batch_format=batch_format)

    def iter_rows(self) -> Iterator[dict]:
        """Stream output rows as parents commit; the run is checked when the stream ends."""
        for batch in self.iter_batches():
            yield from batch.to_pylist()

    def take_all(self) -> list[dict]:
        """Every output row (one per source root for a closed plan)."""
        return list(self.iter_rows())

    def to_arrow(self) -> pa.Table:
        """Every output row as one Arrow table."""
        import pyarrow as pa

        from lineage_data._core.columns import concat

        batches = list(self.iter_batches())
        return concat(batches) if batches else pa.table({})

    def count(self) -> int:
        """The number of output rows."""
        return sum(b.num_rows for b in self.iter_batches())

    def materialize(self) -> ray.data.Dataset:
        """Execute and keep the output in the Ray object store (a Ray ``MaterializedDataset``)."""
        return self._execution().materialize()

    def write_parquet(self, path: str, **kwargs: Any) -> None:
        """Write the output with Ray Data's ``write_parquet``; the run is checked afterwards."""
        self._execution().write(lambda ds: ds.write_parquet(path, **kwargs))

    def write_datasink(
        self, datasink: Any, *, rows_per_write: int | None = None, **kwargs: Any
    ) -> None:
        """Write the output to a Ray Data ``Datasink``; the run is checked afterwards.

        ``rows_per_write`` cuts the output into blocks of exactly that many rows first (a streaming
        split, no shuffle), so each write task gets one file's worth of rows.
        """

        def prepare(ds: Any) -> Any:
            if rows_per_write is None:
                return ds
            return ds.repartition(target_num_rows_per_block=rows_per_write, strict=True)

        self._execution().write(lambda ds: ds.write_datasink(datasink, **kwargs), prepare=prepare)

    def to_ray(self) -> ray.data.Dataset:
        """The lowered, lazy Ray Data Dataset (public lineage columns + user columns).

        Its coordinator lives as long as the returned dataset is referenced; lineage accounting is only
        checked by this class's own consumers.
        """
        return self._execution().dataset
