"""The named acceptance cases, run in-process through the same operators as a Ray run."""

import itertools

import pyarrow as pa
import pytest
from reference import reference, user_part

import lineage_data as ld
from lineage_data._core.local import run_local


def pages3(row):
    for i in range(row["n"]):
        yield {"doc": row["doc"], "page": i}


def by_root(rows):
    return {r["_lineage_root"]: r for r in rows}


def docs(n=2, pages=3):
    return ld.from_items([{"doc": d, "n": pages} for d in range(n)], id_column="doc")


def test_record_failure_fails_one_page_and_suppresses_its_doc():
    def ocr(batch):
        return {
            "text": [
                ld.RecordFailure("blank") if (d, p) == (1, 1) else f"{d}.{p}"
                for d, p in zip(batch["doc"].to_pylist(), batch["page"].to_pylist(), strict=True)
            ]
        }

    pages = docs().expand_lineage(pages3).map_batches(ocr, name="ocr", batch_format="pyarrow")
    open_rows = run_local(pages.plan, batch_size=2).rows
    status = {
        (r["_lineage_root"], tuple(r["_lineage_path"])): r["_lineage_outcome"] for r in open_rows
    }
    assert status == {
        ("0", (0,)): "PRESENT",
        ("0", (1,)): "PRESENT",
        ("0", (2,)): "PRESENT",
        ("1", (0,)): "PRESENT",
        ("1", (1,)): "FAILED",
        ("1", (2,)): "PRESENT",
    }
    out = by_root(run_local(pages.reduce_lineage(name="doc").plan, batch_size=2).rows)
    assert out["0"]["text"] == ["0.0", "0.1", "0.2"]
    assert (
        out["1"]["_lineage_outcome"],
        out["1"]["_lineage_cause"],
        out["1"]["_lineage_stage"],
    ) == ("SUPPRESSED", "blank", "ocr")


def test_group_failure_suppresses_unstarted_siblings_of_that_doc_only():
    seen = []

    def ocr(batch):
        keys = list(zip(batch["doc"].to_pylist(), batch["page"].to_pylist(), strict=True))
        seen.extend(keys)
        return {"text": [ld.GroupFailure("encrypted") if k == (1, 0) else "ok" for k in keys]}

    pages = docs().expand_lineage(pages3).map_batches(ocr, name="ocr", batch_format="pyarrow")
    rows = run_local(pages.plan, batch_size=1, shuffle=False).rows
    status = {
        (r["_lineage_root"], tuple(r["_lineage_path"])): (
            r["_lineage_outcome"],
            r["_lineage_cause"],
        )
        for r in rows
    }
    assert status[("1", (0,))] == ("FAILED", "encrypted")
    assert status[("1", (1,))] == status[("1", (2,))] == ("SUPPRESSED", "encrypted")
    assert (1, 1) not in seen and (1, 2) not in seen
    assert all(status[("0", (p,))] == ("PRESENT", None) for p in range(3))
    out = by_root(run_local(pages.reduce_lineage().plan, batch_size=1, shuffle=False).rows)
    assert out["0"]["_lineage_outcome"] == "PRESENT"
    assert out["1"]["_lineage_outcome"] == "SUPPRESSED"


def test_nested_levels_with_empty_document_and_empty_page():
    items = [{"doc": "a", "pages": [[], [10, 11]]}, {"doc": "b", "pages": []}]

    def pages(row):
        for regions in row["pages"]:
            yield {"regions": regions}

    def regions(row):
        for value in row["regions"]:
            yield {"value": value}

    def page(parent, children):
        return {"values": [c["value"] for c in children]}

    def doc(parent, children):
        return {"doc": parent["doc"], "pages": [c["values"] for c in children]}

    plan = (
        ld.from_items(items, id_column="doc")
        .expand_lineage(pages)
        .expand_lineage(regions)
        .reduce_lineage(page)
        .reduce_lineage(doc)
    )
    for seed in range(5):
        out = by_root(run_local(plan.plan, batch_size=3, seed=seed).rows)
        assert out["a"]["pages"] == [[], [10, 11]]
        assert out["b"]["pages"] == []


def test_filter_drops_children_out_of_the_reduce():
    plan = (
        docs(1, 5)
        .expand_lineage(pages3)
        .filter(lambda r: r["page"] % 2 == 0, name="even")
        .reduce_lineage()
    )
    out = run_local(plan.plan).rows[0]
    assert out["page"] == [0, 2, 4]
    report = run_local(plan.plan).state.snapshot()["counts"]["even"]
    assert (report["PRESENT"], report["DROPPED"]) == (3, 2)


@pytest.mark.parametrize("seed", range(6))
def test_failure_wins_over_drop_whatever_the_arrival_order(seed):
    def check(row):
        return ld.RecordFailure("bad") if row["page"] == 2 else row

    plan = (
        docs(1, 4)
        .expand_lineage(pages3)
        .filter(lambda r: r["page"] != 0)
        .map(check)
        .reduce_lineage()
    )
    out = run_local(plan.plan, batch_size=2, seed=seed).rows[0]
    assert (out["_lineage_outcome"], out["_lineage_cause"]) == ("SUPPRESSED", "bad")


def test_carry_broadcasts_parent_columns_and_gives_them_back():
    items = [{"doc": "a", "lang": "en", "n": 2, "blob": b"x" * 10}]
    seen = []

    def pages(row):
        return ({"page": i} for i in range(row["n"]))

    def look(row):
        seen.append(row["lang"])
        return row

    plan = (
        ld.from_items(items, id_column="doc")
        .expand_lineage(pages, carry=["lang"])
        .map(look)
        .reduce_lineage()
    )
    out = run_local(plan.plan).rows[0]
    assert seen == ["en", "en"]
    assert out["lang"] == "en" and out["page"] == [0, 1]
    assert "blob" not in out  # binary parent columns are released unless carried


