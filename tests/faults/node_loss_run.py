"""Node loss on a 3-node local cluster; run by ``test_fault_nodes.py`` in its own process.

``python node_loss_run.py LOG_DIR``: starts a head (2 logical CPUs) and two worker nodes (4 logical CPUs
each) with ``ray.cluster_utils.Cluster``, runs the standard fault pipeline once clean, then once per
worker node with that node removed (all its processes SIGKILLed) as soon as it runs a busy worker of
the pipeline after the first row arrived; a fresh node joins before the next run. Prints one JSON line:
``{"clean": RUN, "runs": [RUN + {"node", "removed_at", "busy_on_node", "removal_error"}]}`` where
``RUN = {"rows", "error", "ended_at", "map_ends", "reduces"}``.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
import traceback
from pathlib import Path

import faultkit  # beside this script: on sys.path when run as a script
import psutil

HEAD_CPUS = 2
WORKER_CPUS = 4
NODE_MEMORY = 150 * 1024 * 1024
WAIT_FOR_BUSY_S = 5.0
# The GCS notices a dead node within ~1.5 s instead of ~15-30 s (Ray's own tests do the same).
FAST_NODE_DEATH = {
    "health_check_initial_delay_ms": 0,
    "health_check_period_ms": 500,
    "health_check_timeout_ms": 500,
    "health_check_failure_threshold": 3,
}  # after the first row: remove the node once it runs our work (or after this)


# The reduce as tasks of its own (as after a GPU pool): without arguments it runs in the map's two
# actors (lineage_data._core.physical.fold), and a worker node that got neither actor would run
# no work of the pipeline after the first row. A dead actor with a folded reduce in it is covered by
# test_fault_workers.py (its random kills hit the map's actors).
REDUCE_ARGS = {"num_cpus": 1}

T0 = time.time()


def _log(message: str) -> None:
    sys.stderr.write(f"[node_loss_run +{time.time() - T0:.1f}s] {message}\n")
    sys.stderr.flush()


def _jsonable_run(run: faultkit.RunResult, log_dir: Path) -> dict:
    return {
        "rows": run.rows,
        "error": None if run.error is None else faultkit.describe_error(run.error),
        "ended_at": run.ended_at,
        "map_ends": faultkit.log_times(log_dir, "map"),
        "reduces": faultkit.log_times(log_dir, "reduce"),
    }


class NodeRemover(threading.Thread):
    """Armed at the first row: removes ``node`` once one of its workers runs the pipeline."""

    def __init__(self, cluster, node) -> None:
        super().__init__(daemon=True, name="node-remover")
        self.cluster, self.node = cluster, node
        raylet = node.all_processes["raylet"][0].process
        self.raylet = psutil.Process(raylet.pid)
        self.before = faultkit.ray_workers([self.raylet])  # leftovers of earlier runs are not ours
        self.armed = threading.Event()
        self.done = threading.Event()
        self.removed_at: float | None = None
        self.busy: dict[int, str] = {}
        self.error: str | None = None

    def on_row(self, n: int) -> None:
        self.armed.set()

    def run(self) -> None:
        self.armed.wait()
        deadline = time.time() + WAIT_FOR_BUSY_S
        while time.time() < deadline:
            busy = {
                pid: title
                for pid, title in faultkit.ray_workers([self.raylet]).items()
                if not faultkit.is_internal(title) and self.before.get(pid) != title
            }
            if busy:
                self.busy = busy
                break
            time.sleep(0.02)
        try:
            self.removed_at = time.time()
            self.cluster.remove_node(self.node, allow_graceful=False)
        except Exception:  # noqa: BLE001 - reported in the JSON
            self.error = traceback.format_exc()[-2000:]
        self.done.set()


def main(log_root: str) -> dict:
    import ray
    from ray.cluster_utils import Cluster

    cluster = Cluster(
        initialize_head=True,
        head_node_args={
            "num_cpus": HEAD_CPUS,
            "object_store_memory": NODE_MEMORY,
            "_system_config": FAST_NODE_DEATH,
        },
    )
    workers = [
        cluster.add_node(num_cpus=WORKER_CPUS, object_store_memory=NODE_MEMORY) for _ in range(2)
    ]
    cluster.wait_for_nodes()
    _log("cluster up")
    ray.init(address=cluster.address, log_to_driver=False)
    ray.data.DataContext.get_current().enable_progress_bars = False
    ray.cloudpickle.register_pickle_by_value(faultkit)
    out: dict = {"runs": []}
    try:
        log_dir = Path(log_root) / "clean"
        out["clean"] = _jsonable_run(
            faultkit.consume(faultkit.pipeline(log_dir, reduce_args=REDUCE_ARGS)), log_dir
        )
        _log(f"clean run: {len(out['clean']['rows'])} rows, error {out['clean']['error']}")
        for i in range(len(workers)):
            remover = NodeRemover(cluster, workers[i])
            remover.start()
            log_dir = Path(log_root) / f"node{i}"
            run = faultkit.consume(
                faultkit.pipeline(log_dir, reduce_args=REDUCE_ARGS), remover.on_row
            )
            remover.armed.set()  # a run that yields no row still removes the node
            remover.done.wait(timeout=60)
            entry = _jsonable_run(run, log_dir)
            entry.update(
                node=i,
                removed_at=remover.removed_at,
                busy_on_node=sorted(remover.busy.values()),
                removal_error=remover.error,
            )
            out["runs"].append(entry)
            _log(f"node {i} run: {len(run.rows)} rows, busy there {entry['busy_on_node']}")
            workers[i] = cluster.add_node(num_cpus=WORKER_CPUS, object_store_memory=NODE_MEMORY)
            cluster.wait_for_nodes()
            _log("node added")
    finally:
        ray.shutdown()
        cluster.shutdown()
    return out


if __name__ == "__main__":
    os.environ.setdefault("LINEAGE_DATA_PROGRESS", "0")
    result = main(sys.argv[1])
    sys.stdout.write("\n" + json.dumps(result, default=str) + "\n")
    sys.stdout.flush()
