"""``coordinator``: how many child events one coordinator actor sustains, and its memory per parent.

Throughput: ``tasks`` Ray tasks drive one coordinator (``start_coordinator`` + ``CoordinatorClient``)
the way map workers do: per batch of ``batch`` children (mixing parents), one ``handoff`` and one
``commit``; one ``reduced`` call per batch that completes parents. An *event* is one child handed off and
committed. Sustained rate = all children / (last task end - first task start).

Call cost: one Ray task times ``snapshot`` calls (no work in the state) and handoff + commit pairs at
batch 64, over the client's socket channel and as plain Ray actor calls.

Memory: :class:`LineageState` in this process under ``tracemalloc``: K parents handed off and committed
(in flight), then released (reduced). What is kept per root to the end: a :class:`Ledger` that expects
and accounts 1M roots (smoke: 100k) and a state's root registry of as many, measured as Python heap
(tracemalloc) + Arrow memory pool bytes left allocated.
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
LEDGER_ROOTS = {"smoke": 100_000, "small": 1_000_000, "full": 1_000_000}


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
            1,
            handoff.generation,
            roots,
            paths,
            ["PRESENT"] * n,
            [None] * n,
            group=[False] * n,
            stage="gpu",
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
    from lineage_data._core.state import LineageState

    roots = [f"doc-{i:07d}" for i in range(k)]
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        state = LineageState()
        registered = tracemalloc.get_traced_memory()[0] - base
        for root in roots:
            r = [root] * CHILDREN_PER_PARENT
            p = [(i,) for i in range(CHILDREN_PER_PARENT)]
            h = state.handoff(1, r, p)
            state.commit(
                1,
                h.generation,
                r,
                p,
                ["PRESENT"] * len(r),
                [None] * len(r),
                group=[False] * len(r),
                stage="gpu",
            )
        in_flight = tracemalloc.get_traced_memory()[0] - base
        state.reduced("assemble", roots, [()] * k, {"PRESENT": k})
        released = tracemalloc.get_traced_memory()[0] - base
    finally:
        tracemalloc.stop()
    return {
        "parents": k,
        "children_per_parent": CHILDREN_PER_PARENT,
        "in_flight_bytes": in_flight,
        "after_release_bytes": released,
        "bytes_per_in_flight_parent": round((in_flight - registered) / k, 1),
        "bytes_per_released_parent": round((released - registered) / k, 1),
    }


def _held(fn: Any) -> tuple[Any, int]:
    """``fn()`` and the bytes it left allocated: Python heap (tracemalloc) + Arrow's memory pool."""
    import gc

    import pyarrow as pa

    gc.collect()
    arrow = pa.total_allocated_bytes()
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        value = fn()
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - base
    finally:
        tracemalloc.stop()
    return value, held + pa.total_allocated_bytes() - arrow


def ledger_memory(n: int, failed_frac: float = 0.01) -> dict[str, Any]:
    """Bytes per finished root that the driver's :class:`Ledger` and a coordinator's registry keep.

    ``n`` roots are expected, then delivered in batches of 4,096 terminal rows (``failed_frac`` of them
    FAILED with a cause: those keep their cause and stage). Ids are 13 bytes (``doc-000000001``).
    """
    import pyarrow as pa

    from lineage_data._core import columns as C
    from lineage_data._core.ledger import Ledger
    from lineage_data._core.state import LineageState

    roots = [f"doc-{i:09d}" for i in range(n)]
    every = max(1, round(1 / failed_frac)) if failed_frac else 0

    def account() -> Ledger:
        ledger = Ledger(0, roots, started_at=0.0)
        for lo in range(0, n, 4096):
            part = roots[lo : lo + 4096]
            bad = [every and (lo + i) % every == 0 for i in range(len(part))]
            ledger.take(
                C.conform(
                    pa.table(
                        {
                            C.ROOT: part,
                            C.OUTCOME: ["FAILED" if b else "PRESENT" for b in bad],
                            C.CAUSE: ["ValueError: bad page" if b else None for b in bad],
                            C.STAGE: ["ocr" if b else None for b in bad],
                        }
                    )
                ),
                1.0,
            )
        return ledger

    started = time.perf_counter()
    ledger, ledger_bytes = _held(account)
    account_s = time.perf_counter() - started
    if ledger.missing() or ledger.progress()["committed"] + ledger.progress()["failed"] != n:
        raise AssertionError("ledger did not account for every root")

    def register() -> LineageState:
        state = LineageState()
        for lo in range(0, n, 4096):
            state.register_roots(roots[lo : lo + 4096], f"block-{lo}")
        return state

    _, registry_bytes = _held(register)
    per_root = ledger_bytes / n
    return {
        "roots": n,
        "id_bytes": len(roots[0]),
        "failed_frac": failed_frac,
        "ledger_bytes": ledger_bytes,
        "ledger_bytes_per_finished_root": round(per_root, 1),
        "ledger_nbytes_per_root": round(ledger.nbytes / n, 1),
        "registry_bytes_per_root": round(registry_bytes / n, 1),
        "account_s": round(account_s, 3),
        "projection_gib": {
            f"{m // 1_000_000}M": round(per_root * m / 2**30, 2) for m in (10_000_000, 100_000_000)
        },
    }


