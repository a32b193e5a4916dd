"""One execution of a plan: a fresh coordinator, the lowered dataset, progress, and the final check."""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa
import ray

from lineage_data._core.errors import AccountingError
from lineage_data._core.plan import Kind, Plan
from lineage_data._ray.coordinator import CoordinatorClient, start_coordinator
from lineage_data._ray.holders import HolderSet
from lineage_data._ray.lower import lower
from lineage_data.report import RunReport


def ensure_ray(address: str | None = None, **init_kwargs: Any) -> None:
    """Connect to Ray once: ``address`` or ``RAY_ADDRESS`` for a cluster, else a local instance."""
    if ray.is_initialized():
        return
    address = address or os.environ.get("RAY_ADDRESS")
    init_kwargs.setdefault("log_to_driver", True)
    ray.init(address=address, **init_kwargs)


def _progress_enabled() -> bool:
    flag = os.environ.get("LINEAGE_DATA_PROGRESS")
    if flag is not None:
        return flag not in ("0", "", "false")
    return sys.stderr.isatty()


class _Progress(threading.Thread):
    """Polls the coordinator twice a second and draws one line: parents committed / failed / total."""

    def __init__(self, client: CoordinatorClient) -> None:
        super().__init__(daemon=True, name="lineage-progress")
        self._client = client
        self._stop = threading.Event()

    def run(self) -> None:
        while not self._stop.wait(0.5):
            try:
                self.draw(self._client.progress())
            except Exception:  # noqa: BLE001 - the coordinator is gone: the run is ending
                return

    @staticmethod
    def draw(p: dict[str, int], end: str = "") -> None:
        done = p["committed"] + p["failed"]
        pct = f" ({100 * done / p['total']:.0f}%)" if p["total"] else ""
        sys.stderr.write(
            f"\r[lineage] parents {p['committed']} committed, {p['failed']} failed, "
            f"{done}/{p['total']}{pct}, {p['in_flight_parents']} in flight{end}"
        )
        sys.stderr.flush()

    def stop(self) -> None:
        self._stop.set()


class Execution:
    """Runs a plan once. Create one per consumer call: each has its own coordinator."""

    def __init__(self, plan: Plan, *, on_report: Callable[[RunReport], None] | None = None) -> None:
        ensure_ray()
        self._plan = plan
        self._on_report = on_report
        self._started = time.time()
        self._actor = start_coordinator(
            self._started, [s.name for s in plan.stages], plan.derived_stages()
        )
        self._client = CoordinatorClient(self._actor)
        self._holders = {
            i: HolderSet.start() for i, stage in enumerate(plan.stages) if stage.kind is Kind.REDUCE
        }
        self.dataset = lower(plan, self._client, self._holders)
        self._progress = _Progress(self._client) if _progress_enabled() else None

    def _begin(self) -> None:
        if self._progress is not None:
            self._progress.start()

    def iter_batches(self, *, batch_size: int | None, batch_format: str) -> Iterator[Any]:
        """Stream the output; check the run when the stream ends."""
        self._begin()
        try:
            for batch in self.dataset.iter_batches(batch_size=batch_size, batch_format="pyarrow"):
                assert isinstance(batch, pa.Table)
                if batch.num_rows:
                    yield _convert(batch, batch_format)
        except BaseException:
            self._close()
            raise
        self.finish()

    def write(self, action: Callable[[Any], Any]) -> None:
        """Run a Ray Data write over the lowered dataset; check the run afterwards."""
        self._begin()
        try:
            action(self.dataset)
        except BaseException:
            self._close()
            raise
        self.finish()

    def materialize(self) -> Any:
        """Materialize the lowered dataset; check the run afterwards."""
        self._begin()
        try:
            result = self.dataset.materialize()
        except BaseException:
            self._close()
            raise
        self.finish()
        return result

    def finish(self) -> RunReport:
        """Build the report, stop the coordinator, raise if a root is missing or duplicated."""
        try:
            self._client.settle()
            accounting = self._client.accounting()
            snapshot = self._client.snapshot()
        finally:
            self._close()
        kinds = {s.name: s.kind.value for s in self._plan.stages}
        report = RunReport.from_snapshot(snapshot, kinds, time.time() - self._started)
        if self._on_report is not None:
            self._on_report(report)
        if self._progress is not None:
            _Progress.draw(snapshot["progress"], end="\n")
        if not accounting.ok:
            raise AccountingError(
                "lineage accounting failed: "
                f"{len(accounting.missing)} root(s) with no terminal row {list(accounting.missing[:10])}, "
                f"{len(accounting.duplicated)} with more than one {list(accounting.duplicated[:10])}, "
                f"{len(accounting.unknown)} unknown {list(accounting.unknown[:10])}"
            )
        return report

    def _close(self) -> None:
        if self._progress is not None:
            self._progress.stop()
        ray.kill(self._actor, no_restart=True)
        for holders in self._holders.values():
            holders.stop()


def _convert(batch: pa.Table, batch_format: str) -> Any:
    if batch_format in ("pyarrow", "default"):
        return batch
    if batch_format == "pandas":
        return batch.to_pandas()
    if batch_format == "numpy":
        return {name: batch[name].to_numpy(zero_copy_only=False) for name in batch.column_names}
    raise ValueError(f"unknown batch_format {batch_format!r}")
