"""Flat plans (every stage a source-level 1:1 stage) on Ray: no coordinator, no registration.

Such a plan starts no helper actor; its stages establish column types in Ray's key-value store, and
a Ray Dataset source tags each row with its block so that the consumer's ledger refuses duplicate ids.
"""

import time

import pyarrow as pa
import pytest
import ray
from ray.experimental import internal_kv
from reference import by_root, status

import lineage_data as ld
from lineage_data._core import columns as C


def helpers():
    return [
        a["name"]
        for a in ray.util.list_named_actors(all_namespaces=True)
        if a["name"].startswith("lineage-")
    ]


def stored_types():
    return internal_kv._internal_kv_list("", namespace="lineage_data")


def test_a_flat_plan_starts_no_helper_and_leaves_no_types_behind():
    src = ray.data.from_items([{"id": f"r{i}", "x": i} for i in range(40)], override_num_blocks=4)
    ds = (
        ld.from_ray(src, id_column="id")
        .map(lambda r: {**r, "y": r["x"] * 2}, name="double")
        .filter(lambda r: r["x"] % 5 != 0, name="some")
        .map_batches(lambda b: b, batch_size=8, batch_format="pyarrow", name="noop")
    )
    assert ds._plan.flat
    batches = ds.iter_batches(batch_size=None, batch_format="pyarrow")
    first = next(batches)
    assert helpers() == []
    rows = first.to_pylist() + [r for b in batches for r in b.to_pylist()]
    assert helpers() == [] and stored_types() == []
    assert sorted(r[C.ROOT] for r in rows) == sorted(f"r{i}" for i in range(40))
    kept = [r for r in rows if r["_lineage_outcome"] == "PRESENT"]
    assert sorted(r["y"] for r in kept) == sorted(2 * i for i in range(40) if i % 5)
    assert all(not C.is_reserved(n) or n in C.PUBLIC for n in first.column_names)
    report = ds.report()
    stages = {r["stage"]: r for r in report.stages.iter_rows(named=True)}
    assert stages["some"]["dropped"] == 8 and stages["double"]["present"] == 40
    assert report.coordinator_calls == 0


def test_a_plan_with_an_expansion_still_has_its_coordinator():
    ds = ld.from_items([{"id": 1, "n": 2}]).expand_lineage(
        lambda r: ({"k": k} for k in range(r["n"])), name="kids"
    )
    assert not ds._plan.flat
    batches = ds.iter_batches(batch_size=None)
    next(batches)
    assert helpers() != []
    list(batches)


def test_int_and_str_values_of_one_column_in_two_tasks_fail_only_the_later_row():
    def shape(row):
        if row["id"] == "r13":
            time.sleep(2.0)  # the int rows of the other tasks establish the column's type first
            return {"id": row["id"], "x": "thirteen"}
        return {"id": row["id"], "x": row["n"]}

    src = ray.data.from_items([{"id": f"r{i}", "n": i} for i in range(16)], override_num_blocks=4)
    ds = ld.from_ray(src, id_column="id").map(shape, name="shape")
    out = by_root(ds.take_all(), ds.report())
    assert len(out) == 16
    assert status(out["r13"]) == (
        "FAILED",
        "TypeConflict: column 'x' has int64 and string",
        "shape",
    )
    assert all(out[f"r{i}"]["x"] == i for i in range(16) if i != 13)
    assert stored_types() == []


def test_duplicate_ids_in_two_blocks_are_refused_even_where_a_copy_failed():
    src = ray.data.from_items([{"id": i % 6, "v": i} for i in range(12)], override_num_blocks=2)

    def picky(row):
        if row["v"] >= 6:
            raise ValueError("second half")
        return row

    ds = ld.from_ray(src, id_column="id").map(picky, name="picky")
    with pytest.raises(ld.DuplicateRootError, match="duplicate lineage root id"):
        ds.take_all()
    assert helpers() == [] and stored_types() == []


def test_duplicate_ids_in_two_blocks_are_refused_on_the_write_path(tmp_path):
    src = ray.data.from_items([{"id": i % 3, "v": i} for i in range(6)], override_num_blocks=2)
    ds = ld.from_ray(src, id_column="id").map_batches(lambda b: b, batch_size=2, name="noop")
    with pytest.raises(ld.DuplicateRootError, match="duplicate lineage root id"):
        ds.write_parquet(str(tmp_path / "out"))


def test_a_stage_closing_over_a_large_table_is_shipped_by_reference():
    from lineage_data._ray import lower as L
    from lineage_data._ray.typestore import TypeStore

    table = {i: i * i for i in range(50_000)}  # pickles to ~500 KB: over the inline limit
    ds = ld.from_items([{"k": k} for k in (3, 70, 49_999)]).map(
        lambda r: {"k": r["k"], "sq": table[r["k"]]}, name="square"
    )
    shipped = [
        L._Shipped(L._Step(ds._plan.for_workers(), 0, TypeStore("t"), 1024)),
        L._Shipped(L._Step(ld.from_items([{"k": 1}]).map(lambda r: r)._plan, 0, TypeStore("t"), 8)),
    ]
    assert (shipped[0].step, shipped[0].ref is not None) == (None, True)
    assert (shipped[1].step is not None, shipped[1].ref) == (True, None)
    assert sorted(r["sq"] for r in ds.take_all(keep_lineage=False)) == [9, 4900, 49_999**2]


