"""One bad input never kills the job: a root's bad data fails that root, with a typed cause, alone.

Run in-process (no Ray) through the same operators and state as a Ray run.
"""

import fsspec
import pyarrow as pa
import pytest
from reference import by_root, status

import lineage_data as ld
from lineage_data._core import columns as C
from lineage_data._core.local import run_local
from lineage_data._core.state import LineageState

CONFLICT = "TypeConflict: column 'x' has int64 and string"


def docs(n, pages):
    return ld.from_items([{"doc": d, "n": pages} for d in range(n)], id_column="doc")


# -- 1. conflicting child types inside one parent ---------------------------------------------------------


@pytest.mark.parametrize(
    ("bad_at", "rows_per_block"), [(0, 16), (1, 16), (30, 16), (5, 4), (3, 64)]
)
@pytest.mark.parametrize("batch_size", [1, 3, None])
def test_children_of_one_parent_with_int_and_str_fail_that_parent_only(
    bad_at, rows_per_block, batch_size
):
    produced = {}

    def pages(row):
        for i in range(row["n"]):
            produced[row["doc"]] = i
            yield {"x": "s" if (row["doc"] == 2 and i == bad_at) else i}

    plan = docs(6, 40).expand_lineage(pages, name="pages").reduce_lineage(name="docs")
    for seed in range(3):
        produced.clear()
        rows = run_local(
            plan.plan, batch_size=batch_size, seed=seed, rows_per_block=rows_per_block
        ).rows
        out = by_root(rows)
        assert len(rows) == 6
        # a str first child conflicts with its int siblings, or with the int established before it
        causes = (
            {CONFLICT, "TypeConflict: column 'x' has string and int64"}
            if bad_at == 0
            else {CONFLICT}
        )
        assert status(out["2"])[::2] == ("FAILED", "pages")
        assert status(out["2"])[1] in causes
        assert out["2"].get("x") is None
        for d in ("0", "1", "3", "4", "5"):
            assert status(out[d]) == ("PRESENT", None, None)
            assert out[d]["x"] == list(range(40))
        # the bad parent stops as soon as a block fails it: its later children are never asked for
        if bad_at + rows_per_block < 39:
            assert produced[2] < 39


def test_a_later_block_that_conflicts_with_the_earlier_one_fails_the_parent_and_drops_its_children():
    def pages(row):
        for i in range(row["n"]):
            yield {"x": "late" if (row["doc"] == 1 and i == 20) else i}

    # 32 children a parent: blocks of 16 hold one parent's children each
    plan = docs(3, 32).expand_lineage(pages, name="pages")
    rows = run_local(plan.plan, batch_size=None, shuffle=False, rows_per_block=16).rows
    # the open plan: children 0..15 of doc 1 went out before the conflict; the reduce would discard them
    children = [r for r in rows if r["_lineage_root"] == "1"]
    assert {tuple(r["_lineage_path"]) for r in children} == {(i,) for i in range(16)}
    closed = docs(3, 32).expand_lineage(pages, name="pages").reduce_lineage(name="docs")
    out = by_root(run_local(closed.plan, batch_size=None, shuffle=False, rows_per_block=16).rows)
    assert status(out["1"]) == ("FAILED", "TypeConflict: column 'x' has int64 and string", "pages")
    assert out["0"]["x"] == out["2"]["x"] == list(range(32))


def test_a_mixed_block_is_split_by_parent():
    # small parents: one block holds the children of many parents, the bad one in the middle
    def pages(row):
        for i in range(row["n"]):
            yield {"x": [i] if row["doc"] == 4 and i == 1 else i, "doc": row["doc"]}

    plan = docs(9, 3).expand_lineage(pages, name="pages").reduce_lineage(name="docs")
    for seed in range(4):
        out = by_root(run_local(plan.plan, batch_size=None, seed=seed, rows_per_block=64).rows)
        assert status(out["4"]) == (
            "FAILED",
            "TypeConflict: column 'x' has int64 and list<item: int64>",
            "pages",
        )
        for d in set(out) - {"4"}:
            assert (out[d]["_lineage_outcome"], out[d]["x"]) == ("PRESENT", [0, 1, 2])


