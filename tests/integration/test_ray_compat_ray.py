"""The touchpoints of :mod:`lineage_data._ray.compat` that need a running Ray (see tests/unit/test_ray_compat.py)."""

import os
import uuid
from pathlib import Path

import pyarrow as pa
import pytest
import ray

from lineage_data._ray import compat


def test_touchpoint_internal_kv_on_a_cluster():
    namespace, run = "lineage_data_compat_test", uuid.uuid4().hex
    key, other = f"{run}\x1fa".encode(), f"{run}\x1fb".encode()
    assert compat.kv_multi_get([key, other], namespace) == {}
    assert compat.kv_put_new(key, "first", namespace) is False  # written
    assert compat.kv_put_new(key, "second", namespace) is True  # there already: kept
    assert compat.kv_get(key, namespace) == b"first"
    assert compat.kv_multi_get([key, other], namespace) == {key: b"first"}
    compat.kv_delete_prefix(run, namespace)
    assert compat.kv_get(key, namespace) is None


def test_touchpoint_node_logs_dir_on_the_driver():
    logs = compat.node_logs_dir()
    assert logs is not None and os.path.isdir(logs)
    assert compat.node_logs_dir(workers_only=True) is None  # a driver is not a worker


def test_a_worker_that_records_an_attempt_keeps_its_last_words_in_a_file_of_its_own():
    @ray.remote(num_cpus=0.25)
    def crash_reason() -> tuple[str, str | None]:
        import ctypes

        from lineage_data._ray.deaths import this_worker

        worker = this_worker()
        assert compat.node_logs_dir(workers_only=True) is not None
        ctypes.string_at(0)  # SIGSEGV: faulthandler writes, then the process dies
        return worker, None

    with pytest.raises(ray.exceptions.WorkerCrashedError):
        ray.get(crash_reason.options(max_retries=0).remote())
    logs = compat.node_logs_dir()
    ours = [p for p in os.listdir(logs) if p.startswith("lineage-data-") and p.endswith(".err")]
    texts = [Path(logs, p).read_bytes() for p in ours]
    assert any(b"Fatal Python error: Segmentation fault" in t for t in texts), ours
    from lineage_data._ray.deaths import why_died

    worker = next(p for p, t in zip(ours, texts, strict=True) if b"Segmentation fault" in t)
    assert (
        why_died([worker.removeprefix("lineage-data-").removesuffix(".err")])
        == "Segmentation fault"
    )


def test_touchpoint_worker_table_on_a_cluster():
    me = ray.get_runtime_context().get_worker_id()
    assert compat.workers_killed_for_memory({me, "00" * 28}) == set()  # read, nothing killed


def test_touchpoint_dataset_plan_and_row_count():
    ds = ray.data.from_items([{"x": i} for i in range(40)], override_num_blocks=4)
    blocks = compat.in_memory_blocks(ds)
    assert blocks is not None and sorted(m.num_rows for m in blocks) == [10, 10, 10, 10]
    assert compat.in_memory_blocks(ray.data.range(10).map_batches(lambda b: b)) == []
    assert compat.known_row_count(ds) == 40
    copied = compat.deep_copy(ds)
    assert copied.context is not ds.context
    copied.context.target_max_block_size = 123  # a setting on the copy never reaches ds
    assert ds.context.target_max_block_size != 123


def test_touchpoint_output_blocks_and_map_task_name():
    def named(batch: pa.Table) -> pa.Table:
        return batch.append_column("task", pa.array([compat.map_task_name()] * batch.num_rows))

    ds = ray.data.range(20, override_num_blocks=2).map_batches(named, batch_format="pyarrow")
    blocks = list(compat.output_blocks(ds))
    assert sum(rows for _, rows, _ in blocks) == 20 and all(size > 0 for _, _, size in blocks)
    tables = ray.get([ref for ref, _, _ in blocks])
    names = {n for t in tables for n in t["task"].to_pylist()}
    assert all(n is not None and "#" in n for n in names), names

    stream = compat.output_blocks(ray.data.range(100, override_num_blocks=10))
    next(stream)
    stream.close()  # (stops Ray Data's executor; no error)


def test_touchpoint_execution_callback_on_a_run():
    calls: list[str] = []
    ds = compat.deep_copy(ray.data.range(5))
    compat.on_execution_end(ds, lambda: calls.append("start"), lambda: calls.append("end"))
    assert ds.map_batches(lambda b: b).count() == 5
    assert calls == ["start", "end"]


def test_touchpoint_actor_ready():
    @ray.remote(num_cpus=0)
    class Up:
        pass

    handle = Up.remote()
    try:
        ray.get(compat.actor_ready(handle), timeout=60)  # resolves once it is up
    finally:
        ray.kill(handle)


def test_touchpoint_object_store_stats():
    used, spilled = compat.object_store_stats()
    assert isinstance(used, int) and isinstance(spilled, int) and used >= 0 and spilled >= 0
