"""Running a plan and handing over its rows: the consumers and writers of a lineage dataset.

:class:`Consumers` is the half of :class:`~lineage_data.dataset.LineageDataset` that executes; the
other half only builds plans. Every consumer takes Ray Data's consumer arguments, meaning and defaults.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from lineage_data._core import columns as C
from lineage_data._core.batching import rebatch
from lineage_data._core.errors import LineageError
from lineage_data._core.ledger import view
from lineage_data._core.plan import MaterializedSource, Plan
from lineage_data._core.rolling import RollingPolicy
from lineage_data._core.stages import BATCH_FORMATS, DEFAULT_BATCH_FORMAT, BatchFormat
from lineage_data._core.udf import to_format
from lineage_data.report import RunReport

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa
    import ray.data

    from lineage_data.dataset import LineageDataset

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

    def dataset(self, keep_lineage: bool = True) -> ray.data.Dataset:
        """The same as a Ray Dataset, as a consumer sees it (already accounted: no lineage run)."""
        import ray

        refs: list[Any] = list(self.refs) or [ray.put(C.empty())]
        ds: Any = ray.data.from_arrow_refs(refs)
        if self.level:
            ds = ds.map_batches(view, batch_format="pyarrow", batch_size=None)
            if self.stand_ins:
                ds = ds.union(ray.data.from_arrow_refs(list(self.stand_ins)))
        return ds.map_batches(
            C.public, fn_kwargs={"keep_lineage": keep_lineage}, batch_format="pyarrow"
        )


class Consumers:
    """What runs a lineage plan: consumers, writers, ``materialize`` and the last run's report."""

    __slots__ = ("_kept", "_last_run", "_plan")  # set by LineageDataset.__init__
    _plan: Plan
    _kept: _Kept | None
    _last_run: RunReport | None

    if TYPE_CHECKING:

        def limit(self, limit: int) -> LineageDataset: ...

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

    # -- execution ------------------------------------------------------------------------------
    def _execution(self, **options: Any) -> Any:
        from lineage_data._ray.execute import Execution

        return Execution(self._plan, on_report=self._set_report, **options)

    def _set_report(self, report: RunReport) -> None:
        self._last_run = report

    def _tables(
        self, *, prefetch_batches: int = 1, keep_lineage: bool = True
    ) -> Iterator[pa.Table]:
        """Accounted output blocks as a user sees them. Nothing starts before the first ``next``."""
        if self._kept is not None:
            tables = self._kept.tables()
        else:
            tables = self._execution().iter_tables(prefetch_batches=prefetch_batches)
        for table in tables:
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
        for batch in rebatch(
            self._tables(prefetch_batches=prefetch_batches, keep_lineage=keep_lineage),
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

        Every consumer reads the result again without re-running (its :meth:`report` is this
        run's), and it can be continued with more stages, at an open level too (failed roots stay
        failed; see the expand/reduce guide).

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
            return self  # type: ignore[return-value]  # a Consumers is always a LineageDataset
        if self._plan.level:
            return self._materialize_open()
        import ray

        from lineage_data.dataset import LineageDataset

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

        from lineage_data.dataset import LineageDataset

        execution = self._execution(keep_parents=True)
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
            level=plan.level,
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
        kept = _Kept(tuple(refs), report, level=plan.level, stand_ins=tuple(stand_ins))
        return LineageDataset(continued, kept=kept)

    def _delivered(self, report: RunReport) -> tuple[str, ...]:
        """The roots a run delivered, in source order if named (``take(n)`` picks the same roots)."""
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
        first row is ``max_write_interval_s`` seconds old. ``kwargs`` (Ray Data's write options)
        apply only without these three.
        """
        if rows_per_write is None and max_bytes_per_write is None and max_write_interval_s is None:
            self._write(lambda ds: ds.write_datasink(datasink, **kwargs), keep_lineage)
            return
        if kwargs:
            raise TypeError(f"write_datasink: {sorted(kwargs)} cannot go with a rolled write")
        policy = RollingPolicy(rows_per_write, max_bytes_per_write, max_write_interval_s)
        if self._kept is None:
            self._execution().write_rolled(datasink, policy, keep_lineage=keep_lineage)
            return
        # already accounted and materialized: cut by rows only
        ds = self._kept.dataset(keep_lineage)
        if rows_per_write is not None:
            ds = ds.repartition(target_num_rows_per_block=rows_per_write, strict=True)
        ds.write_datasink(datasink)

    def _write(self, action: Callable[[Any], Any], keep_lineage: bool) -> None:
        if self._kept is not None:  # already accounted: a plain Ray write of what a consumer sees
            action(self._kept.dataset(keep_lineage))
        else:
            self._execution().write(action, keep_lineage=keep_lineage)

    def to_ray(self) -> ray.data.Dataset:
        """The lowered, lazy Ray Data Dataset (public lineage columns + user columns).

        Its helper actors start with this call and stop when its one execution ends (or when it is
        garbage collected unexecuted). Only this class's consumers do repair and the report.
        """
        if self._kept is not None:
            return self._kept.dataset()
        from lineage_data._ray.execute import detached_dataset

        return detached_dataset(self._plan)


def _check_format(batch_format: str | None) -> None:
    if batch_format not in BATCH_FORMATS:
        raise ValueError(f"batch_format must be one of {BATCH_FORMATS}, got {batch_format!r}")