def test_a_child_value_arrow_cannot_hold_fails_its_parent():
    class Blob:
        pass

    def pages(row):
        for i in range(row["n"]):
            yield {"x": Blob() if row["doc"] == 0 and i == 2 else i}

    plan = docs(3, 4).expand_lineage(pages, name="pages").reduce_lineage(name="docs")
    out = by_root(run_local(plan.plan).rows)
    assert status(out["0"]) == (
        "FAILED",
        "TypeConflict: column 'x' cannot store a value of type Blob in Arrow",
        "pages",
    )
    assert out["1"]["x"] == out["2"]["x"] == [0, 1, 2, 3]


def test_a_child_that_is_not_a_dict_fails_its_parent():
    def pages(row):
        for i in range(row["n"]):
            yield None if row["doc"] == 1 and i == 1 else {"x": i}

    plan = docs(3, 3).expand_lineage(pages, name="pages").reduce_lineage(name="docs")
    out = by_root(run_local(plan.plan).rows)
    assert status(out["1"]) == (
        "FAILED",
        "ContractError: expand_lineage 'pages': child 1 must be a dict, got NoneType",
        "pages",
    )
    assert out["0"]["x"] == out["2"]["x"] == [0, 1, 2]


# -- 2. one parent's children differ from the other parents' ---------------------------------------------


def test_a_parent_whose_children_are_str_while_the_others_are_int_fails_alone():
    def pages(row):
        for i in range(row["n"]):
            yield {"x": f"s{i}" if row["doc"] == 3 else i}

    plan = docs(5, 20).expand_lineage(pages, name="pages").reduce_lineage(name="docs")
    for batch_size in (1, 2, None):
        out = by_root(run_local(plan.plan, batch_size=batch_size, shuffle=False).rows)
        assert status(out["3"]) == ("FAILED", CONFLICT, "pages")
        for d in ("0", "1", "2", "4"):
            assert (out[d]["_lineage_outcome"], out[d]["x"]) == ("PRESENT", list(range(20)))


def test_first_writer_wins_even_when_the_odd_parent_comes_first():
    def pages(row):
        for i in range(row["n"]):
            yield {"x": f"s{i}" if row["doc"] == 0 else i}

    plan = docs(3, 2).expand_lineage(pages, name="pages").reduce_lineage(name="docs")
    out = by_root(run_local(plan.plan, batch_size=1, shuffle=False).rows)
    assert out["0"]["x"] == ["s0", "s1"]
    for d in ("1", "2"):
        assert status(out[d]) == (
            "FAILED",
            "TypeConflict: column 'x' has string and int64",
            "pages",
        )


def test_safe_promotions_are_not_failures():
    values = {0: [1, 2], 1: [1.5, None], 2: [None, None], 3: [3, 4]}

    def pages(row):
        for v in values[row["doc"]]:
            yield {"x": v, "tags": [] if v is None else [str(v)]}

    plan = docs(4, 0).expand_lineage(pages, name="pages").reduce_lineage(name="docs")
    for batch_size in (1, None):
        out = by_root(run_local(plan.plan, batch_size=batch_size, shuffle=False).rows)
        assert all(r["_lineage_outcome"] == "PRESENT" for r in out.values())
        assert [out[str(d)]["x"] for d in range(4)] == [[1, 2], [1.5, None], [None, None], [3, 4]]


def test_nested_types_conflict_inside_the_structure():
    def pages(row):
        value = "a" if row["doc"] == 2 else 1
        yield {"x": [{"k": value}]}

    plan = docs(4, 0).expand_lineage(pages, name="pages").reduce_lineage(name="docs")
    out = by_root(run_local(plan.plan, batch_size=1, shuffle=False).rows)
    assert status(out["2"])[:1] == ("FAILED",)
    assert status(out["2"])[1].startswith(
        "TypeConflict: column 'x' has list<item: struct<k: int64>>"
    )
    assert [out[d]["x"] for d in ("0", "1", "3")] == [[[{"k": 1}]]] * 3


def test_reduce_results_of_conflicting_types_fail_the_later_parent():
    def pages(row):
        yield {"page": 0}

    def assemble(parent, children):
        return {"v": "text" if parent["doc"] == 2 else parent["doc"]}

    plan = docs(4, 0).expand_lineage(pages, name="pages").reduce_lineage(assemble, name="docs")
    for batch_size in (1, None):
        out = by_root(run_local(plan.plan, batch_size=batch_size, shuffle=False).rows)
        assert status(out["2"]) == (
            "FAILED",
            "TypeConflict: column 'v' has int64 and string",
            "docs",
        )
        assert out["2"]["v"] is None
        assert [out[d]["v"] for d in ("0", "1", "3")] == [0, 1, 3]


