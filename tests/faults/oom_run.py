"""One input whose row allocates past what Ray's memory monitor allows; run by ``test_fault_oom.py``.

``python oom_run.py``: starts a Ray instance of its own whose memory monitor acts at the node's
memory in use now plus ``MARGIN`` (``memory_usage_threshold``, checked every 100 ms), then runs
expand -> map_batches -> reduce over a few documents where one page allocates ``ALLOCATE`` bytes and
holds them, on every attempt. Ray's monitor kills that worker each time and Ray retries the task
without end; the lineage layer must end that page FAILED, its document SUPPRESSED with a cause that
says out of memory, and every other document PRESENT. Prints one JSON line: ``{"rows": {root:
[outcome, cause, value]}, "threshold": float}``.
"""

from __future__ import annotations

import json
import sys
import time

import psutil

MARGIN = 2 << 30  # the monitor acts once this much more memory is in use on the node
ALLOCATE = 4 << 30  # what the bad page takes (and touches)
BAD = "d2"


def pages(doc):
    return ({"doc": doc["doc"], "page": p} for p in range(3))


def score(batch):
    import numpy as np

    if any(d == BAD and p == 1 for d, p in zip(batch["doc"], batch["page"], strict=True)):
        hog = np.ones(ALLOCATE // 8)  # touched: resident, as a decoder's buffers would be
        time.sleep(30)  # the monitor kills the process long before this returns
        del hog
    return {"value": batch["page"] * 10}


class Score:
    """``score`` on an actor pool (``oom_run.py actors``): Ray restarts the actor the monitor kills."""

    def __call__(self, batch):
        return score(batch)


def assemble(doc, kids):
    return {"value": [k["value"] for k in kids]}


def main() -> int:
    import ray

    import lineage_data as ld

    memory = psutil.virtual_memory()
    threshold = (memory.total - memory.available + MARGIN) / memory.total
    ray.init(
        num_cpus=4,
        include_dashboard=False,
        log_to_driver=False,
        _system_config={
            "memory_usage_threshold": threshold,
            "memory_monitor_refresh_ms": 100,
            "task_oom_retry_delay_base_ms": 100,
        },
    )
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    if sys.argv[1:] == ["actors"]:  # the defaults, as a user writes them first
        stage = {"fn": Score, "compute": ray.data.ActorPoolStrategy(size=2), "num_cpus": 0.25}
    else:
        stage = {"fn": score, "max_crash_retries": 0}
    ds = (
        ld.from_items([{"doc": f"d{i}"} for i in range(5)], id_column="doc")
        .expand_lineage(pages, name="pages")
        .map_batches(name="score", batch_size=3, **stage)
        .reduce_lineage(assemble, name="docs")
    )
    rows = {
        r["_lineage_root"]: [r["_lineage_outcome"], r["_lineage_cause"], r.get("value")]
        for r in ds.take_all()
    }
    print(json.dumps({"rows": rows, "threshold": threshold}))
    ray.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
