"""``coordinator``: how many child events one coordinator actor sustains, and its memory per parent.

Throughput: ``tasks`` Ray tasks drive one coordinator (``start_coordinator`` + ``CoordinatorClient``)
the way map workers do: per batch of ``batch`` children (mixing parents), one ``handoff`` and one
``commit``; one ``reduced`` call per batch that completes parents. An *event* is one child handed off and
committed. Sustained rate = all children / (last task end - first task start).

Memory: :class:`LineageState` in this process under ``tracemalloc``: K parents registered, then all their
children handed off and committed (in flight), then released (reduced), then recorded terminal.
"""

from __future__ import annotations

import time
import tracemalloc
from pathlib import Path
from typing import Any

from bench.common import code_version, log, stamp
from bench.measure import MemorySampler, results_path, write_json

CHILDREN_PER_PARENT = 47
TASKS = 4
PARENTS = {"smoke": 400, "small": 4000, "full": 20000}
BATCHES = {"smoke": (64,), "small": (32, 64, 256), "full": (32, 64, 256)}
HEADLINE_BATCH = 64
MEMORY_K = {"smoke": (100, 1000), "small": (100, 1000, 5000), "full": (100, 1000, 10000)}


def _drive(client: Any, parents: list[str], batch: int, go_at: float) -> dict[str, Any]:
    """One task: hand off and commit its parents' children in batches, release finished parents."""
    rows = [(root, i) for root in parents for i in range(CHILDREN_PER_PARENT)]
    remaining = dict.fromkeys(parents, CHILDREN_PER_PARENT)
    while time.time() < go_at:
        time.sleep(0.002)
    start = time.time()
    calls = 0
    for lo in range(0, len(rows), batch):
        chunk = rows[lo : lo + batch]
        roots = [r for r, _ in chunk]
        paths = [(i,) for _, i in chunk]
        n = len(chunk)
        handoff = client.handoff(1, roots, paths)
        client.commit(
            1, handoff.generation, roots, paths, ["PRESENT"] * n, [None] * n,
            group=[False] * n, stage="gpu",
        )
        calls += 2
        done = []
        for root in roots:
            remaining[root] -= 1
            if remaining[root] == 0:
                done.append(root)
        if done:
            client.reduced("assemble", done, [()] * len(done), {"PRESENT": len(done)})
            calls += 1
    return {"children": len(rows), "calls": calls, "start": start, "end": time.time()}


def throughput(n_parents: int, batch: int, tasks: int = TASKS) -> dict[str, Any]:
    """Drive a fresh coordinator from ``tasks`` Ray tasks; events/s and per-call latency."""
    import ray

    from lineage_data._ray.actors import kill_all, new_run_id
    from lineage_data._ray.coordinator import start_coordinator

    sampler = MemorySampler(interval_s=0.1)
    sampler.start()
    client, _ = start_coordinator(new_run_id())
    roots = [f"doc-{i:07d}" for i in range(n_parents)]
    drive = ray.remote(num_cpus=1)(_drive)
    go_at = time.time() + 1.0
    shards = [roots[t::tasks] for t in range(tasks)]
    refs = [drive.remote(client, shard, batch, go_at) for shard in shards]
    stats = ray.get(refs)
    progress = client.snapshot()
    memory = sampler.stop()
    kill_all([client.helper])
    children = sum(s["children"] for s in stats)
    calls = sum(s["calls"] for s in stats)
    span = max(s["end"] for s in stats) - min(s["start"] for s in stats)
    return {
        "batch": batch,
        "tasks": tasks,
        "parents": n_parents,
        "children": children,
        "calls": calls,
        "seconds": round(span, 3),
        "events_per_s": round(children / span, 1),
        "calls_per_s": round(calls / span, 1),
        "mean_call_ms_per_task": round(1000 * span * tasks / calls, 3),
        "in_flight_parents_at_end": progress["in_flight_parents"],
        **memory,
    }