def test_reduce_result_arrow_cannot_hold_fails_that_parent():
    def pages(row):
        yield {"page": 0}

    def assemble(parent, children):
        return {"v": object() if parent["doc"] == 1 else "ok"}

    plan = docs(3, 0).expand_lineage(pages).reduce_lineage(assemble, name="docs")
    out = by_root(run_local(plan.plan, batch_size=None).rows)
    assert status(out["1"]) == (
        "FAILED",
        "TypeConflict: column 'v' cannot store a value of type object in Arrow",
        "docs",
    )
    assert out["0"]["v"] == out["2"]["v"] == "ok"


# -- 4. a reduce result that is not a dict ---------------------------------------------------------------


@pytest.mark.parametrize("result", [[1, 2], None, "text", 3])
def test_a_reduce_result_that_is_not_a_dict_fails_that_parent(result):
    def assemble(parent, children):
        return result if parent["doc"] == 1 else {"pages": len(children)}

    plan = docs(3, 2).expand_lineage(lambda r: ({"p": i} for i in range(r["n"])), name="pages")
    plan = plan.reduce_lineage(assemble, name="docs")
    out = by_root(run_local(plan.plan).rows)
    assert status(out["1"]) == (
        "FAILED",
        f"ContractError: reduce_lineage 'docs': the result must be a dict, got {type(result).__name__}",
        "docs",
    )
    assert out["0"]["pages"] == out["2"]["pages"] == 2


def test_a_reduce_result_with_reserved_columns_fails_that_parent():
    def assemble(parent, children):
        return {"_lineage_root": "x"} if parent["doc"] == 0 else {"ok": True}

    plan = docs(2, 1).expand_lineage(lambda r: ({"p": i} for i in range(r["n"])))
    out = by_root(run_local(plan.reduce_lineage(assemble, name="docs").plan).rows)
    assert status(out["0"])[0] == "FAILED"
    assert "reserved" in status(out["0"])[1]
    assert out["1"]["ok"] is True


# -- 5. values Arrow cannot store, from map_batches and map ------------------------------------------------


def test_map_batches_column_mixing_int_and_str_fails_the_rows_that_do_not_fit():
    def label(batch):
        return {"val": [d if d % 3 else f"s{d}" for d in batch["doc"].to_pylist()]}

    plan = ld.from_items([{"doc": d} for d in range(1, 10)], id_column="doc")
    plan = plan.map_batches(label, name="label", batch_format="pyarrow")
    out = by_root(run_local(plan.plan, batch_size=None, shuffle=False).rows)
    for d in range(1, 10):
        row = out[str(d)]
        if d % 3:
            assert (row["_lineage_outcome"], row["val"]) == ("PRESENT", d)
        else:
            assert status(row) == (
                "FAILED",
                "TypeConflict: column 'val' has int64 and string",
                "label",
            )


@pytest.mark.parametrize("batch_format", ["pyarrow", "numpy", "pandas"])
def test_map_batches_object_values_fail_their_rows(batch_format):
    class Model:
        pass

    def embed(batch):
        docs_ = batch["doc"] if batch_format != "pyarrow" else batch["doc"].to_pylist()
        return {"emb": [Model() if int(d) == 2 else float(d) for d in docs_]}

    plan = ld.from_items([{"doc": d} for d in range(4)], id_column="doc")
    plan = plan.map_batches(embed, name="embed", batch_format=batch_format)
    out = by_root(run_local(plan.plan, batch_size=None).rows)
    assert status(out["2"]) == (
        "FAILED",
        "TypeConflict: column 'emb' cannot store a value of type Model in Arrow",
        "embed",
    )
    assert [out[d]["emb"] for d in ("0", "1", "3")] == [0.0, 1.0, 3.0]


def test_map_batches_failed_row_values_decide_no_type():
    # row 0 fails with a RecordFailure in one column; its str in another must not fail row 1's int
    def fn(batch):
        docs_ = batch["doc"].to_pylist()
        return {
            "a": [ld.RecordFailure("no") if d == 0 else d for d in docs_],
            "b": ["junk" if d == 0 else d for d in docs_],
        }

    plan = ld.from_items([{"doc": d} for d in range(3)], id_column="doc").map_batches(
        fn, batch_format="pyarrow"
    )
    out = by_root(run_local(plan.plan, batch_size=None, shuffle=False).rows)
    assert status(out["0"])[:2] == ("FAILED", "no")
    assert [out[d]["b"] for d in ("1", "2")] == [1, 2]


