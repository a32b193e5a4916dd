"""``materialize()`` at an open level, continued: the same rows, outcomes and report as the plan run at
once, without running what was materialized again (the model's calls are counted in a file)."""

from __future__ import annotations

import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from reference import by_root

import lineage_data as ld
from lineage_data._core import columns as C
from lineage_data._ray import execute


@pytest.fixture(autouse=True)
def _by_value(ray_session):
    ray_session.cloudpickle.register_pickle_by_value(sys.modules[__name__])


def pages(doc):
    if doc["n"] < 0:
        raise ValueError(f"{doc['doc']}: no pages")
    return ({"page": i, "text": f"{doc['doc']}-{i}"} for i in range(doc["n"]))


class Model:
    """A 1:1 batch stage that appends one line per call to ``log`` (the rows are counted there).

    Page 2 of every document fails alone; page 0 of a "g" document fails its whole document.
    """

    def __init__(self, log):
        self.log = log

    def __call__(self, batch):
        with open(self.log, "a") as f:
            f.write(f"{len(batch['page'])}\n")
        scores = []
        for doc, page in zip(batch["doc"].to_pylist(), batch["page"].to_pylist(), strict=True):
            if page == 2:
                scores.append(ld.RecordFailure(f"page 2 of {doc} is unreadable"))
            elif page == 0 and doc.startswith("g"):
                scores.append(ld.GroupFailure(f"{doc} is refused"))
            else:
                scores.append(page * 10)
        return {"page": batch["page"], "score": scores}


def calls(log):
    return sum(int(n) for n in log.read_text().split()) if log.exists() else 0


def docs():
    items = [{"doc": f"d{i}", "n": i % 6} for i in range(10)]
    items += [{"doc": "gone", "n": -1}, {"doc": "g1", "n": 7}, {"doc": "g2", "n": 3}]
    return ld.from_items(items, id_column="doc")


def scored(log):
    return (
        docs()
        .expand_lineage(pages, name="pages", carry=["doc"])
        .map_batches(
            Model,
            name="model",
            batch_size=4,
            batch_format="pyarrow",
            num_cpus=0.25,
            fn_constructor_kwargs={"log": str(log)},
        )
    )


def total(doc, kids):
    return {"doc": doc["doc"], "total": sum(k["score"] for k in kids), "pages": len(kids)}


def outcomes(rows):
    return {
        root: (r["_lineage_outcome"], r["_lineage_cause"], r.get("total"), r.get("pages"))
        for root, r in by_root(rows).items()
    }


@pytest.fixture(scope="module")
def runs(ray_session, tmp_path_factory):
    """One model run kept at the child level (its calls logged), and the plan run at once."""
    ray_session.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    folder = tmp_path_factory.mktemp("materialize")
    log = folder / "calls.log"
    kept = scored(log).materialize()
    once = scored(folder / "once.log").reduce_lineage(total, name="docs")
    return {"kept": kept, "log": log, "ran": calls(log), "once": once, "want": once.take_all()}


def test_a_materialized_open_level_reduces_as_the_plan_run_at_once(runs):
    kept, once, want = runs["kept"], runs["once"], outcomes(runs["want"])
    assert runs["ran"] > 0
    got = kept.reduce_lineage(total, name="docs")
    assert outcomes(got.take_all()) == want
    assert calls(runs["log"]) == runs["ran"]  # the model did not run again
    counts, kept_counts = got.report().stage_counts(), kept.report().stage_counts()
    assert {s: counts[s] for s in ("pages", "model")} == kept_counts
    assert counts["pages"] == once.report().stage_counts()["pages"]
    assert counts["docs"] == once.report().stage_counts()["docs"]
    assert want["gone"][:2] == ("FAILED", "ValueError: gone: no pages")
    assert want["g1"][0] == "SUPPRESSED" and "g1 is refused" in want["g1"][1]
    assert want["d3"][:2] == ("SUPPRESSED", "page 2 of d3 is unreadable")
    assert want["d1"] == ("PRESENT", None, 0, 1) and want["d0"] == ("PRESENT", None, 0, 0)


def test_one_model_run_materialized_gives_two_different_reductions(runs):
    kept = runs["kept"]
    strict = kept.reduce_lineage(total, name="strict").materialize()
    lenient = kept.filter(lambda p: p["page"] != 1, name="no_page_1").reduce_lineage(
        total, name="lenient", on_child_failure="skip"
    )
    strict_rows, lenient_rows = outcomes(strict.take_all()), outcomes(lenient.take_all())
    assert calls(runs["log"]) == runs["ran"]
    assert strict_rows["d3"][:2] == ("SUPPRESSED", "page 2 of d3 is unreadable")
    assert lenient_rows["d3"] == ("PRESENT", None, 0, 1)  # page 1 dropped, page 2 skipped
    assert lenient_rows["d5"] == ("PRESENT", None, 0 + 30 + 40, 3)
    assert strict_rows["d1"] == lenient_rows["d1"] == ("PRESENT", None, 0, 1)
    assert strict_rows["d0"] == lenient_rows["d0"] == ("PRESENT", None, 0, 0)  # an empty group
    assert strict.report().stage_counts()["model"] == kept.report().stage_counts()["model"]