def state_memory(k: int) -> dict[str, Any]:
    """tracemalloc bytes of a :class:`LineageState` at each phase, for ``k`` parents of 47 children."""
    import pyarrow as pa

    from lineage_data._core import columns as C
    from lineage_data._core.ledger import Ledger
    from lineage_data._core.state import LineageState

    roots = [f"doc-{i:07d}" for i in range(k)]
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        state = LineageState()
        ledger = Ledger(0, roots, started_at=0.0)
        registered = tracemalloc.get_traced_memory()[0] - base
        for root in roots:
            r = [root] * CHILDREN_PER_PARENT
            p = [(i,) for i in range(CHILDREN_PER_PARENT)]
            h = state.handoff(1, r, p)
            state.commit(1, h.generation, r, p, ["PRESENT"] * len(r), [None] * len(r),
                         group=[False] * len(r), stage="gpu")
        in_flight = tracemalloc.get_traced_memory()[0] - base
        state.reduced("assemble", roots, [()] * k, {"PRESENT": k})
        released = tracemalloc.get_traced_memory()[0] - base
        done = C.conform(pa.table({C.ROOT: roots, C.OUTCOME: ["PRESENT"] * k}))
        before_take = tracemalloc.get_traced_memory()[0]
        ledger.take(done, 1.0)
        terminal = released + tracemalloc.get_traced_memory()[0] - before_take
    finally:
        tracemalloc.stop()
    return {
        "parents": k,
        "children_per_parent": CHILDREN_PER_PARENT,
        "registered_bytes": registered,
        "in_flight_bytes": in_flight,
        "after_release_bytes": released,
        "after_terminal_bytes": terminal,
        "registry_bytes_per_root": round(registered / k, 1),
        "bytes_per_in_flight_parent": round((in_flight - registered) / k, 1),
        "bytes_per_released_parent": round((released - registered) / k, 1),
        "terminal_record_bytes_per_root": round((terminal - released) / k, 1),
    }


def run(scale: str, out_dir: Path, *, seed: int = 0) -> dict[str, Any]:
    """Throughput per batch size and memory per in-flight parent; write JSON; return the headline."""
    del seed
    n_parents = PARENTS[scale]
    runs = []
    for batch in BATCHES[scale]:
        res = throughput(n_parents, batch)
        runs.append(res)
        log(f"coordinator/{scale}: batch {batch}: {res['events_per_s']:.0f} events/s, "
            f"{res['calls_per_s']:.0f} calls/s")
    memory = [state_memory(k) for k in MEMORY_K[scale]]
    for m in memory:
        log(f"coordinator/{scale}: K={m['parents']}: {m['bytes_per_in_flight_parent']:.0f} B per in-flight "
            f"parent, {m['bytes_per_released_parent']:.0f} B after release")
    head = next(r for r in runs if r["batch"] == HEADLINE_BATCH)
    headline = {
        "bench": "coordinator",
        "scale": scale,
        "events_per_s": head["events_per_s"],
        "batch": HEADLINE_BATCH,
        "events_per_s_by_batch": {str(r["batch"]): r["events_per_s"] for r in runs},
        "bytes_per_in_flight_parent": memory[-1]["bytes_per_in_flight_parent"],
        "bytes_per_released_parent": memory[-1]["bytes_per_released_parent"],
        "bytes_per_root_kept_to_the_end": round(
            memory[-1]["registry_bytes_per_root"] + memory[-1]["terminal_record_bytes_per_root"], 1
        ),
    }
    data = {
        "bench": "coordinator",
        "scale": scale,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "code": code_version(),
        "notes": (__doc__ or "").strip(),
        "throughput": runs,
        "state_memory": memory,
        "headline": headline,
    }
    path = results_path(out_dir, "coordinator", scale, "json", stamp())
    write_json(path, data)
    log(f"wrote {path}")
    return headline