def test_isolated_halves_with_conflicting_types_fail_only_the_rows_that_do_not_fit():
    def fn(batch):
        docs_ = batch["doc"].to_pylist()
        if 0 in docs_:
            raise ValueError("poison")
        return {"v": [d if d < 4 else f"s{d}" for d in docs_]}

    plan = ld.from_items([{"doc": d} for d in range(8)], id_column="doc")
    plan = plan.map_batches(fn, name="iso", max_retries=0, batch_format="pyarrow")
    out = by_root(run_local(plan.plan, batch_size=None, shuffle=False).rows)
    assert status(out["0"]) == ("FAILED", "ValueError: poison", "iso")
    assert [out[str(d)]["v"] for d in (1, 2, 3)] == [1, 2, 3]
    for d in range(4, 8):
        assert status(out[str(d)]) == (
            "FAILED",
            "TypeConflict: column 'v' has int64 and string",
            "iso",
        )


def test_map_rows_with_conflicting_and_unstorable_values_fail_alone():
    def fn(row):
        d = row["doc"]
        return {"v": {0: 1, 1: "one", 2: object(), 3: 3}[d]}

    plan = ld.from_items([{"doc": d} for d in range(4)], id_column="doc").map(fn, name="m")
    out = by_root(run_local(plan.plan, batch_size=None, shuffle=False).rows)
    assert [out[d]["v"] for d in ("0", "3")] == [1, 3]
    assert status(out["1"]) == ("FAILED", "TypeConflict: column 'v' has int64 and string", "m")
    assert status(out["2"]) == (
        "FAILED",
        "TypeConflict: column 'v' cannot store a value of type object in Arrow",
        "m",
    )


def test_map_returning_something_other_than_a_dict_fails_that_row():
    plan = ld.from_items([{"doc": d} for d in range(3)], id_column="doc")
    plan = plan.map(lambda r: None if r["doc"] == 1 else {"v": r["doc"]}, name="m")
    out = by_root(run_local(plan.plan, batch_size=None).rows)
    assert status(out["1"]) == (
        "FAILED",
        "ContractError: stage 'm': map fn must return a dict per row, got NoneType",
        "m",
    )
    assert out["0"]["v"] == 0 and out["2"]["v"] == 2


# -- 6. failure values inside the dict map returns -------------------------------------------------------


def test_record_failure_inside_the_dict_map_returns_fails_that_row():
    plan = ld.from_items([{"doc": d} for d in range(4)], id_column="doc")
    plan = plan.map(
        lambda r: {"val": ld.RecordFailure("bad") if r["doc"] == 2 else r["doc"]}, name="m"
    )
    out = by_root(run_local(plan.plan, batch_size=None).rows)
    assert status(out["2"]) == ("FAILED", "bad", "m")
    assert [out[d]["val"] for d in ("0", "1", "3")] == [0, 1, 3]


def test_group_failure_inside_the_dict_map_returns_fails_the_group():
    seen = []

    def check(row):
        seen.append((row["doc"], row["page"]))
        bad = (row["doc"], row["page"]) == (1, 0)
        return {"text": ld.GroupFailure("encrypted") if bad else "ok", "page": row["page"]}

    pages = docs(2, 3).expand_lineage(
        lambda r: ({"doc": r["doc"], "page": i} for i in range(r["n"])), name="pages"
    )
    plan = pages.map(check, name="check")
    rows = run_local(plan.plan, batch_size=1, shuffle=False).rows
    st = {(r["_lineage_root"], tuple(r["_lineage_path"])): status(r)[:2] for r in rows}
    assert st[("1", (0,))] == ("FAILED", "encrypted")
    assert st[("1", (1,))] == st[("1", (2,))] == ("SUPPRESSED", "encrypted")
    assert (1, 1) not in seen and (1, 2) not in seen
    assert all(st[("0", (p,))] == ("PRESENT", None) for p in range(3))
    out = by_root(
        run_local(plan.reduce_lineage(name="docs").plan, batch_size=1, shuffle=False).rows
    )
    assert status(out["1"]) == ("SUPPRESSED", "encrypted", "check")
    assert out["0"]["text"] == ["ok"] * 3


