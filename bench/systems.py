"""The systems compared, each a function ``run_<system>(job) -> SystemRun`` over the same workload.

- ``lineage_data``: ``expand_lineage -> map_batches(actor pool) -> reduce_lineage``, consumed with
  ``iter_batches`` and written as shards as batches arrive (a driver-side writer).
- ``lineage_data_shards``: the same plan written by ``lineage_data.connectors.shards.write_shards``, the product's
  Datasink (Ray write tasks commit shards and manifest entries; local disk).
- ``ray_data``: the natural Ray Data pipeline ``flat_map -> map_batches(actor pool) ->
  groupby(doc).map_groups(sort + assemble)``, consumed the same way, with Ray Data's defaults
  (hash shuffle, 200 partitions, aggregator actors).
- ``ray_data_tuned``: the same with the task-based sort shuffle (faster here: no aggregator actors).
- ``per_document``: one actor takes a whole parent (expand, GPU batches of that parent only, assemble).
- ``floor``: ``flat_map -> map_batches`` with no regroup at all: what the GPUs alone cost.
- ``daft``: the same pipeline in Daft (native runner: explode, class UDF, groupby list-agg), if installed.

The Ray Data pipelines split the expanded children into blocks of one GPU batch (``cost.batch_size``
rows), as lineage_data sizes its blocks after an expansion, so a 427-child parent spreads over all GPU
actors in every system and the comparison measures the regroup, not block sizing (see
``bench/README.md``).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from bench.measure import MemorySampler, ShardSink
from bench.workload import (
    CostModel,
    PerDocument,
    SimGPU,
    assemble,
    assemble_group,
    assemble_lineage,
    expand_children,
)

SORT_SHUFFLE = "sort_shuffle_pull_based"
DAFT_PATH_ENV = "LINEAGE_BENCH_DAFT_PATH"
DAFT_DEFAULT_PATH = "/tmp/daftlib"


@dataclass
class Job:
    """One system run's inputs.

    Attributes:
        corpus: the parent rows.
        cost: the cost model.
        timeline_dir: where GPU timeline files go.
        work_dir: scratch space (shards are written under it).
        poison: parents whose ordinal 0 fails (empty: a clean run).
        partitions: Ray Data's groupby partitions (None: Ray's default).
        failure: how lineage_data's poisoned rows fail: a GroupFailure, or a crash of the process.
    """

    corpus: list[dict[str, Any]]
    cost: CostModel
    timeline_dir: Path
    work_dir: Path
    poison: list[str] = field(default_factory=list)
    partitions: int | None = None
    failure: str = "group"  # how lineage_data's poisoned rows fail (see SimGPU): "group" or "crash"


@dataclass
class SystemRun:
    """What one system did: its interval, its sink, memory peaks and system-specific extras."""

    system: str
    start: float
    end: float
    sink: ShardSink
    memory: dict[str, Any]
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def wall_s(self) -> float:
        """Seconds from the start of the run to the last shard written."""
        return self.end - self.start


def _consume(
    system: str,
    job: Job,
    key: str | None,
    batches: Callable[[], Iterable[pa.Table]],
    start: float,
    sampler: MemorySampler,
) -> SystemRun:
    sink = ShardSink(job.work_dir / system, start, key=key)
    try:
        for batch in batches():
            sink.write(batch)
    finally:
        end = time.time()
        memory = sampler.stop()
    return SystemRun(system, start, end, sink, memory)


def _gpu_kwargs(job: Job, system: str, failure: str) -> dict[str, Any]:
    return {
        "cost": job.cost.as_dict(),
        "timeline_dir": str(job.timeline_dir),
        "system": system,
        "poison": list(job.poison),
        "failure": failure,
    }


# -- lineage_data ----------------------------------------------------------------------------------


def lineage_pipeline(job: Job, system: str) -> Any:
    """The lineage_data plan (lazy)."""
    import lineage_data as ld

    cost = job.cost
    return (
        ld.from_items(job.corpus, id_column="doc")
        .expand_lineage(expand_children, name="pages", fn_kwargs={"cost": cost.as_dict()})
        .map_batches(
            SimGPU,
            name="gpu",
            batch_size=cost.batch_size,
            batch_format="pyarrow",
            concurrency=cost.gpus,
            num_gpus=1,
            num_cpus=0.25,
            fn_constructor_kwargs=_gpu_kwargs(job, system, job.failure),
        )
        .reduce_lineage(assemble_lineage, name="assemble", fn_kwargs={"cost": cost.as_dict()})
    )


def run_lineage_data(job: Job, system: str = "lineage_data") -> SystemRun:
    """lineage_data, consumed with ``iter_batches``; the run report goes into ``extra``."""
    import lineage_data as ld

    sampler = MemorySampler()
    sampler.start()
    start = time.time()
    ds = lineage_pipeline(job, system)
    # starts the coordinator and lowers the plan, before the first batch
    batches = ds.iter_batches(batch_size=None, batch_format="pyarrow")
    setup_s = time.time() - start
    run = _consume(system, job, ld.ROOT, lambda: batches, start, sampler)
    report = ds.report()
    children = int(report.stages.filter(report.stages["kind"] == "expand")["children"].sum())
    outcomes = report.parents.group_by("outcome").len().to_dicts()
    run.extra.update(
        {
            "coordinator_calls": report.coordinator_calls,
            "coordinator_calls_per_1000_children": round(
                1000 * report.coordinator_calls / max(1, children), 2
            ),
            "report_wall_s": round(report.wall_s, 3),
            "setup_s": round(setup_s, 3),
            "parents_by_outcome": {d["outcome"]: d["len"] for d in outcomes},
            "report_first_commit_s": round(float(report.parents["committed_s"].min()), 3)
            if report.parents.height
            else None,
            "stages": report.stages.to_dicts(),
        }
    )
    return run


def shard_rows(job: Job) -> int:
    """Rows per shard of ``lineage_data_shards``: about 20 shards a run, so the first commits early."""
    return max(1, len(job.corpus) // 20)


def run_lineage_data_shards(job: Job, system: str = "lineage_data_shards") -> SystemRun:
    """lineage_data written by its own Datasink (``lineage_data.connectors.shards.write_shards``) to local disk.

    The product path: Ray write tasks commit Parquet shards and manifest entries while the pipeline
    runs; nothing passes through the driver but the lineage accounting. The sink's figures come from
    the manifest: ``first_output_s`` is the first committed shard, a parent's commit time its shard's.
    """
    from lineage_data.connectors.shards import read_manifest, write_shards

    sampler = MemorySampler()
    sampler.start()
    start = time.time()
    path = job.work_dir / system / "shards"
    result = write_shards(lineage_pipeline(job, system), str(path), rows_per_shard=shard_rows(job))
    end = time.time()
    memory = sampler.stop()
    entries = [e for e in read_manifest(str(path)).entries if e.run_id == result.run_id]
    sink = ShardSink(job.work_dir / system / "unused", start, key=None)
    sink.shards = len(result.shards)
    sink.rows = result.rows + result.dead_letter_rows
    sink.bytes = sum(e.bytes for e in entries)
    sink.commits = {root: e.committed_at - start for e in entries for root in e.roots}
    sink.first_output_s = min(sink.commits.values()) if sink.commits else None
    run = SystemRun(system, start, end, sink, memory)
    report = result.report
    run.extra.update(
        {
            "rows_per_shard": shard_rows(job),
            "first_shard_s": round(sink.first_output_s, 3)
            if sink.first_output_s is not None
            else None,
            "dead_letter_rows": result.dead_letter_rows,
            "coordinator_calls": report.coordinator_calls if report is not None else None,
        }
    )
    return run


# -- Ray Data --------------------------------------------------------------------------------------


def _expanded(job: Job) -> Any:
    import ray

    ds: Any = ray.data.from_items(job.corpus)
    ds = ds.flat_map(expand_children, fn_kwargs={"cost": job.cost.as_dict()})
    # one GPU batch per block, as lineage_data sizes the blocks after an expansion (_core.physical.block_rows)
    return ds.repartition(target_num_rows_per_block=job.cost.batch_size)


def _gpu(ds: Any, job: Job, system: str) -> Any:
    from ray.data import ActorPoolStrategy

    return ds.map_batches(
        SimGPU,
        fn_constructor_kwargs=_gpu_kwargs(job, system, "flag"),
        batch_size=job.cost.batch_size,
        batch_format="pyarrow",
        compute=ActorPoolStrategy(size=job.cost.gpus),
        num_gpus=1,
        num_cpus=0.25,
    )


def _batches(ds: Any) -> Callable[[], Iterable[pa.Table]]:
    return lambda: ds.iter_batches(batch_size=None, batch_format="pyarrow")


def _not_failed(row: dict[str, Any]) -> bool:
    return not row["failed"]


@contextlib.contextmanager
def _shuffle(strategy: str | None) -> Any:
    """Build datasets under another shuffle strategy (each dataset keeps a copy of the context)."""
    import ray
    from ray.data.context import ShuffleStrategy

    ctx = ray.data.DataContext.get_current()
    saved = ctx.shuffle_strategy
    if strategy is not None:
        ctx.shuffle_strategy = ShuffleStrategy(strategy)
    try:
        yield
    finally:
        ctx.shuffle_strategy = saved


def run_ray_data(job: Job, system: str = "ray_data", *, tuned: bool = False) -> SystemRun:
    """flat_map -> map_batches -> groupby(doc).map_groups(sort + assemble) [-> filter failed].

    ``tuned=False`` is Ray Data as it comes (hash shuffle, 200 partitions); ``tuned=True`` uses the
    task-based sort shuffle, which is faster on a small machine (no aggregator actors to start).
    """
    sampler = MemorySampler()
    sampler.start()
    start = time.time()
    with _shuffle(SORT_SHUFFLE if tuned else None):
        ds = _gpu(_expanded(job), job, system)
        ds = ds.groupby("doc", num_partitions=job.partitions).map_groups(
            assemble_group, fn_kwargs={"cost": job.cost.as_dict()}, batch_format="pyarrow"
        )
        if job.poison:
            ds = ds.filter(_not_failed)
    run = _consume(system, job, "doc", _batches(ds), start, sampler)
    run.extra["shuffle_strategy"] = str(ds.context.shuffle_strategy)
    return run


def run_ray_data_tuned(job: Job, system: str = "ray_data_tuned") -> SystemRun:
    """:func:`run_ray_data` with the sort shuffle."""
    return run_ray_data(job, system, tuned=True)


def run_floor(job: Job, system: str = "floor") -> SystemRun:
    """flat_map -> map_batches -> write: the same stages with no regroup (children rows out)."""
    sampler = MemorySampler()
    sampler.start()
    start = time.time()
    ds = _gpu(_expanded(job), job, system)
    return _consume(system, job, None, _batches(ds), start, sampler)


def run_per_document(job: Job, system: str = "per_document") -> SystemRun:
    """Each parent whole on one actor: no cross-parent batching."""
    import ray
    from ray.data import ActorPoolStrategy

    sampler = MemorySampler()
    sampler.start()
    start = time.time()
    ds: Any = ray.data.from_items(job.corpus, override_num_blocks=len(job.corpus))
    ds = ds.map_batches(
        PerDocument,
        fn_constructor_kwargs={
            "cost": job.cost.as_dict(),
            "timeline_dir": str(job.timeline_dir),
            "system": system,
        },
        batch_size=1,
        batch_format="pyarrow",
        compute=ActorPoolStrategy(size=job.cost.gpus),
        num_gpus=1,
        num_cpus=0.25,
    )
    return _consume(system, job, "doc", _batches(ds), start, sampler)


# -- Daft ------------------------------------------------------------------------------------------


def import_daft() -> Any:
    """Import Daft, from the venv or from ``$LINEAGE_BENCH_DAFT_PATH`` (default ``/tmp/daftlib``).

    Daft pins ``pyarrow<26`` and (for its Ray runner) ``ray<2.60``, so it cannot go into the project's
    venv without downgrading it; ``pip install --no-deps --target /tmp/daftlib daft`` installs it beside.

    Raises:
        ImportError: Daft is not installed in either place.
    """
    try:
        import daft
    except ImportError:
        path = os.environ.get(DAFT_PATH_ENV, DAFT_DEFAULT_PATH)
        if not os.path.isdir(os.path.join(path, "daft")):
            raise
        sys.path.append(path)
        import daft
    # Daft's UDF worker processes must find daft (and bench) too.
    roots = [
        str(Path(daft.__file__).resolve().parents[1]),
        str(Path(__file__).resolve().parents[1]),
    ]
    current = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(current + roots))
    return daft


def run_daft(job: Job, system: str = "daft") -> SystemRun:
    """Daft native runner: explode -> class UDF (N instances, batch cap) -> groupby list-agg -> assemble."""
    daft = import_daft()
    with contextlib.suppress(
        Exception
    ):  # Ray is up in this process: keep Daft off it (it pins ray<2.60)
        daft.set_runner_native()
    cost = job.cost.as_dict()
    gpu_kwargs = _gpu_kwargs(job, system, "flag")

    @daft.func(return_dtype=daft.DataType.list(daft.DataType.int64()))
    def expand(n: int) -> list[int]:
        return [c["ordinal"] for c in expand_children({"doc": "", "n_children": n}, cost=cost)]

    @daft.cls(max_concurrency=job.cost.gpus)
    class DaftGPU:
        def __init__(self) -> None:
            self._gpu = SimGPU(**gpu_kwargs)

        @daft.method.batch(return_dtype=daft.DataType.string(), batch_size=job.cost.batch_size)
        def __call__(self, doc: Any, ordinal: Any) -> list[str]:
            table = pa.table({"doc": doc.to_arrow(), "ordinal": ordinal.to_arrow()})
            return self._gpu(table)["text"]

    @daft.func(return_dtype=daft.DataType.string())
    def assemble_doc(doc: str, ordinals: list[int], texts: list[str]) -> str:
        pairs = sorted(zip(ordinals, texts, strict=True))
        return assemble(doc, [p[0] for p in pairs], [p[1] for p in pairs], cost)["text"]

    sampler = MemorySampler()
    sampler.start()
    start = time.time()
    df = daft.from_pylist(job.corpus)
    df = df.with_column("ordinal", expand(df["n_children"])).explode("ordinal")
    df = df.with_column("text", DaftGPU()(df["doc"], df["ordinal"]))
    df = df.groupby("doc").agg(daft.col("ordinal").list_agg(), daft.col("text").list_agg())
    df = df.select("doc", assemble_doc(df["doc"], df["ordinal"], df["text"]).alias("text"))

    def batches() -> Iterable[pa.Table]:
        for batch in df.to_arrow_iter():
            yield pa.Table.from_batches([batch]) if isinstance(batch, pa.RecordBatch) else batch

    return _consume(system, job, "doc", batches, start, sampler)


SYSTEMS: dict[str, Callable[[Job], SystemRun]] = {
    "floor": run_floor,
    "ray_data": run_ray_data,
    "ray_data_tuned": run_ray_data_tuned,
    "lineage_data": run_lineage_data,
    "lineage_data_shards": run_lineage_data_shards,
    "per_document": run_per_document,
    "daft": run_daft,
}


def clean(path: Path) -> None:
    """Remove a scratch directory."""
    shutil.rmtree(path, ignore_errors=True)
