"""Several batches in flight per actor (Ray Data's ``max_concurrent_calls_per_actor``) on lineage.

An async model stage (AsyncVllmStage on the CPU stand-in of vLLM's async engine, with a latency per
request) on a one-actor pool: with 4 calls per actor the engine holds 4 batches' requests at once,
with 1 it holds one batch's; the output is the same and in order. A synchronous class with
``enable_true_multi_threading`` runs in threads, each with its own operator. A row that kills its
worker while other batches are in flight on the same actor is the only root that fails.
"""

from __future__ import annotations

import functools
import os
import sys
import threading
import time

import pytest
from ray.data import ActorPoolStrategy
from reference import by_root, status

import lineage_data as ld
from lineage_data.connectors.echo_llm import EchoAsyncLLM
from lineage_data.connectors.vllm import AsyncVllmStage

BATCH = 4


@pytest.fixture(autouse=True)
def _by_value(ray_session):
    ray_session.cloudpickle.register_pickle_by_value(sys.modules[__name__])


def pages(doc):
    for page in range(doc["n"]):
        yield {"text": f"{doc['doc']} page {page}", "page": page}


def docs(counts):
    items = [{"doc": f"d{i:02d}", "n": n} for i, n in enumerate(counts)]
    return ld.from_items(items, id_column="doc").expand_lineage(pages, carry=["doc"], name="pages")


def assemble(parent, kids):
    return {"doc": parent["doc"], "texts": [k["generation"] for k in kids]}


def run_async_stage(tmp_path, calls_per_actor):
    log = tmp_path / f"peaks-{calls_per_actor}.log"
    counts = [5, 1, 12, 3, 8, 7]
    ds = docs(counts).map_batches(
        AsyncVllmStage,
        name="caption",
        batch_size=BATCH,
        num_cpus=0.25,
        compute=ActorPoolStrategy(size=1, max_concurrent_calls_per_actor=calls_per_actor),
        fn_constructor_kwargs={
            "model": "echo",
            "image_column": None,
            "llm_factory": functools.partial(EchoAsyncLLM, latency_s=0.25, log_path=str(log)),
        },
    )
    rows = by_root(ds.reduce_lineage(assemble, name="docs").take_all())
    for i, n in enumerate(counts):
        doc = f"d{i:02d}"
        assert rows[doc]["_lineage_outcome"] == "PRESENT"
        assert list(rows[doc]["texts"]) == [f"echo: {doc} page {p}" for p in range(n)]
    return max(int(line) for line in log.read_text().split())


def test_an_async_stage_keeps_several_batches_in_flight_per_actor(tmp_path):
    # (a block may end a batch short of BATCH rows)
    assert run_async_stage(tmp_path, 1) <= BATCH  # one batch's requests at a time
    assert run_async_stage(tmp_path, 4) > 3 * BATCH  # four batches' requests together


class Overlap:
    """A synchronous batch class that records how many of its calls overlap (in a file)."""

    def __init__(self, log):
        self.log, self.lock, self.running = log, threading.Lock(), 0

    def __call__(self, batch):
        with self.lock:
            self.running += 1
            with open(self.log, "a") as f:
                f.write(f"{self.running}\n")
        time.sleep(0.3)
        with self.lock:
            self.running -= 1
        return {"value": [len(t) for t in batch["text"]]}


def test_a_threaded_sync_class_runs_calls_together_and_keeps_lineage(tmp_path):
    log = tmp_path / "overlap.log"
    counts = [3, 9, 4, 6]
    compute = ActorPoolStrategy(
        size=1, max_concurrent_calls_per_actor=3, enable_true_multi_threading=True
    )
    ds = docs(counts).map_batches(
        Overlap,
        name="score",
        batch_size=2,
        num_cpus=0.25,
        compute=compute,
        fn_constructor_kwargs={"log": str(log)},
    )
    out = by_root(ds.reduce_lineage(name="docs").take_all())
    for i, n in enumerate(counts):
        doc = f"d{i:02d}"
        assert list(out[doc]["value"]) == [len(f"{doc} page {p}") for p in range(n)]
    assert max(int(line) for line in log.read_text().split()) == 3


class DiesOn:
    """Kills its process whenever a batch holds page 1 of d02; other calls sleep a little."""

    def __call__(self, batch):
        if any(t == "d02 page 1" for t in batch["text"]):
            os._exit(3)
        time.sleep(0.05)
        return {"value": [len(t) for t in batch["text"]]}


def test_a_crash_among_batches_in_flight_fails_only_its_own_root():
    counts = [4, 4, 4, 4, 4, 4]
    compute = ActorPoolStrategy(
        size=1, max_concurrent_calls_per_actor=3, enable_true_multi_threading=True
    )
    ds = docs(counts).map_batches(
        DiesOn, name="score", batch_size=2, num_cpus=0.25, compute=compute, max_crash_retries=0
    )
    ds = ds.reduce_lineage(name="docs")
    out = by_root(ds.take_all(), ds.report())
    outcome, cause, stage = status(out["d02"])
    assert (outcome, stage) == ("SUPPRESSED", "score"), status(out["d02"])
    assert "WorkerCrashedError" in cause
    for i, n in enumerate(counts):
        doc = f"d{i:02d}"
        if doc != "d02":
            assert out[doc]["_lineage_outcome"] == "PRESENT", status(out[doc])
            assert list(out[doc]["value"]) == [len(f"{doc} page {p}") for p in range(n)]
