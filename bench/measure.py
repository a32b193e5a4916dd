"""Measuring: Ray start/stop, a memory sampler, the driver-side shard sink, timelines, results, plots."""

from __future__ import annotations

import json
import os
import statistics
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import pyarrow as pa
import pyarrow.parquet as pq

RESULTS_DIR = Path(__file__).resolve().parent / "results"


# -- Ray -------------------------------------------------------------------------------------------


def start_ray(gpus: int) -> bool:
    """Start a private local Ray (8 logical CPUs, ``gpus`` logical GPUs) unless one is running.

    With ``RAY_ADDRESS`` set, connect there instead (the cluster then decides the resources).

    Returns:
        True when this call started Ray (and so should shut it down).
    """
    import ray

    import lineage_data as ld

    os.environ.setdefault("LINEAGE_DATA_PROGRESS", "0")
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    if ray.is_initialized():
        return False
    address = os.environ.get("RAY_ADDRESS")
    if address:
        ld.init(address=address, log_to_driver=False)
    else:
        ld.init(
            address="local",
            num_gpus=gpus,
            include_dashboard=False,
            log_to_driver=False,
            object_store_memory=2 * 1024**3,
            configure_logging=False,
        )
    ctx = ray.data.DataContext.get_current()
    ctx.enable_progress_bars = False
    ctx.print_on_execution_start = False
    ctx.verbose_stats_logs = False
    return True


def warm_up() -> None:
    """Start a few Ray workers so the first measured system does not pay for them alone."""
    import ray

    ray.data.range(16, override_num_blocks=8).map_batches(lambda b: b).materialize()


# -- memory ----------------------------------------------------------------------------------------


class MemorySampler(threading.Thread):
    """Samples the driver's RSS and the coordinator actor's RSS (found among the driver's descendants).

    Only processes below this driver are looked at, so other Ray instances on the machine are ignored.
    With ``RAY_ADDRESS`` set, the coordinator is not a descendant and is not measured.
    """

    def __init__(self, interval_s: float = 0.05) -> None:
        super().__init__(daemon=True, name="bench-memory")
        self._interval = interval_s
        self._stop_event = threading.Event()
        self._me = psutil.Process()
        self.driver_peak = 0
        self.coordinator_peak = 0
        self._coordinators: dict[int, psutil.Process] = {}
        self._last_scan = 0.0

    def _scan(self) -> None:
        try:
            children = self._me.children(recursive=True)
        except psutil.Error:
            return
        for proc in children:
            if proc.pid in self._coordinators:
                continue
            try:
                title = " ".join(proc.cmdline())
            except psutil.Error:
                continue
            if title.startswith(
                "ray::CoordinatorActor"
            ):  # not Ray Data's _AutoscalingCoordinatorActor
                self._coordinators[proc.pid] = proc

    def run(self) -> None:
        while not self._stop_event.is_set():
            try:
                self.driver_peak = max(self.driver_peak, self._me.memory_info().rss)
            except psutil.Error:
                pass
            now = time.monotonic()
            if now - self._last_scan > 0.5:
                self._last_scan = now
                self._scan()
            for pid, proc in list(self._coordinators.items()):
                try:
                    self.coordinator_peak = max(self.coordinator_peak, proc.memory_info().rss)
                except psutil.Error:
                    self._coordinators.pop(pid, None)
            self._stop_event.wait(self._interval)

    def stop(self) -> dict[str, float | None]:
        """Stop sampling; peaks in MiB (None where nothing was seen)."""
        self._stop_event.set()
        self.join(timeout=2)
        mib = 1024 * 1024
        return {
            "peak_driver_rss_mib": round(self.driver_peak / mib, 1) if self.driver_peak else None,
            "peak_coordinator_rss_mib": round(self.coordinator_peak / mib, 1)
            if self.coordinator_peak
            else None,
        }


# -- the sink --------------------------------------------------------------------------------------


@dataclass
class ShardSink:
    """Writes each output batch as one Parquet shard as it arrives; notes when each parent arrived.

    Attributes:
        path: the shard directory.
        start: the run's start (``time.time()``).
        key: the column naming a parent in output rows (None: rows are children, no parent times).
    """

    path: Path
    start: float
    key: str | None = "doc"
    shards: int = 0
    rows: int = 0
    bytes: int = 0
    first_output_s: float | None = None
    commits: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.path.mkdir(parents=True, exist_ok=True)

    def write(self, batch: pa.Table) -> None:
        """Write one batch (a non-empty Arrow table)."""
        if not batch.num_rows:
            return
        target = self.path / f"part-{self.shards:05d}.parquet"
        pq.write_table(batch, target)
        now = time.time() - self.start
        if self.first_output_s is None:
            self.first_output_s = now
        if self.key is not None and self.key in batch.column_names:
            for doc in batch[self.key].to_pylist():
                self.commits.setdefault(doc, now)
        self.shards += 1
        self.rows += batch.num_rows
        self.bytes += target.stat().st_size


# -- timelines -------------------------------------------------------------------------------------