def test_to_ray_of_a_flat_from_ray_plan_still_refuses_duplicate_ids():
    # no consumer's ledger behind to_ray(): the coordinator's registry refuses them
    src = ray.data.from_items([{"id": i % 3, "v": i} for i in range(6)], override_num_blocks=2)
    lowered = ld.from_ray(src, id_column="id").map(lambda r: r, name="same").to_ray()
    with pytest.raises(Exception, match="duplicate lineage root id"):
        lowered.take_all()
    ok = ld.from_ray(ray.data.range(6)).map(lambda r: {"id": r["id"] + 1}, name="inc").to_ray()
    assert sorted(r["id"] for r in ok.take_all()) == [1, 2, 3, 4, 5, 6]


def test_the_ledger_is_sized_from_rays_own_row_count_bounded(monkeypatch):
    import dataclasses

    from lineage_data._ray import execute

    plan = ld.from_ray(ray.data.from_items([{"i": i} for i in range(40)])).plan
    assert execute._source_rows(plan) == 40  # Ray's block metadata: nothing runs
    assert execute._source_rows(dataclasses.replace(plan, limit=7)) == 7
    monkeypatch.setattr(execute, "MAX_RESERVED_ROOTS", 25)
    assert execute._source_rows(plan) == 25  # a consumer of a few rows does not pay for all
    unknown = ld.from_ray(ray.data.from_items([{"i": i} for i in range(40)]).filter(lambda r: True))
    assert execute._source_rows(unknown.plan) == 0
    rows = ld.from_ray(ray.data.from_items([{"i": i} for i in range(40)])).take_all()
    assert sorted(r["i"] for r in rows) == list(range(40))


def test_the_type_store_keeps_the_first_writer_of_each_column_in_one_read(monkeypatch):
    from lineage_data._ray import typestore
    from lineage_data._ray.typestore import TypeStore

    first, second = TypeStore("ts-run"), TypeStore("ts-run")  # two workers of one run
    try:
        assert first.establish_types("s", {"x": "int"}) == {"x": "int"}
        reads = []
        real = typestore._read_all

        def counted(keys):
            reads.append(len(keys))
            return real(keys)

        monkeypatch.setattr(typestore, "_read_all", counted)
        # x was established by the first writer; y is new and taken by this one
        assert second.establish_types("s", {"x": "str", "y": "str"}) == {"x": "int", "y": "str"}
        assert first.establish_types("s", {"y": "int"}) == {"y": "str"}
        assert second.establish_types("t", {"x": "str"}) == {"x": "str"}  # stages apart
        assert reads == [2, 1, 1]  # one read per call, whatever the number of columns
        assert TypeStore("other-run").establish_types("s", {"x": "str"}) == {"x": "str"}
    finally:
        first.drop()
        TypeStore("other-run").drop()
    assert not [k for k in stored_types() if k.startswith(b"ts-run")]


@pytest.mark.parametrize(("blocks", "sizes"), [(4, {30: 360, 10: 40}), (40, {30: 390, 10: 10})])
def test_a_source_level_function_gets_the_batches_ray_data_would_give_it(blocks, sizes):
    """Source blocks of 100 rows are cut by the operator (one pass over their lineage columns); of
    10 rows, smaller than a batch, Ray Data bundles them: either way the function sees 30-row batches."""
    from collections import Counter

    from lineage_data._ray.lower import source_block_rows

    src = ray.data.from_items([{"id": f"r{i:03d}"} for i in range(400)], override_num_blocks=blocks)
    ds = ld.from_ray(src, id_column="id").map_batches(
        lambda b: b.append_column("n", pa.array([b.num_rows] * b.num_rows)),
        batch_size=30,
        batch_format="pyarrow",
    )
    assert source_block_rows(ds.plan) == 400 // blocks
    rows = ds.take_all()
    assert sorted(r["id"] for r in rows) == [f"r{i:03d}" for i in range(400)]
    assert Counter(r["n"] for r in rows) == sizes


def test_source_blocks_not_known_exactly_keep_ray_datas_batching():
    from lineage_data._ray.lower import source_block_rows

    items = [{"id": f"r{i:03d}"} for i in range(400)]
    assert source_block_rows(ld.from_ray(ray.data.from_items(items)).plan) == 2  # the smallest
    assert source_block_rows(ld.from_ray(ray.data.range(400)).plan) == 0  # a lazy read
    mapped = ray.data.from_items(items, override_num_blocks=4).map(lambda r: r)
    assert source_block_rows(ld.from_ray(mapped).plan) == 0
    big = ray.data.from_items(items, override_num_blocks=4)
    big.context.target_max_block_size = 100  # bytes: Ray may split these blocks as they pass
    assert source_block_rows(ld.from_ray(big).plan) == 0
    assert (
        source_block_rows(ld.from_ray(ray.data.from_items(items)).plan.restricted(frozenset())) == 0
    )