# -- 7. errors about a whole stage still stop the run ----------------------------------------------------


def test_a_wrong_output_row_count_still_raises_naming_the_stage():
    plan = ld.from_items([{"doc": d} for d in range(4)], id_column="doc")
    plan = plan.map_batches(lambda b: {"v": [1]}, name="shrink", batch_format="pyarrow")
    with pytest.raises(ld.ContractError, match="stage 'shrink'"):
        run_local(plan.plan, batch_size=None)


# -- 3. files that vanish or cannot be read ---------------------------------------------------------------


def test_a_file_that_vanished_fails_its_root_and_the_others_read(tmp_path):
    from lineage_data._ray.datasource import _read, list_files

    for name in ("a.bin", "b.bin", "c.bin"):
        (tmp_path / name).write_bytes(name.encode() * 3)
    fs, files = list_files(str(tmp_path))
    (tmp_path / "b.bin").unlink()
    (table,) = list(_read(fs, files))
    out = by_root(table.to_pylist())
    gone = str(tmp_path / "b.bin")
    assert status(out[gone]) == ("FAILED", f"FileNotFoundError: {gone}", "read_files")
    assert out[gone]["bytes"] is None
    for name in ("a.bin", "c.bin"):
        row = out[str(tmp_path / name)]
        assert (row["_lineage_outcome"], row["bytes"], row["size"]) == (
            "PRESENT",
            name.encode() * 3,
            15,
        )
        assert row["_lineage_path"] == []


def test_a_file_that_cannot_be_read_names_its_error(tmp_path):
    from lineage_data._ray.datasource import _read

    class Flaky(fsspec.implementations.local.LocalFileSystem):
        def cat_file(self, path, *args, **kwargs):
            if path.endswith("bad"):
                raise PermissionError("denied")
            return super().cat_file(path, *args, **kwargs)

    for name in ("ok", "bad"):
        (tmp_path / name).write_bytes(b"1")
    files = [(str(tmp_path / n), 1) for n in ("bad", "ok")]
    (table,) = list(_read(Flaky(skip_instance_cache=True), files))
    out = by_root(table.to_pylist())
    assert status(out[files[0][0]]) == (
        "FAILED",
        f"PermissionError: {files[0][0]}: denied",
        "read_files",
    )
    assert out[files[1][0]]["bytes"] == b"1"


# -- 8. build-time checks -------------------------------------------------------------------------------


def test_carry_of_a_column_the_source_lacks_is_a_plan_error():
    ds = ld.from_items([{"doc": 1, "n": 2}], id_column="doc")
    with pytest.raises(ld.PlanError, match=r"carry column\(s\) \['c'\]"):
        ds.expand_lineage(lambda r: [], carry=["c"])
    with pytest.raises(ld.PlanError, match="carry"):
        ds.filter(lambda r: True).expand_lineage(lambda r: [], carry=["doc", "c"])
    ds.expand_lineage(lambda r: [], carry=["doc", "n"])  # known columns pass


def test_carry_after_a_stage_that_computes_rows_is_checked_at_run_time_only():
    ds = ld.from_items([{"doc": 1, "n": 2}], id_column="doc")
    ds.map(lambda r: {**r, "c": 1}).expand_lineage(lambda r: [], carry=["c"])
    pages = ds.expand_lineage(lambda r: [{"p": 0}])
    pages.expand_lineage(lambda r: [], carry=["p"])
    pages.reduce_lineage().expand_lineage(lambda r: [], carry=["anything"])


def test_carry_checked_against_the_read_files_columns(tmp_path):
    (tmp_path / "a.pdf").write_bytes(b"%PDF")
    ds = ld.read_files(str(tmp_path))
    ds.expand_lineage(lambda r: [], carry=["path", "size", "bytes"])
    with pytest.raises(ld.PlanError, match="carry"):
        ds.expand_lineage(lambda r: [], carry=["doc_id"])


class FakeSchema:
    def __init__(self, names):
        self.names = names


class FakeDataset:
    """Stands for a ray.data.Dataset: only what from_ray looks at, and it must not execute."""

    def __init__(self, names):
        self._names = names
        self.calls = []

    def schema(self, fetch_if_missing=True):
        self.calls.append(fetch_if_missing)
        return None if self._names is None else FakeSchema(self._names)


