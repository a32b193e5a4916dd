"""One execution of a plan: passes over the lowered dataset, the consumer's ledger, repair, progress.

A first pass runs the whole plan; roots a fault kept from the consumer get up to
``max_repair_attempts`` repair passes (each with its own helpers), then FAILED ``LostError`` rows.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import weakref
from collections.abc import Callable, Generator, Iterator
from typing import Any, assert_never

import pyarrow as pa
import pyarrow.compute as pc
import ray

from lineage_data._core import columns as C
from lineage_data._core.errors import AccountingError, ExecutionError, LineageError, UserCodeError
from lineage_data._core.ledger import Ledger, as_root_headers
from lineage_data._core.plan import MaterializedSource, Plan, RaySource
from lineage_data._core.rolling import RollingPolicy
from lineage_data._core.stages import Reduce
from lineage_data._core.state import derived_counts
from lineage_data._ray import compat
from lineage_data._ray.actors import Helper, Supervisor, kill_all, new_run_id
from lineage_data._ray.coordinator import CoordinatorClient, start_coordinator
from lineage_data._ray.holders import HolderSet, start_holders
from lineage_data._ray.init import init_ray
from lineage_data._ray.lower import lower
from lineage_data._ray.progress import _Progress, _progress_enabled
from lineage_data._ray.rolled import RolledWrite
from lineage_data._ray.sinks import WRITTEN, AccountedSink, accounted
from lineage_data._ray.typestore import TypeStore
from lineage_data.report import RunReport

logger = logging.getLogger("lineage_data")


class _Pass:
    """One lowering of a plan: its coordinator, its group holders and the lazy Ray Dataset.

    A flat plan (:attr:`Plan.flat`) has no coordinator but a :class:`TypeStore`, except without a
    ledger (``to_ray()``) on a Ray Dataset: there the coordinator's registry refuses duplicate ids.
    """

    def __init__(
        self,
        plan: Plan,
        supervisor: Supervisor,
        *,
        ledger: bool = True,
        keep_parents: bool = False,
    ) -> None:
        run_id = new_run_id()
        self.helpers: list[Helper] = []
        self.client: CoordinatorClient | TypeStore
        if plan.flat and (ledger or not isinstance(plan.source, RaySource)):
            self.client = TypeStore(run_id)
        else:
            seen = plan.source.established if isinstance(plan.source, MaterializedSource) else ()
            self.client, create = start_coordinator(run_id, {s: list(c) for s, c in seen} or None)
            self.helpers.append(self.client.helper)
            supervisor.watch(self.client.helper, create)
        reduces = [
            (i, s) for i, s in enumerate(plan.stages) if isinstance(s, Reduce) and i >= plan.done
        ]
        started = start_holders(run_id) if reduces else []
        for helper, recreate in started:
            supervisor.watch(helper, recreate)
        self._holders = [helper for helper, _ in started]
        self.helpers += self._holders
        self.holders = {i: HolderSet(self._holders, stage.name) for i, stage in reduces}
        self._supervisor = supervisor
        self.dataset = lower(plan, self.client, self.holders, keep_parents=keep_parents)
        self.registered = 0  # cursor into the coordinator's root registry
        self.last: dict[str, Any] = {}  # the coordinator's snapshot at the end of the pass

    def forget(self, roots: list[str]) -> None:
        """Tell every holder that ``roots`` reached the consumer (no wait)."""
        for helper in self._holders:
            helper.submit("forget", roots)

    @property
    def coordinator(self) -> CoordinatorClient | None:
        """The pass's coordinator (None: a flat plan's :class:`TypeStore`)."""
        return self.client if isinstance(self.client, CoordinatorClient) else None

    def finish(self) -> None:
        """Keep the pass's counts (the coordinator is asked once, at the end)."""
        if self.coordinator is not None:
            self.last = self.coordinator.snapshot()

    def close(self) -> None:
        self._supervisor.unwatch(self.helpers)
        stop_helpers(self.helpers, self.client)


