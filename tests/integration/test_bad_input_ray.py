"""One bad input never kills the job, on Ray: bad roots fail with a typed cause, the others go on.

Functions used in pipelines are lambdas or closures defined in the tests (pickled by value).
"""

import time

import pytest
import ray
from reference import by_root, status

import lineage_data as ld

CONFLICT = "TypeConflict: column 'x' has int64 and string"


def docs(n, pages):
    return ld.from_items([{"doc": f"d{i:02d}", "n": pages} for i in range(n)], id_column="doc")


def test_int_and_str_children_inside_one_parent_fail_that_parent_only():
    def pages(row):
        for i in range(row["n"]):
            yield {"x": "oops" if (row["doc"] == "d07" and i == 20) else i}

    ds = (
        docs(40, 30)
        .expand_lineage(pages, name="pages")
        # batches of several blocks: Ray Data concatenates blocks of different tasks here
        .map_batches(lambda b: b, name="noop", batch_size=64, batch_format="pyarrow")
        .reduce_lineage(name="docs")
    )
    out = by_root(ds.take_all(), ds.report())
    assert len(out) == 40
    assert status(out["d07"]) == ("FAILED", CONFLICT, "pages")
    for root, row in out.items():
        if root != "d07":
            assert (row["_lineage_outcome"], row["x"]) == ("PRESENT", list(range(30)))


def test_one_parent_with_str_children_while_the_others_are_int_fails_alone_across_tasks():
    def pages(row):
        odd = row["doc"] == "d05"
        if odd:
            time.sleep(2.0)  # the int parents establish the column's type first
        for i in range(row["n"]):
            yield {"x": f"s{i}" if odd else i}

    ds = (
        docs(12, 20)
        .expand_lineage(pages, name="pages")
        .map_batches(lambda b: b, name="noop", batch_size=64, batch_format="pyarrow")
        .reduce_lineage(name="docs")
    )
    out = by_root(ds.take_all(), ds.report())
    assert len(out) == 12
    assert status(out["d05"]) == ("FAILED", CONFLICT, "pages")
    for root, row in out.items():
        if root != "d05":
            assert (row["_lineage_outcome"], row["x"]) == ("PRESENT", list(range(20)))


def test_safely_promoted_types_across_tasks_are_not_failures():
    def pages(row):
        for i in range(row["n"]):
            yield {"x": i + 0.5 if row["doc"] == "d03" else i}

    ds = (
        docs(8, 10)
        .expand_lineage(pages, name="pages")
        .map_batches(lambda b: b, name="noop", batch_size=64, batch_format="pyarrow")
        .reduce_lineage(name="docs")
    )
    out = by_root(ds.take_all(), ds.report())
    assert all(r["_lineage_outcome"] == "PRESENT" for r in out.values())
    assert out["d03"]["x"] == [i + 0.5 for i in range(10)]
    assert out["d00"]["x"] == list(range(10))


def test_a_file_deleted_after_listing_fails_its_root_only(tmp_path):
    for i in range(5):
        (tmp_path / f"f{i}.txt").write_bytes(b"line\n" * (i + 1))
    ds = ld.read_files(str(tmp_path))
    lines = ds.map(lambda r: {"path": r["path"], "lines": r["bytes"].count(b"\n")}, name="count")
    gone = str(tmp_path / "f2.txt")
    (tmp_path / "f2.txt").unlink()
    out = by_root(ds.take_all(), ds.report())
    assert status(out[gone]) == ("FAILED", f"FileNotFoundError: {gone}", "read_files")
    for i in (0, 1, 3, 4):
        row = out[str(tmp_path / f"f{i}.txt")]
        assert (row["_lineage_outcome"], row["bytes"]) == ("PRESENT", b"line\n" * (i + 1))
    # through a stage the cause is kept (the stage after a FAILED row marks it SUPPRESSED)
    out = by_root(lines.take_all(), lines.report())
    assert status(out[gone]) == ("SUPPRESSED", f"FileNotFoundError: {gone}", "read_files")
    assert [out[str(tmp_path / f"f{i}.txt")]["lines"] for i in (0, 1, 3, 4)] == [1, 2, 4, 5]


def test_a_reduce_returning_a_list_for_one_parent_fails_that_parent():
    ds = (
        docs(10, 3)
        .expand_lineage(lambda r: ({"p": i} for i in range(r["n"])), name="pages")
        .reduce_lineage(
            lambda parent, kids: [1, 2] if parent["doc"] == "d04" else {"pages": len(kids)},
            name="docs",
        )
    )
    out = by_root(ds.take_all(), ds.report())
    assert status(out["d04"]) == (
        "FAILED",
        "ContractError: reduce_lineage 'docs': the result must be a dict, got list",
        "docs",
    )
    assert all(r["pages"] == 3 for k, r in out.items() if k != "d04")


def test_map_returning_a_record_failure_inside_the_dict_fails_that_row():
    ds = ld.from_items([{"doc": i} for i in range(10)], id_column="doc").map(
        lambda r: {"val": ld.RecordFailure("bad") if r["doc"] == 6 else r["doc"] * 2}, name="m"
    )
    out = by_root(ds.take_all(), ds.report())
    assert status(out["6"]) == ("FAILED", "bad", "m")
    assert all(r["val"] == int(k) * 2 for k, r in out.items() if k != "6")


def test_from_ray_with_a_missing_id_column_is_a_plan_error_before_anything_runs():
    src = ray.data.from_items([{"doc_id": "a", "text": "t"}])
    with pytest.raises(ld.PlanError, match="id_column 'x' is not in the dataset"):
        ld.from_ray(src, id_column="x")


def test_carry_missing_from_a_known_schema_is_a_plan_error():
    src = ray.data.from_items([{"doc_id": "a", "text": "t"}])
    ds = ld.from_ray(src, id_column="doc_id")
    with pytest.raises(ld.PlanError, match="carry"):
        ds.expand_lineage(lambda r: [], carry=["c"])
    with pytest.raises(ld.PlanError, match="carry"):
        docs(2, 1).expand_lineage(lambda r: [], carry=["c"])


def test_from_ray_row_without_an_id_is_a_plan_error_at_run_time():
    src = ray.data.from_items([{"doc_id": "a"}, {"doc_id": None}]).repartition(1)
    with pytest.raises(ld.PlanError, match="row 1 has no value in id_column 'doc_id'"):
        ld.from_ray(src, id_column="doc_id").take_all()