def test_from_ray_with_an_id_column_missing_from_a_known_schema_is_a_plan_error():
    fake = FakeDataset(["doc_id", "text"])
    with pytest.raises(ld.PlanError, match="id_column 'x' is not in the dataset"):
        ld.from_ray(fake, id_column="x")
    assert fake.calls == [False]
    ds = ld.from_ray(fake, id_column="doc_id")
    with pytest.raises(ld.PlanError, match="carry"):
        ds.expand_lineage(lambda r: [], carry=["nope"])
    ds.expand_lineage(lambda r: [], carry=["text"])


def test_from_ray_with_an_unknown_schema_skips_the_checks():
    ds = ld.from_ray(FakeDataset(None), id_column="x")
    ds.expand_lineage(lambda r: [], carry=["anything"])


def test_from_ray_with_reserved_columns_is_a_plan_error():
    with pytest.raises(ld.PlanError, match="reserved"):
        ld.from_ray(FakeDataset(["_lineage_root"]))


# -- the isolation helper and the type registry ------------------------------------------------------------


def test_build_columns_first_value_wins_and_failed_rows_are_null():
    table, failed = C.build_columns({"x": [1, "a", 2.5, None, [1]]}, 5)
    assert table["x"].type == pa.float64()
    assert table["x"].to_pylist() == [1.0, None, 2.5, None, None]
    assert failed == {
        1: "TypeConflict: column 'x' has int64 and string",
        4: "TypeConflict: column 'x' has double and list<item: int64>",
    }


def test_build_columns_with_groups_fails_whole_groups_and_they_decide_nothing():
    # group "a" conflicts within itself; without it "b" decides the type and "c" fits
    table, failed = C.build_columns(
        {"x": [1, "s", "t", "u"], "y": [1, 2, 3, 4]}, 4, groups=["a", "a", "b", "c"]
    )
    assert failed == dict.fromkeys([0, 1], "TypeConflict: column 'x' has int64 and string")
    assert table["x"].to_pylist() == [None, None, "t", "u"]
    assert table["y"].to_pylist() == [None, None, 3, 4]


def test_build_columns_with_an_established_type():
    table, failed = C.build_columns({"x": ["a", 1, 2]}, 3, types={"x": pa.int64()})
    assert failed == {0: "TypeConflict: column 'x' has int64 and string"}
    assert table["x"].to_pylist() == [None, 1, 2]
    table, failed = C.build_columns({"x": [1.5]}, 1, types={"x": pa.int64()})
    assert (failed, table["x"].type) == ({}, pa.float64())


def test_build_columns_overflow_fails_the_row():
    table, failed = C.build_columns({"x": [1, 2**70]}, 2)
    assert list(failed) == [1] and "column 'x'" in failed[1]
    assert table["x"].to_pylist() == [1, None]


def test_type_tokens_round_trip_nested_types():
    t = pa.list_(pa.struct([("a", pa.int64()), ("b", pa.list_(pa.string()))]))
    assert C.token_type(C.type_token(t)) == t
    assert not C.is_decided(pa.struct([("a", pa.null())]))
    assert C.is_decided(pa.map_(pa.string(), pa.int64()))


def test_establish_types_first_writer_wins_per_stage():
    state = LineageState()
    assert state.establish_types("s", {"x": "int"}) == {"x": "int"}
    assert state.establish_types("s", {"x": "str", "y": "str"}) == {"x": "int", "y": "str"}
    assert state.establish_types("t", {"x": "str"}) == {"x": "str"}


def test_established_types_call_only_for_new_columns():
    calls = []

    class Coordinator(LineageState):
        def establish_types(self, stage, types):
            calls.append(sorted(types))
            return super().establish_types(stage, types)

    types = C.EstablishedTypes(Coordinator(), "pages")
    for _ in range(3):
        types.build_rows([{"x": 1, "y": None}])
    types.build_rows([{"x": 2, "y": "a"}])
    assert calls == [["x"], ["y"]]
    table, failed = types.build_rows([{"x": "s", "y": "b"}, {"x": 3, "y": "c"}])
    assert failed == {0: "TypeConflict: column 'x' has int64 and string"}
    assert calls == [["x"], ["y"]]