class Execution:
    """Runs a plan once, in passes. Create one per consumer call: each has its own helpers."""

    def __init__(
        self,
        plan: Plan,
        *,
        on_report: Callable[[RunReport], None] | None = None,
        keep_parents: bool = False,
    ) -> None:
        init_ray()
        self._plan = plan
        self._keep_parents = keep_parents  # (see iter_kept)
        self._on_report = on_report
        self._started = time.time()
        self._ledger = Ledger(plan.level, _known_roots(plan), started_at=self._started)
        # A Ray Dataset source names its roots only as it reads them. The driver mirrors the
        # coordinator's registry only where a root can vanish without a trace (in a reduce's holders);
        # elsewhere Ray re-runs what a fault interrupted, and every root that arrived is checked.
        self._from_ray = isinstance(plan.source, RaySource)
        self._mirror = self._from_ray and any(isinstance(s, Reduce) for s in plan.stages)
        if self._from_ray:
            self._ledger.reserve(_source_rows(plan), tagged=plan.flat)
        self._supervisor = Supervisor()
        self._supervisor.chore(self._chores)
        self._pass = _Pass(plan, self._supervisor, keep_parents=keep_parents)
        self._passes: list[_Pass] = []
        self._forgotten = 0
        self._lock = threading.Lock()
        self._repaired: set[str] = set()
        self._stand_ins: list[pa.Table] = []
        self._lost = 0
        self._writing: _Pass | None = None  # the pass whose coordinator a write's tasks report to
        self._shown: tuple[Any, dict] = (None, {})  # the progress's last (pass, snapshot)
        self._progress = _Progress(self._progress_now) if _progress_enabled() else None

    # -- driver-side chores (supervisor thread) ----------------------------------------------------
    def _chores(self) -> None:
        current = self._pass
        if current.holders:  # holders drop what they keep for roots the consumer has
            with self._lock:
                done, self._forgotten = self._ledger.completed_since(self._forgotten)
            if done:
                current.forget(done)
        if self._mirror:
            self._mirror_registry(current)

    def _mirror_registry(self, current: _Pass) -> None:
        assert current.coordinator is not None  # a reduce: not a flat plan
        roots, current.registered = current.coordinator.root_ids_since(current.registered)
        if len(roots):
            plan = self._plan
            if plan.exclude or plan.only is not None:
                roots = roots.filter(plan.kept(roots))
            with self._lock:
                self._ledger.expect(roots)

    def _progress_now(self) -> dict[str, int]:
        """Documents done (reduced), failed, in flight and, in a write, written, for the display."""
        with self._lock:
            led = self._ledger.progress()
        done = led["committed"] + led["failed"]
        p = {"done": done, "failed": led["failed"], "total": led["total"]}
        p["in_flight_parents"] = led["in_flight_parents"]
        if self._writing is not None:  # what the ledger took in a write came back written
            p["written"] = done
        current = self._writing or self._pass
        if current.coordinator is not None:
            self._coordinated_progress(p, current)
        if p["total"]:  # a retried task counts again in the coordinator: never past the roots
            p["done"] = min(p["done"], p["total"])
            p["in_flight_parents"] = min(p["in_flight_parents"], p["total"] - p["done"])
        return p

    def _coordinated_progress(self, p: dict[str, int], current: _Pass) -> None:
        """What the pass's coordinator knows beyond the driver: parents reduced, in flight, written."""
        coordinator = current.coordinator
        assert coordinator is not None
        shown = current.last or (self._shown[1] if self._shown[0] is current else {})
        if coordinator.helper.stopped:  # the pass is over: its last counts stand
            snapshot = shown
        else:
            try:
                snapshot = coordinator.snapshot()
                self._shown = (current, snapshot)
            except Exception:  # noqa: BLE001 - a display: the coordinator may be restarting or
                snapshot = shown  # stopped meanwhile (Helper.call then raises at once)
        counts = snapshot.get("counts", {})
        if self._plan.level == 0 and self._plan.stages:  # the last stage's rows are documents
            last = counts.get(self._plan.stages[-1].name, {})
            p["done"] = max(p["done"], sum(last.values()))
            p["failed"] = max(p["failed"], sum(n for k, n in last.items() if k != "PRESENT"))
        # the driver sees a parent only once it is done: the coordinator knows what is in flight
        p["in_flight_parents"] = max(
            p["in_flight_parents"], int(snapshot.get("in_flight_parents", 0))
        )
        if self._writing is not None:  # a write: its tasks report to the coordinator as they finish
            written = counts.get(WRITTEN, {})
            tasks = int(written.get("committed", 0)) + int(written.get("failed", 0))
            p["written"] = max(p["written"], tasks)
            p["shards"] = int(written.get("shards", 0))

    # -- consumers ----------------------------------------------------------------------------------
    def iter_tables(self, *, prefetch_batches: int = 1) -> Iterator[pa.Table]:
        """Stream the output blocks (copies dropped); repair lost roots; check the run at the end.

        Closing the generator early (a consumer that stops, or is garbage-collected) stops the run.
        """
        with contextlib.closing(self._batches(prefetch_batches)) as batches:
            for batch in batches:
                if batch is None:  # the end: roots still missing
                    lost = self._lose()
                    if lost is not None:
                        yield lost
                    continue
                with self._lock:
                    out = self._ledger.take(batch)
                if out.num_rows:
                    yield out

    def iter_kept(self) -> Iterator[tuple[pa.Table, pa.Table]]:
        """Stream a run of an open level kept to be continued (``keep_parents=True``).

        Yields ``(rows, stand_ins)`` (see :meth:`Ledger.take_kept`): the rows the plan can go on
        from, and the rows a consumer sees for roots that left none; a lost root as a root header and
        its ``LostError`` row.
        """
        assert self._keep_parents and self._plan.level
        with contextlib.closing(self._batches(prefetch_batches=1)) as batches:
            for batch in batches:
                if batch is None:
                    lost = self._lose()
                    if lost is not None:
                        yield as_root_headers(lost), lost
                    continue
                with self._lock:
                    rows, stand_ins = self._ledger.take_kept(batch)
                if rows.num_rows or stand_ins.num_rows:
                    yield rows, stand_ins

    def _batches(self, prefetch_batches: int) -> Generator[pa.Table | None, None, None]:
        """Every pass's output blocks as they come, then None once (roots still missing are lost)."""
        self._begin()
        try:
            for current in self._run_passes():
                for batch in current.dataset.iter_batches(
                    batch_size=None, batch_format="pyarrow", prefetch_batches=prefetch_batches
                ):
                    assert isinstance(batch, pa.Table)
                    self._check()
                    yield batch
            yield None
        except BaseException as exc:
            self._close()
            self._raise(exc)
        self.finish()

    def write(self, action: Callable[[Any], Any], *, keep_lineage: bool = True) -> None:
        """Run a Ray Data write (``action(ds)``) per pass; account the write results; check the run."""
        self._begin()
        level = self._plan.level
        try:
            for current in self._run_passes():
                self._writing = current
                action(
                    accounted(
                        current.dataset,
                        level,
                        self._account,
                        keep_lineage=keep_lineage,
                        progress=current.coordinator,
                    )
                )
            extra = self._driver_rows()
            if extra:
                ds = ray.data.from_blocks(extra)  # (no remote task per table for its metadata)
                action(accounted(ds, level, lambda sink: None, keep_lineage=keep_lineage))
        except BaseException as exc:
            self._close()
            self._raise(exc)
        self.finish()

    def write_rolled(
        self, datasink: Any, policy: RollingPolicy, *, keep_lineage: bool = True
    ) -> None:
        """Write to ``datasink`` in files cut by ``policy`` as the rows come (see :mod:`.rolled`)."""
        from ray.data.datasource.datasink import WriteResult

        self._begin()
        level = self._plan.level
        results: list[Any] = []
        try:
            datasink.on_write_start()
            for current in self._run_passes():
                self._writing = current
                progress = current.coordinator
                sink = AccountedSink(datasink, level, keep_lineage=keep_lineage, progress=progress)
                rolled = RolledWrite(sink, policy, lambda r: self._take_written(r[1], r[2]))
                rolled.stream(compat.output_blocks(current.dataset), check=self._check)
                rolled.finish()
                results += rolled.results
            extra = self._driver_rows()
            if extra:
                sink = AccountedSink(datasink, level, keep_lineage=keep_lineage)
                rolled = RolledWrite(sink, policy, lambda r: None)
                rolled.tables(extra)
                rolled.finish()
                results += rolled.results
            rows = sum(r[1].num_rows for r in results)
            datasink.on_write_complete(WriteResult(rows, 0, [r[0] for r in results]))
        except BaseException as exc:
            with contextlib.suppress(Exception):
                datasink.on_write_failed(exc if isinstance(exc, Exception) else RuntimeError(exc))
            self._close()
            self._raise(exc)
        self.finish()

    def _check(self) -> None:
        if self._supervisor.error is not None:
            raise self._supervisor.error

    def columns(self) -> dict[str, list[str]]:
        """Every column each stage's rows showed in this run (all passes; see ``established``)."""
        out: dict[str, dict[str, None]] = {}
        for p in self._passes:
            for stage, names in p.last.get("columns", {}).items():
                out.setdefault(stage, {}).update(dict.fromkeys(names))
        return {stage: list(names) for stage, names in out.items()}

    def _driver_rows(self) -> list[pa.Table]:
        """Rows the driver makes (LostError rows, open-level stand-ins): in the ledger already."""
        return [t for t in (*self._stand_ins, self._lose()) if t is not None and t.num_rows]

    def _account(self, sink: AccountedSink) -> None:
        for lineage, at in sink.written:
            self._take_written(lineage, at)

    def _take_written(self, lineage: pa.Table, at: float) -> None:
        with self._lock:
            out = self._ledger.take(lineage, at)
        if self._plan.level and out.num_rows:
            # at an open level, a stand-in row (empty path) is the ledger's, not yet written
            stand_in = pc.equal(pc.list_value_length(out[C.PATH]), 0)
            if pc.any(stand_in).as_py():
                self._stand_ins.append(out.filter(stand_in))

    # -- passes -------------------------------------------------------------------------------------
    def _run_passes(self) -> Iterator[_Pass]:
        """The first pass, then repair passes while roots are missing and attempts are left."""
        attempt = 0
        while True:
            current = self._pass
            yield current
            if self._mirror:
                self._mirror_registry(current)
            elif self._from_ray:
                with self._lock:
                    self._ledger.expect_arrived()
            current.finish()
            self._passes.append(current)
            current.close()
            missing = self._missing()
            if not missing or attempt >= self._plan.max_repair_attempts:
                return
            attempt += 1
            self._repaired.update(missing)
            logger.warning(
                "lineage: %d root(s) did not reach the consumer (worker, actor or node loss); "
                "repair pass %d of at most %d",
                len(missing),
                attempt,
                self._plan.max_repair_attempts,
            )
            self._pass = _Pass(
                self._plan.restricted(frozenset(missing)),
                self._supervisor,
                keep_parents=self._keep_parents,
            )

    def _missing(self) -> list[str]:
        with self._lock:
            return self._ledger.missing()

    def _lose(self) -> pa.Table | None:
        """FAILED ``LostError`` rows for roots still missing after every repair pass (or None)."""
        missing = self._missing()
        if not missing:
            return None
        self._lost = len(missing)
        logger.error(
            "lineage: %d root(s) lost after %d repair pass(es): %s",
            len(missing),
            self._plan.max_repair_attempts,
            missing[:10],
        )
        with self._lock:
            return self._ledger.lost(missing, self._plan.max_repair_attempts)

    def _begin(self) -> None:
        """A consumer starts: watch the helpers (a bare ``to_ray()`` has no supervisor), draw progress."""
        self._supervisor.start()
        if self._progress is not None:
            self._progress.start()

    def _raise(self, exc: BaseException) -> None:
        """Re-raise ``exc`` as the consumer should see it: ours as themselves, Ray's as ExecutionError."""
        failure = compat.classify(exc)
        match failure:
            case compat.Failure.OURS:  # raised in a worker: as itself, not in Ray's wrapper
                raise exc.cause from None  # type: ignore[attr-defined]
            case compat.Failure.OTHER:
                raise exc
            case compat.Failure.CONSTRUCTOR | compat.Failure.RAY:
                raise self._translate(exc, failure) from exc
            case _:
                assert_never(failure)

    def _translate(self, exc: BaseException, failure: compat.Failure) -> BaseException:
        """A Ray failure outside user code as an :class:`ExecutionError` naming the stage."""
        stage = compat.stage_named(exc, [s.name for s in self._plan.stages])
        where = f"stage {stage!r}" if stage else "the lineage run"
        if failure is compat.Failure.CONSTRUCTOR:  # Ray reports it as the death of the actor
            what = compat.constructor_raised(exc)
            return UserCodeError(f"{where}: the constructor of its callable class raised: {what}")
        first = compat.first_line(exc)
        return ExecutionError(f"{where} failed outside user code: {type(exc).__name__}: {first}")

    def finish(self) -> RunReport:
        """Build the report, stop the helpers, raise if a root is unaccounted for."""
        self._close()
        terminal = self._ledger.terminal()
        counts: dict[str, dict[str, int]] = {}
        for p in self._passes:
            for stage, c in p.last.get("counts", {}).items():
                merged = counts.setdefault(stage, {})
                for key, value in c.items():
                    merged[key] = merged.get(key, 0) + value
        names = [s.name for s in self._plan.stages]
        counts.update(derived_counts(names, self._plan.derived_stages(), terminal))
        if isinstance(self._plan.source, MaterializedSource):  # stages run before it was kept
            counts.update((stage, dict(c)) for stage, c in self._plan.source.counts)
        kinds = {s.name: s.kind.value for s in self._plan.stages}
        repaired = sum(1 for r in self._repaired if self._ledger.delivered(r)) - self._lost
        report = RunReport.from_snapshot(
            {
                "counts": counts,
                "terminal": terminal,
                "progress": {"reports": sum(p.last.get("reports", 0) for p in self._passes)},
            },
            kinds,
            time.time() - self._started,
            extra={
                "passes": len(self._passes),
                "repaired_roots": max(0, repaired),
                "lost_roots": self._lost,
                "duplicates_dropped": self._ledger.duplicates,
                "helpers_recreated": self._supervisor.recreated,
            },
        )
        if self._on_report is not None:
            self._on_report(report)
        unexpected = self._ledger.unexpected()
        if unexpected:
            raise AccountingError(
                f"lineage accounting failed: {len(unexpected)} root(s) delivered that no source "
                f"announced {unexpected[:10]}"
            )
        return report

    def _close(self) -> None:
        self._supervisor.stop()
        for p in [self._pass, *self._passes]:
            p.close()
        if self._progress is not None:  # after the passes closed: the last line asks no helper
            self._progress.stop()  # (on a failed run, a dead coordinator would hold it 30 s)