def call_cost(calls: int = 2000, batch: int = HEADLINE_BATCH) -> dict[str, Any]:
    """Mean ms per coordinator call from one Ray task: the client's socket channel vs a Ray call.

    ``empty``: ``snapshot`` (no work in the state); ``handoff_commit``: one handoff + one commit of
    ``batch`` children (the two calls a map batch makes), per pair.
    """
    import ray

    from lineage_data._ray.actors import kill_all, new_run_id
    from lineage_data._ray.coordinator import start_coordinator

    def measure(client: Any, calls: int, batch: int) -> dict[str, float]:
        out = {}
        for via in ("socket", "ray"):
            call = client._call if via == "socket" else client.ray_call
            call("snapshot")  # connect / warm up
            start = time.perf_counter()
            for _ in range(calls):
                call("snapshot")
            out[f"empty_ms_{via}"] = 1000 * (time.perf_counter() - start) / calls
            pairs = max(1, calls // 4)
            start = time.perf_counter()
            for j in range(pairs):
                roots = [f"p{via}-{j}-{i // 8}" for i in range(batch)]
                paths = [(i % 8,) for i in range(batch)]
                h = call("handoff", 1, roots, paths)
                call(
                    "commit",
                    1,
                    h.generation,
                    roots,
                    paths,
                    ["PRESENT"] * batch,
                    [None] * batch,
                    group=[False] * batch,
                )
            out[f"handoff_commit_ms_{via}"] = 1000 * (time.perf_counter() - start) / pairs
        return {k: round(v, 4) for k, v in out.items()}

    client, _ = start_coordinator(new_run_id())
    try:
        result = ray.get(ray.remote(num_cpus=1)(measure).remote(client, calls, batch))
    finally:
        kill_all([client.helper])
    return {"calls": calls, "batch": batch, **result}


def run(scale: str, out_dir: Path, *, seed: int = 0) -> dict[str, Any]:
    """Throughput per batch size and memory per in-flight parent; write JSON; return the headline."""
    del seed
    n_parents = PARENTS[scale]
    runs = []
    for batch in BATCHES[scale]:
        res = throughput(n_parents, batch)
        runs.append(res)
        log(
            f"coordinator/{scale}: batch {batch}: {res['events_per_s']:.0f} events/s, "
            f"{res['calls_per_s']:.0f} calls/s"
        )
    memory = [state_memory(k) for k in MEMORY_K[scale]]
    for m in memory:
        log(
            f"coordinator/{scale}: K={m['parents']}: {m['bytes_per_in_flight_parent']:.0f} B per in-flight "
            f"parent, {m['bytes_per_released_parent']:.0f} B after release"
        )
    ledger = ledger_memory(LEDGER_ROOTS[scale])
    log(
        f"coordinator/{scale}: ledger: {ledger['ledger_bytes_per_finished_root']:.1f} B per finished root "
        f"({ledger['roots']} roots), registry {ledger['registry_bytes_per_root']:.1f} B per root"
    )
    cost = call_cost(200 if scale == "smoke" else 2000)
    log(
        f"coordinator/{scale}: per call {cost['empty_ms_socket']:.3f} ms (socket) vs "
        f"{cost['empty_ms_ray']:.3f} ms (Ray actor call)"
    )
    head = next(r for r in runs if r["batch"] == HEADLINE_BATCH)
    headline = {
        "bench": "coordinator",
        "scale": scale,
        "events_per_s": head["events_per_s"],
        "batch": HEADLINE_BATCH,
        "events_per_s_by_batch": {str(r["batch"]): r["events_per_s"] for r in runs},
        "call_ms": cost["empty_ms_socket"],
        "call_ms_ray": cost["empty_ms_ray"],
        "handoff_commit_ms": cost["handoff_commit_ms_socket"],
        "bytes_per_in_flight_parent": memory[-1]["bytes_per_in_flight_parent"],
        "bytes_per_released_parent": memory[-1]["bytes_per_released_parent"],
        "bytes_per_root_kept_to_the_end": ledger["ledger_bytes_per_finished_root"],
        "registry_bytes_per_root": ledger["registry_bytes_per_root"],
    }
    data = {
        "bench": "coordinator",
        "scale": scale,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "code": code_version(),
        "notes": (__doc__ or "").strip(),
        "throughput": runs,
        "state_memory": memory,
        "ledger_memory": ledger,
        "call_cost": cost,
        "headline": headline,
    }
    path = results_path(out_dir, "coordinator", scale, "json", stamp())
    write_json(path, data)
    log(f"wrote {path}")
    return headline