def test_isolate_fails_only_the_poisoned_row_of_a_batch_of_four():
    calls = []

    def fragile(batch):
        values = batch["v"].to_pylist()
        calls.append(len(values))
        if 3 in values:
            raise ValueError("poison 3")
        return {"v2": [v * 2 for v in values]}

    ds = ld.from_items([{"v": v} for v in range(4)]).map_batches(
        fragile, batch_size=4, batch_format="pyarrow"
    )
    out = by_root(run_local(ds.plan, batch_size=4, shuffle=False).rows)
    assert [out[str(v)]["v2"] for v in range(3)] == [0, 2, 4]
    assert (out["3"]["_lineage_outcome"], out["3"]["_lineage_cause"]) == (
        "FAILED",
        "ValueError: poison 3",
    )
    assert calls[:2] == [4, 4]  # tried, retried once, then halved


def test_on_error_raise_stops_the_run_with_the_original_cause():
    def bad(batch):
        raise KeyError("k")

    ds = ld.from_items([{"v": 1}]).map_batches(
        bad, on_error="raise", name="bad", batch_format="pyarrow"
    )
    with pytest.raises(ld.UserCodeError, match="stage 'bad'") as info:
        run_local(ds.plan)
    assert isinstance(info.value.__cause__, KeyError)


def test_none_and_empty_list_are_present_values():
    def f(batch):
        return {"x": [None, [], None][: batch.num_rows]}

    ds = ld.from_items([{"v": 0}, {"v": 1}]).map_batches(f, batch_size=2, batch_format="pyarrow")
    rows = run_local(ds.plan, batch_size=2, shuffle=False).rows
    assert [r["_lineage_outcome"] for r in rows] == ["PRESENT", "PRESENT"]


def test_row_count_mismatch_is_a_contract_error_naming_the_stage():
    ds = ld.from_items([{"v": i} for i in range(4)]).map_batches(
        lambda b: {"v": [1]}, name="ocr", batch_format="pyarrow"
    )
    with pytest.raises(
        ld.ContractError, match="stage 'ocr': expected 4 output rows for 4 input rows, got 1"
    ):
        run_local(ds.plan, batch_size=4, shuffle=False)


def test_plan_errors_before_anything_runs():
    ds = ld.from_items([{"v": 1}])
    with pytest.raises(ld.PlanError, match="no open level"):
        ds.reduce_lineage()
    with pytest.raises(ld.PlanError, match="used twice"):
        ds.map(dict, name="a").map(dict, name="a")
    with pytest.raises(ld.PlanError, match="on_error"):
        ds.map_batches(dict, on_error="ignore", batch_format="pyarrow")
    with pytest.raises(ld.DuplicateRootError):
        ld.from_items([{"id": 1}, {"id": 1}], id_column="id")


def test_failed_and_empty_expansions_are_committed_not_lost():
    def pages(row):
        if row["n"] < 0:
            yield {"page": 0}
            raise OSError("corrupt pdf")
        yield from ({"page": i} for i in range(row["n"]))

    plan = (
        ld.from_items([{"n": -1}, {"n": 0}, {"n": 2}])
        .expand_lineage(pages, name="render")
        .reduce_lineage()
    )
    out = by_root(run_local(plan.plan).rows)
    assert (
        out["0"]["_lineage_outcome"],
        out["0"]["_lineage_cause"],
        out["0"]["_lineage_stage"],
    ) == ("FAILED", "OSError: corrupt pdf", "render")
    assert out["1"]["_lineage_outcome"] == "PRESENT" and out["1"]["n"] == 0
    assert out["2"]["page"] == [0, 1]


def test_427_page_parent_and_one_child_parent_in_any_batching():
    plan = (
        ld.from_items([{"doc": "big", "n": 427}, {"doc": "one", "n": 1}], id_column="doc")
        .expand_lineage(pages3)
        .map_batches(lambda b: {"p2": pa.compute.multiply(b["page"], 2)}, batch_format="pyarrow")
        .reduce_lineage()
    )
    for batch_size, seed in itertools.product([1, 7, 64], [0, 1]):
        out = by_root(run_local(plan.plan, batch_size=batch_size, seed=seed, rows_per_block=5).rows)
        assert out["big"]["p2"] == [2 * i for i in range(427)]
        assert out["one"]["p2"] == [0]


def test_exclude_roots_skips_them_and_does_not_expect_them():
    plan = docs(3, 1).expand_lineage(pages3).reduce_lineage().exclude_roots(["1"])
    rows = run_local(plan.plan).rows
    assert sorted(r["_lineage_root"] for r in rows) == ["0", "2"]


def test_reference_agrees_on_a_simple_plan():
    plan = docs(3, 2).expand_lineage(pages3).reduce_lineage()
    ref = reference(plan.plan)
    out = by_root(run_local(plan.plan).rows)
    assert {r: user_part(row) for r, row in out.items()} == {r: v[1] for r, v in ref.items()}


def test_explain_needs_no_ray():
    text = (
        docs()
        .expand_lineage(pages3, carry=["doc"])
        .map_batches(dict, batch_size=32, num_gpus=1, concurrency=4, batch_format="pyarrow")
        .reduce_lineage()
        .explain()
    )
    assert "carry=['doc']" in text and "num_gpus=1" in text and "level 1 -> 0" in text