def detached_dataset(plan: Plan) -> Any:
    """The lowered dataset of ``plan`` for ``to_ray()``: its helpers live while it executes once.

    An execution callback stops the helpers when the execution ends (or the dataset is collected);
    a second execution raises a :class:`LineageError`. No accounting, repair or report.
    """
    init_ray()
    current = _Pass(plan, Supervisor(), ledger=False)
    helpers, client = list(current.helpers), current.client
    state = {"stopped": False}  # (no lock: Ray pickles the callbacks with the DataContext)

    def stop() -> None:
        if not state["stopped"]:
            state["stopped"] = True
            stop_helpers(helpers, client)

    def before_execution_starts() -> None:
        if state["stopped"]:
            raise LineageError(
                "a dataset from LineageDataset.to_ray() executes once (its lineage helpers are "
                "gone after the first execution): call to_ray() again"
            )

    ds = current.dataset
    compat.on_execution_end(ds, before_execution_starts, stop)
    ds = ds.map_batches(C.public, batch_format="pyarrow", batch_size=None)
    weakref.finalize(ds, stop_helpers, helpers, client)
    return ds


def stop_helpers(helpers: list[Helper], client: Any) -> None:
    """Kill a pass's helpers for good; drop its types from Ray's key-value store (a flat plan)."""
    kill_all(helpers)
    if isinstance(client, TypeStore):
        client.drop()


# The ledger is sized up front for at most this many roots of a Ray Dataset source (32 MB written at
# once): a consumer that reads only the first rows of a huge dataset does not pay for all of it.
MAX_RESERVED_ROOTS = 4_000_000


def _source_rows(plan: Plan) -> int:
    """The rows a Ray Dataset source will give, where Ray knows without running it (0: unknown)."""
    assert isinstance(plan.source, RaySource)
    rows = compat.known_row_count(plan.source.dataset)
    if rows is None:
        return 0
    if plan.limit is not None:  # (limit >= 0: checked when the plan was built)
        rows = min(rows, plan.limit)
    return min(rows, MAX_RESERVED_ROOTS)


def _known_roots(plan: Plan) -> list[str]:
    """The roots a plan's source names before it runs (none for a Ray Dataset source)."""
    roots = plan.source.roots or ()
    return [roots[i] for i in plan.select(roots)]
