"""Inputs that crash or hang the process under a stage: that input fails, the run completes.

The user functions kill their own worker process (SIGSEGV, ``os.abort()``, ``os._exit``) or sleep
forever whenever they see one particular input, on every attempt, as a crashing native decoder
does. Every other root must come out PRESENT with its normal value; the crashing root FAILED (or
its parent SUPPRESSED) with a typed cause; the run must end. Functions are closures (pickled by
value). Most cases set ``max_crash_retries=0`` to keep each case to two or three crashes.
"""

from __future__ import annotations

import os
import signal
import sys
import time

import faultkit
import pytest
from reference import by_root, status

import lineage_data as ld
from lineage_data._core.physical.fold import folds_into

BAD = "d03"


@pytest.fixture(autouse=True)
def _by_value(ray_session):
    # the workers cannot import this folder: ship this module's functions by value
    ray_session.cloudpickle.register_pickle_by_value(sys.modules[__name__])


N_DOCS, N_PAGES = 8, 3


def _docs():
    return ld.from_items(
        [{"doc": f"d{i:02d}", "n": N_PAGES} for i in range(N_DOCS)], id_column="doc"
    )


def _pages(row):
    for i in range(row["n"]):
        yield {"doc": row["doc"], "page": i}


_die = faultkit.die


def _pages_value(doc: str) -> list[int]:
    return [10 * p for p in range(N_PAGES)]


def _check(out: dict, bad_status: tuple) -> None:
    assert len(out) == N_DOCS
    outcome, cause, stage = status(out[BAD])
    assert (outcome, stage) == bad_status[::2], status(out[BAD])
    assert bad_status[1] in (cause or ""), cause
    for root, row in out.items():
        if root != BAD:
            assert row["_lineage_outcome"] == "PRESENT", (root, status(row))
            assert list(row["value"]) == _pages_value(root)


def _mapper(how: str, bad=BAD):
    def score(batch):
        if any(d == bad and p == 1 for d, p in zip(batch["doc"], batch["page"], strict=True)):
            _die(how)
        return {"value": batch["page"] * 10}

    return score


def _reduce(parent, children):
    return {"value": [c["value"] for c in children]}


@pytest.mark.parametrize("how", ["segv"])  # os._exit: the reduce case; os.abort: the actor case
def test_a_crash_in_map_batches_tasks_fails_that_row_only(how):
    ds = (
        _docs()
        .expand_lineage(_pages, name="pages")
        .map_batches(_mapper(how), name="score", batch_size=4, max_crash_retries=0)
        .reduce_lineage(_reduce, name="docs")
    )
    out = by_root(ds.take_all(), ds.report())
    _check(
        out,
        (
            "SUPPRESSED",
            "WorkerCrashedError: stage 'score': the worker died 2 times on this input "
            "(Segmentation fault)",  # faulthandler's last words in the dead worker's log
            "score",
        ),
    )


def test_an_abort_in_an_actor_pool_is_retried_then_isolated():
    class Score:
        def __init__(self):
            self.fn = _mapper("abort")

        def __call__(self, batch):
            return self.fn(batch)

    ds = (
        _docs()
        .expand_lineage(_pages, name="pages")
        .map_batches(
            Score, name="score", batch_size=4, num_cpus=0.25, concurrency=2, max_crash_retries=1
        )
        .reduce_lineage(_reduce, name="docs")
    )  # the block once, then the row once alone (the default, 2, is in tests/unit/test_guard.py)
    out = by_root(ds.take_all(), ds.report())
    _check(
        out,
        (
            "SUPPRESSED",
            "WorkerCrashedError: stage 'score': the worker died 2 times on this input (Aborted)",
            "score",
        ),
    )


def test_a_crash_in_the_expansion_fails_that_parent():
    def pages(row):
        if row["doc"] == BAD:
            _die("segv")
        yield from _pages(row)

    ds = (
        _docs()
        .expand_lineage(pages, name="pages", max_crash_retries=0)
        .map_batches(_mapper("none", bad=None), name="score", batch_size=4)
        .reduce_lineage(_reduce, name="docs")
    )
    out = by_root(ds.take_all(), ds.report())
    _check(out, ("FAILED", "WorkerCrashedError: stage 'pages'", "pages"))
    assert status(out[BAD])[1].endswith("(Segmentation fault)")


def test_a_crash_in_the_reduce_fails_that_parent():
    def reduce(parent, children):
        if parent["doc"] == BAD:
            _die("exit")
        return _reduce(parent, children)

    ds = (
        _docs()
        .expand_lineage(_pages, name="pages")
        .map_batches(_mapper("none", bad=None), name="score", batch_size=4)
        .reduce_lineage(reduce, name="docs", max_crash_retries=0)
    )
    out = by_root(ds.take_all(), ds.report())
    _check(out, ("FAILED", "WorkerCrashedError: stage 'docs'", "docs"))
    assert status(out[BAD])[1].endswith(
        "(a native crash or abort, os._exit, or an out-of-memory kill)"
    )


def test_a_hang_fails_that_row_with_a_timeout():
    ds = (
        _docs()
        .expand_lineage(_pages, name="pages")
        .map_batches(_mapper("hang"), name="score", batch_size=4, timeout_s=1.5)
        .reduce_lineage(_reduce, name="docs")
    )
    out = by_root(ds.take_all(), ds.report())
    _check(out, ("SUPPRESSED", "TimeoutError: stage 'score': no result in 1.5 s", "score"))


