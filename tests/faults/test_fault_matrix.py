"""A native crash with the default options ends, in every stage verb and every lowering.

Each cell builds ``expand -> (stage under test) -> reduce`` over a few documents (or a flat plan:
one stage at the source level), where the stage under test kills its own process with SIGSEGV on
one input, on every attempt, as a malformed file does under pdfium or a model runtime. The
options are the ones a user writes first: no ``max_crash_retries``, ``compute=ActorPoolStrategy``
for a class. Every cell must end (the per-test timeout is the loop detector) with that root not
PRESENT, its cause naming the stage and the signal, and every other root PRESENT with its value.

The issue's own shape (30 documents of 3-8 pages, an actor pool of 2, CPU or GPU actors) is the
first test. Functions are closures (pickled by value).
"""

from __future__ import annotations

import sys

import faultkit
import pytest
import ray
from reference import by_root, status

import lineage_data as ld
from lineage_data._core.physical.fold import folds_into

pytestmark = [pytest.mark.faults, pytest.mark.timeout(120)]

BAD = "d03"
N_DOCS, N_PAGES = 8, 3
SMALL = {"num_cpus": 0.25}


@pytest.fixture(autouse=True)
def _by_value(ray_session):
    ray_session.cloudpickle.register_pickle_by_value(sys.modules[__name__])


_die = faultkit.die


def _docs(n_docs: int = N_DOCS, pages=lambda i: N_PAGES, doc=lambda i: f"d{i:02d}"):
    return ld.from_items([{"doc": doc(i), "n": pages(i)} for i in range(n_docs)], id_column="doc")


def _is_bad(doc, page, bad=BAD, bad_page=1) -> bool:
    return doc == bad and page == bad_page


def _pages(row):
    for i in range(row["n"]):
        yield {"doc": row["doc"], "page": i}


def _reduce(parent, children):
    return {"value": [c["value"] for c in children]}


def _check(out: dict, stage: str, signal_name: str = "Segmentation fault", bad: str = BAD) -> None:
    outcome, cause, where = status(out[bad])
    assert outcome in ("FAILED", "SUPPRESSED") and where == stage, status(out[bad])
    # max_crash_retries + 1 (the default: 3) deaths on the crashing input, no more
    assert f"WorkerCrashedError: stage {stage!r}: the worker died 3 times" in (cause or ""), cause
    assert (cause or "").endswith(f"({signal_name})"), cause
    for root, row in out.items():
        if root != bad:
            assert row["_lineage_outcome"] == "PRESENT", (root, status(row))
            assert list(row["value"]) == [10 * p for p in range(len(row["value"]))], root


def _model(how: str, bad: str = BAD, bad_page: int = 1):
    class Model:
        def __call__(self, batch):
            for d, p in zip(batch["doc"], batch["page"], strict=True):
                if _is_bad(d, p, bad, bad_page):
                    _die(how)
            return {"value": batch["page"] * 10}

    return Model


@pytest.mark.parametrize("resources", [SMALL, {"num_gpus": 1}], ids=["cpu", "gpu"])
def test_the_issues_shape_with_the_defaults_ends_with_that_root_failed(resources):
    ds = (
        _docs(30, pages=lambda i: 3 + i % 6, doc=lambda i: f"d{i:04d}")
        .expand_lineage(_pages, name="pages")
        .map_batches(
            _model("segv", bad="d0007"),
            name="model",
            batch_size=4,
            compute=ray.data.ActorPoolStrategy(size=2),
            **resources,
        )
        .reduce_lineage(_reduce, name="docs")
    )
    out = by_root(ds.take_all(), ds.report())
    assert len(out) == 30
    _check(out, "model", bad="d0007")


def _segv_fn(row_stage: str):
    def fn(row):
        if _is_bad(row["doc"], row["page"]):
            _die("segv")
        return {**row, "value": row["page"] * 10} if row_stage == "map" else True

    return fn


def _score(batch):
    return {"value": batch["page"] * 10}