def test_a_kept_open_level_reads_as_its_run_did_and_more_stages_follow(runs, tmp_path):
    kept = runs["kept"]
    direct = scored(tmp_path / "calls.log").take_all()
    assert kept.level == 1 and kept.count() == len(direct)
    key = [C.ROOT, "page"]

    def ordered(rows):  # the g documents' later pages may or may not run before the barrier
        rows = [r for r in rows if not r[C.ROOT].startswith("g")]
        return sorted(rows, key=lambda r: (r[C.ROOT], r.get("page") is None, r.get("page") or 0))

    rows = kept.take_all()
    assert ordered(rows) == ordered(direct)
    gone = [r for r in rows if r[C.ROOT] == "gone"]  # no page: its one stand-in row
    assert [(r[C.OUTCOME], r[C.CAUSE]) for r in gone] == [("FAILED", "ValueError: gone: no pages")]
    out = tmp_path / "kept.parquet"
    kept.write_parquet(str(out))
    files = [pq.read_table(f) for f in sorted(out.iterdir())]
    names = {n for f in files for n in f.column_names}
    assert sum(f.num_rows for f in files) == len(direct)
    assert set(key) <= names and {n for n in names if C.is_reserved(n)} == set(C.PUBLIC)
    assert "(materialized)" in kept.explain()
    doubled = kept.map(lambda p: {"score": p["score"] * 2}, name="double")
    halved = doubled.map(lambda p: {"score": p["score"] // 2}, name="halve")
    again = outcomes(halved.reduce_lineage(total, name="docs").take_all())
    assert again == outcomes(runs["want"])


def test_a_materialized_second_level_closes_both_levels(tmp_path):
    # (no empty group here: which columns the default reduce lists for one depends on what the run
    # had seen when it came, in a run made at once)
    items = [{"doc": f"d{i}", "n": i % 4 + 1} for i in range(8)] + [{"doc": "gone", "n": -1}]
    nested = (
        ld.from_items(items, id_column="doc")
        .expand_lineage(pages, name="pages", carry=["doc"])
        .expand_lineage(lambda p: ({"line": j} for j in range(p["page"] % 3 + 1)), name="lines")
        .map(lambda r: {"v": r["line"] + 1}, name="v")
    )

    def close(ds):
        return ds.reduce_lineage(name="page").reduce_lineage(name="doc").take_all()

    want = by_root(close(nested))
    kept = nested.materialize()
    assert kept.level == 2
    assert by_root(close(kept)) == want
    pages_kept = kept.reduce_lineage(name="page").materialize()
    assert pages_kept.level == 1
    assert by_root(pages_kept.reduce_lineage(name="doc").take_all()) == want


@pytest.fixture
def lose(monkeypatch):
    """``lose(passes)``: the first ``passes`` lowerings drop root d4's rows (a lost node's share)."""
    state = {"left": 0}
    original = execute.lower

    def lower(plan, client, holders, **kw):
        ds = original(plan, client, holders, **kw)
        if state["left"] <= 0:
            return ds
        state["left"] -= 1

        def without(batch):
            return batch.filter(pa.compute.not_equal(batch[C.ROOT], "d4"))

        return ds.map_batches(without, batch_format="pyarrow", batch_size=None)

    monkeypatch.setattr(execute, "lower", lower)

    def set_passes(n):
        state["left"] = n

    return set_passes


def test_a_continued_run_repairs_a_lost_root_from_the_kept_rows(runs, lose):
    lose(1)  # the continued run's first pass loses d4; its repair pass reads d4's kept rows again
    ds = runs["kept"].reduce_lineage(total, name="docs")
    assert outcomes(ds.take_all()) == outcomes(runs["want"])
    assert (ds.report().repaired_roots, ds.report().lost_roots) == (1, 0)
    assert calls(runs["log"]) == runs["ran"]


def test_a_root_lost_while_materializing_stays_lost_when_continued(tmp_path, lose):
    lose(99)  # every pass of the materializing run loses d4
    kept = scored(tmp_path / "calls.log").with_options(max_repair_attempts=1).materialize()
    lose(0)
    assert kept.report().lost_roots == 1
    stand_in = [r for r in kept.take_all() if r[C.ROOT] == "d4"]
    assert len(stand_in) == 1 and stand_in[0][C.CAUSE].startswith("LostError")
    rows = outcomes(kept.reduce_lineage(total, name="docs").take_all())
    assert rows["d4"][0] == "FAILED" and rows["d4"][1].startswith("LostError")
    assert rows["d3"][0] == "SUPPRESSED"