def test_a_constructor_that_crashes_every_time_is_a_typed_stage_error():
    class Model:
        def __init__(self):
            os.kill(os.getpid(), signal.SIGSEGV)
            time.sleep(30)

        def __call__(self, batch):
            return batch

    ds = (
        _docs()
        .expand_lineage(_pages, name="pages")
        .map_batches(
            Model, name="model", batch_size=4, num_cpus=0.25, concurrency=1, max_crash_retries=0
        )
        .reduce_lineage(_reduce, name="docs")
    )
    with pytest.raises(
        ld.LineageError, match="stage 'model': the actor died once while its callable class 'Model'"
    ):
        ds.take_all()


def test_a_crash_in_a_flat_plan_fails_that_root():
    """No expansion: no coordinator; the journal is kept on the node."""

    def score(batch):
        if BAD in list(batch["doc"]):
            _die("segv")
        return {"value": [[10 * p for p in range(n)] for n in batch["n"]]}

    ds = _docs().map_batches(score, name="score", batch_size=2, max_crash_retries=0)
    out = by_root(ds.take_all(), ds.report())
    _check(
        out,
        (
            "FAILED",
            "WorkerCrashedError: stage 'score': the worker died 2 times on this input "
            "(Segmentation fault)",
            "score",
        ),
    )


@pytest.mark.parametrize("kind", ["map", "filter"])
def test_a_crash_in_a_row_stage_fails_that_row(kind):
    def fn(row):
        if row["doc"] == BAD and row["page"] == 1:
            _die("abort")
        return {**row, "value": row["page"] * 10} if kind == "map" else True

    ds = _docs().expand_lineage(_pages, name="pages")
    ds = getattr(ds, kind)(fn, name="rows", max_crash_retries=0)
    if kind == "filter":
        ds = ds.map_batches(lambda b: {"value": b["page"] * 10}, name="score", batch_size=4)
    ds = ds.reduce_lineage(_reduce, name="docs")
    out = by_root(ds.take_all(), ds.report())
    assert status(out[BAD])[0] == "SUPPRESSED"
    assert "WorkerCrashedError: stage 'rows'" in status(out[BAD])[1]
    assert status(out[BAD])[1].endswith("(Aborted)")
    assert all(out[r]["_lineage_outcome"] == "PRESENT" for r in out if r != BAD)


def test_an_expansion_that_stops_yielding_fails_its_parent_with_a_timeout():
    """For an expansion, timeout_s bounds the wait for each next child (a page that hangs)."""

    def pages(row):
        for i in range(row["n"]):
            if row["doc"] == BAD and i == 1:
                _die("hang")
            yield {"doc": row["doc"], "page": i}

    ds = (
        _docs()
        .expand_lineage(pages, name="pages", timeout_s=1.5)
        .map_batches(_mapper("none", bad=None), name="score", batch_size=4)
        .reduce_lineage(_reduce, name="docs")
    )
    out = by_root(ds.take_all(), ds.report())
    _check(out, ("FAILED", "TimeoutError: stage 'pages': no result in 1.5 s", "pages"))


def test_a_worker_lost_once_beside_a_crashing_input_fails_only_the_crashing_root(tmp_path):
    """Chaos and a poison input in one run: a kill of d05's worker costs a retry; d03 fails alone."""
    marker = str(tmp_path / "d05-died-once")

    def score(batch):
        docs, pages = list(batch["doc"]), list(batch["page"])
        if "d05" in docs and not os.path.exists(marker):
            open(marker, "w").close()
            os.kill(os.getpid(), signal.SIGKILL)
        if any(d == BAD and p == 1 for d, p in zip(docs, pages, strict=True)):
            _die("segv")
        return {"value": batch["page"] * 10}

    ds = (
        _docs()
        .expand_lineage(_pages, name="pages")
        .map_batches(score, name="score", batch_size=4, max_crash_retries=1)
        .reduce_lineage(_reduce, name="docs")
    )
    out = by_root(ds.take_all(), ds.report())
    assert os.path.exists(marker)
    _check(
        out, ("SUPPRESSED", "WorkerCrashedError: stage 'score': the worker died 2 times", "score")
    )


@pytest.mark.parametrize("how", ["exit", "hang"])
def test_a_crash_or_hang_in_a_reduce_run_in_the_actors_before_it_fails_that_parent_only(how):
    """The reduce runs in the model's actors (a CPU pool): its crash is not one of the model's rows.

    ``max_crash_retries=0`` on both: a crash pinned on the model's rows would fail them (the other
    documents' pages) after one crash. A hang ends the actor (the watchdog), which Ray restarts.
    """

    class Score:
        def __call__(self, batch):
            return {"value": batch["page"] * 10}

    def reduce(parent, children):
        if parent["doc"] == BAD:
            _die(how)
        return _reduce(parent, children)

    ds = (
        _docs()
        .expand_lineage(_pages, name="pages")
        .map_batches(
            Score, name="score", batch_size=4, num_cpus=0.25, concurrency=1, max_crash_retries=0
        )
        .reduce_lineage(reduce, name="docs", max_crash_retries=0, timeout_s=5)
    )
    score, docs = ds.plan.stages[1:]
    assert folds_into(score, docs)
    out = by_root(ds.take_all(), ds.report())
    cause = "WorkerCrashedError: stage 'docs'" if how == "exit" else "no result in 5 s"
    _check(out, ("FAILED", cause, "docs"))