@dataclass
class Timeline:
    """GPU batches and watched-row sightings read back from the per-actor files of one system."""

    batches: list[tuple[str, float, float, int]]  # (actor, start, end, rows)
    seen: dict[str, set[int]]  # doc -> ordinals the GPU function was handed


def read_timeline(timeline_dir: Path, system: str) -> Timeline:
    """Collect every ``<system>-*.tsv`` file."""
    batches: list[tuple[str, float, float, int]] = []
    seen: dict[str, set[int]] = defaultdict(set)
    for file in sorted(timeline_dir.glob(f"{system}-*.tsv")):
        for line in file.read_text().splitlines():
            parts = line.split("\t")
            if parts[0] == "B" and parts[1] == system and len(parts) == 6:
                batches.append((parts[2], float(parts[3]), float(parts[4]), int(parts[5])))
            elif parts[0] == "S" and parts[1] == system and len(parts) == 4:
                seen[parts[2]].add(int(parts[3]))
    batches.sort(key=lambda b: b[1])
    return Timeline(batches, dict(seen))


def gpu_metrics(tl: Timeline, start: float, end: float, gpus: int) -> dict[str, Any]:
    """Busy fraction, tail and overlap checks from the GPU batches of one run."""
    wall = end - start
    if not tl.batches:
        return {"gpu_batches": 0}
    work = sum(b[2] - b[1] for b in tl.batches)
    per_actor: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for actor, s, e, _ in tl.batches:
        per_actor[actor].append((s, e))
    overlap = 0.0
    for spans in per_actor.values():
        spans.sort()
        for (_, e0), (s1, _) in zip(spans, spans[1:], strict=False):
            overlap += max(0.0, e0 - s1)
    last_end = max(b[2] for b in tl.batches)
    first_start = min(b[1] for b in tl.batches)
    return {
        "gpu_batches": len(tl.batches),
        "gpu_rows": sum(b[3] for b in tl.batches),
        "gpu_actors_seen": len(per_actor),
        "gpu_work_s": round(work, 3),
        "gpu_busy_frac": round(work / (gpus * wall), 4) if wall > 0 else None,
        "first_gpu_start_s": round(first_start - start, 3),
        "last_gpu_end_s": round(last_end - start, 3),
        "gpu_span_s": round(last_end - first_start, 3),
        "tail_s": round(end - last_end, 3),
        "tail_frac": round(max(0.0, end - last_end) / wall, 4) if wall > 0 else None,
        "same_actor_overlap_s": round(overlap, 3),
    }


# -- results ---------------------------------------------------------------------------------------


def median_ratio(walls: list[float], baseline: list[float]) -> float:
    """The median of the per-repeat ratios ``walls[i] / baseline[i]`` (interleaved repeats).

    Runs of one repeat are a minute apart at most, so a slow spell of the shared machine moves both
    sides of a ratio; the ratio of the best walls can pair two different spells.
    """
    return round(statistics.median(a / b for a, b in zip(walls, baseline, strict=True)), 4)


def results_path(out_dir: Path, name: str, scale: str, suffix: str, stamp: str) -> Path:
    """``<out>/<name>-<scale>-<stamp>.<suffix>``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    return out_dir / f"{name}-{scale}-{stamp}.{suffix}"


def write_json(path: Path, data: dict[str, Any]) -> None:
    """Pretty JSON."""
    path.write_text(json.dumps(data, indent=2, sort_keys=False, default=str) + "\n")


def plot_timelines(
    path: Path, title: str, runs: list[tuple[str, Timeline, float, float, dict[str, float]]]
) -> None:
    """One panel per system: GPU batches per actor over time, parent commit times as a step curve.

    Args:
        path: the PNG to write.
        title: the figure title.
        runs: ``(system, timeline, start, end, commits)`` with ``commits`` = parent -> seconds from start.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not runs:
        return
    fig, axes = plt.subplots(len(runs), 1, figsize=(11, 2.3 * len(runs) + 0.6), squeeze=False)
    horizon = max(end - start for _, _, start, end, _ in runs)
    for ax, (system, tl, start, end, commits) in zip(axes[:, 0], runs, strict=True):
        actors = sorted({b[0] for b in tl.batches})
        row = {a: i for i, a in enumerate(actors)}
        for actor, s, e, _ in tl.batches:
            ax.broken_barh(
                [(s - start, e - s)], (row[actor] - 0.4, 0.8), color="tab:blue", alpha=0.8
            )
        ax.set_yticks(range(len(actors)), [f"gpu{i}" for i in range(len(actors))])
        ax.set_xlim(0, horizon * 1.02)
        ax.axvline(end - start, color="black", lw=1)
        ax.set_title(f"{system}: wall {end - start:.2f}s", loc="left", fontsize=9)
        if commits:
            times = sorted(commits.values())
            twin = ax.twinx()
            twin.step(times, range(1, len(times) + 1), where="post", color="tab:red", lw=1.2)
            twin.set_ylabel("parents out", color="tab:red", fontsize=8)
            twin.set_ylim(0, len(times) * 1.05)
    axes[-1, 0].set_xlabel(
        "seconds from the system's start (blue: GPU batches; red: parents committed)"
    )
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