def _plan(verb: str, lowering: str):
    """The plan of one cell and the stage whose crash it checks."""
    actors = {"compute": ray.data.ActorPoolStrategy(size=2), **SMALL}
    docs = _docs()
    if verb == "expand":

        def pages(row):
            if row["doc"] == BAD:
                _die("segv")
            yield from _pages(row)

        if lowering == "actors":

            class Pages:
                def __call__(self, row):
                    yield from pages(row)

            expanded = docs.expand_lineage(Pages, name="pages", **actors)
        else:
            expanded = docs.expand_lineage(pages, name="pages")
        return expanded.map_batches(_score, name="score", batch_size=4).reduce_lineage(
            _reduce, name="docs"
        ), "pages"
    if verb == "flat":

        def flat(batch):
            if BAD in list(batch["doc"]):
                _die("segv")
            return {"value": [[10 * p for p in range(n)] for n in batch["n"]]}

        return docs.map_batches(flat, name="score", batch_size=2), "score"
    pages = docs.expand_lineage(_pages, name="pages")
    if verb == "reduce":

        def reduce(parent, children):
            if parent["doc"] == BAD:
                _die("segv")
            return _reduce(parent, children)

        if lowering == "folded":
            model = pages.map_batches(
                _model("none", bad=None), name="score", batch_size=4, **actors
            )
        else:
            model = pages.map_batches(_score, name="score", batch_size=4)
        return model.reduce_lineage(reduce, name="docs"), "docs"
    if verb == "map_batches":
        if lowering == "tasks":
            fn = _model("segv")()
            model = pages.map_batches(lambda b: fn(b), name="model", batch_size=4)
        elif lowering == "gpu":
            model = pages.map_batches(
                _model("segv"),
                name="model",
                batch_size=4,
                compute=ray.data.ActorPoolStrategy(size=2),
                num_gpus=1,
            )
        else:  # an actor pool on CPUs: the reduce runs in its actors ("folded")
            model = pages.map_batches(_model("segv"), name="model", batch_size=4, **actors)
        return model.reduce_lineage(_reduce, name="docs"), "model"
    fn = _segv_fn(verb)
    if lowering == "actors":

        class Rows:
            def __call__(self, row):
                return fn(row)

        rows = getattr(pages, verb)(Rows, name="rows", **actors)
    else:
        rows = getattr(pages, verb)(fn, name="rows")
    if verb == "filter":
        rows = rows.map_batches(_score, name="score", batch_size=4)
    return rows.reduce_lineage(_reduce, name="docs"), "rows"


CELLS = [
    ("expand", "tasks"),
    ("expand", "actors"),
    ("map_batches", "tasks"),
    ("map_batches", "folded"),
    ("map_batches", "gpu"),
    ("map", "tasks"),
    ("map", "actors"),
    ("filter", "actors"),
    ("reduce", "tasks"),
    ("reduce", "folded"),
    ("flat", "tasks"),
]


@pytest.mark.parametrize(("verb", "lowering"), CELLS, ids=[f"{v}-{lo}" for v, lo in CELLS])
def test_a_segfault_with_the_default_options_fails_that_root_only(verb, lowering):
    ds, stage = _plan(verb, lowering)
    if (verb, lowering) in (("map_batches", "folded"), ("reduce", "folded")):
        host, reduce = ds.plan.stages[-2:]
        assert folds_into(host, reduce)
    out = by_root(ds.take_all(), ds.report())
    assert len(out) == N_DOCS
    _check(out, stage)


@pytest.mark.parametrize(
    ("how", "said"),
    [("abort", "Aborted"), ("exit", "a native crash or abort, os._exit, or an out-of-memory kill")],
)
def test_an_abort_or_exit_on_an_actor_pool_with_the_defaults_fails_that_row_only(how, said):
    ds = (
        _docs()
        .expand_lineage(_pages, name="pages")
        .map_batches(
            _model(how),
            name="model",
            batch_size=4,
            compute=ray.data.ActorPoolStrategy(size=2),
            num_gpus=1,
        )
        .reduce_lineage(_reduce, name="docs")
    )
    _check(by_root(ds.take_all(), ds.report()), "model", signal_name=said)


def test_a_hang_on_an_actor_pool_fails_that_row_with_a_timeout():
    ds = (
        _docs()
        .expand_lineage(_pages, name="pages")
        .map_batches(
            _model("hang"),
            name="model",
            batch_size=4,
            compute=ray.data.ActorPoolStrategy(size=2),
            timeout_s=1.5,
            **SMALL,
        )
        .reduce_lineage(_reduce, name="docs")
    )
    out = by_root(ds.take_all(), ds.report())
    outcome, cause, stage = status(out[BAD])
    assert (outcome, stage) == ("SUPPRESSED", "model"), status(out[BAD])
    assert "TimeoutError: stage 'model': no result in 1.5 s" in cause
    assert all(out[r]["_lineage_outcome"] == "PRESENT" for r in out if r != BAD)