def test_conform_table_skips_only_a_schema_that_needed_nothing():
    types = C.EstablishedTypes(LineageState(), "pages")
    ints = pa.table({"x": pa.array([1, 2], pa.int64()), "y": pa.nulls(2)})
    assert types.conform_table(ints) == (ints, {})
    assert types.conform_table(ints) == (ints, {})  # the remembered schema: passed at once
    later = pa.table({"x": pa.array([1], pa.int64()), "y": pa.array(["a"])})
    assert types.conform_table(later)[1] == {}  # y established now
    table, failed = types.conform_table(pa.table({"x": ["s", "3"], "y": pa.nulls(2)}))
    assert failed == {0: "TypeConflict: column 'x' has int64 and string", 1: failed[0]}
    assert table["x"].type == pa.int64()
    table, failed = types.conform_table(pa.table({"x": [1], "y": pa.array([2], pa.int64())}))
    assert (table["y"].to_pylist(), failed) == (["2"], {})  # cast to the established string


def test_conform_still_fixes_a_table_after_a_conformant_one_with_the_same_names():
    good = C.conform(pa.table({"v": [1]}))
    assert C.conform(good) is good
    wrong = good.set_column(
        good.column_names.index(C.CAUSE), C.CAUSE, pa.array([None], pa.large_string())
    )
    assert C.conform(wrong).schema.field(C.CAUSE).type == pa.string()
    fixed = C.conform(good.drop_columns([C.PATH]))
    assert fixed.schema.field(C.PATH).type == C.TYPES[C.PATH]


@pytest.mark.parametrize("batch_format", ["pyarrow", "numpy"])
def test_map_batches_output_type_that_changes_between_batches_fails_those_rows(batch_format):
    # Each batch is consistent in itself; the batch holding doc 4 says string where the run already
    # established int64 for "val" (Ray would fail concatenating the two blocks downstream).
    def label(batch):
        column = batch["doc"]
        docs = [int(d) for d in (column.to_pylist() if hasattr(column, "to_pylist") else column)]
        if 4 in docs:
            return pa.table({"val": [f"s{d}" for d in docs]})
        return pa.table({"val": [int(d) for d in docs]})

    plan = ld.from_items([{"doc": d} for d in range(8)], id_column="doc")
    plan = plan.map_batches(label, name="label", batch_format=batch_format)
    out = by_root(run_local(plan.plan, batch_size=2, shuffle=False).rows)
    for d in range(8):
        row = out[str(d)]
        if d in (4, 5):
            assert status(row) == (
                "FAILED",
                "TypeConflict: column 'val' has int64 and string",
                "label",
            )
        else:
            assert (row["_lineage_outcome"], row["val"]) == ("PRESENT", d)


def test_from_items_keeps_keys_of_later_rows_and_fails_rows_that_do_not_fit():
    items = [{"doc": 0, "n": 1}, {"doc": 1, "n": 2, "extra": "e"}, {"doc": 2, "n": "three"}]
    plan = ld.from_items(items, id_column="doc").map(lambda r: {"extra": r["extra"], "n": r["n"]})
    out = by_root(run_local(plan.plan, batch_size=None, shuffle=False).rows)
    assert (out["0"]["extra"], out["1"]["extra"]) == (None, "e")
    assert (
        status(out["2"])[0] == "SUPPRESSED"
    )  # failed at the source, suppressed by the map after it
    assert status(out["2"])[1:] == ("TypeConflict: column 'n' has int64 and string", "from_items")


def test_from_items_takes_a_snapshot_of_the_rows():
    """The plan keeps the rows as they were at from_items; a dict changed or a list emptied later
    does not reach it (the rows are converted to Arrow there, as Ray Data's from_items does)."""
    items = [{"doc": d, "n": d * 10} for d in range(4)]
    plan = ld.from_items(items, id_column="doc").map(lambda r: {"n": r["n"] + 1})
    items[0]["n"] = -1
    items[1]["doc"] = 99
    items.clear()
    out = by_root(run_local(plan.plan, batch_size=2, shuffle=False).rows)
    assert sorted(out) == ["0", "1", "2", "3"]
    assert [out[str(d)]["n"] for d in range(4)] == [1, 11, 21, 31]


def test_from_items_refuses_a_reserved_column_before_anything_runs():
    with pytest.raises(ld.PlanError, match="reserved prefix"):
        ld.from_items([{"doc": 0, C.ROOT: "x"}], id_column="doc")
