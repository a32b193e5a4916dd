"""The column-wise paths of the operators give exactly what the row-wise rules give.

The reduce groups a batch column-wise and falls back to the row-wise :class:`GroupBuffer` for a batch
with a duplicate or an odd row; both must give the same rows, in the same order, with the same
coordinator calls. The expansion builds its blocks column by column; the 1:1 operator reads its masks
with numpy. Edge cases are pinned with explicit examples (empty parent, one child, 427 children).
"""

import random

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import lineage_data as ld
from lineage_data._core import columns as C
from lineage_data._core import reduce as R
from lineage_data._core.errors import FencingError
from lineage_data._core.local import run_local
from lineage_data._core.ops import build_op
from lineage_data._core.reduce import GroupBuffer
from lineage_data._core.source import items_table, root_ids
from lineage_data._core.state import LineageState

SIZES = [0, 1, 3, 427, 2, 0, 5]  # children per parent: empty, one, many


def children(row):
    for i in range(row["n"]):
        yield {"doc": row["doc"], "i": i}


def mark(batch):
    """FAILED (RecordFailure) at i % 7 == 3, SUPPRESSED by a GroupFailure at 5 of parent 'd6'."""
    out = []
    for doc, i in zip(batch["doc"].to_pylist(), batch["i"].to_pylist(), strict=True):
        if i % 7 == 3:
            out.append(ld.RecordFailure(f"rec {doc}.{i}"))
        elif doc == "d6" and i == 2:
            out.append(ld.GroupFailure("grp"))
        else:
            out.append(f"{doc}.{i}")
    return {"i": batch["i"].to_pylist(), "text": out}


def keep(row):
    return row["i"] % 5 != 4  # DROPPED children


def parents(sizes):
    return [{"doc": f"d{j}", "n": n, "tag": f"t{j}"} for j, n in enumerate(sizes)]


def ordinals(row):
    for i in range(row["n"]):
        yield {"i": i}


def pipeline(sizes=SIZES, *, marks=True, on_child_failure="fail", fn=None, carry=None):
    expand = children if marks else ordinals
    ds = ld.from_items(parents(sizes), id_column="doc").expand_lineage(expand, carry=carry)
    if marks:
        ds = ds.map_batches(mark, batch_format="pyarrow").filter(keep)
    return ds.reduce_lineage(fn, on_child_failure=on_child_failure)


def member_rows(ds, items):
    """The rows that reach the reduce of ``ds`` (one per child and one header per parent)."""
    plan = ds.plan
    roots = root_ids(items, "doc")
    state = LineageState()
    state.register_roots(roots)
    tables = [items_table(items, roots)]
    for index in range(len(plan.stages) - 1):
        op = build_op(plan, index, state, rows_per_block=16)
        out = []
        for table in tables:
            result = op(table)
            out.extend([result] if isinstance(result, pa.Table) else list(result))
        tables = out
    return C.concat(tables), state


def run_reduce(ds, batches, *, columnar, monkeypatch):
    """Outputs of the plan's reduce over ``batches``, and the coordinator calls it made."""
    calls = []

    class Recorder(LineageState):
        def reduced(self, stage, roots, parent_paths, counts):
            calls.append((stage, list(roots), [tuple(p) for p in parent_paths], counts))
            super().reduced(stage, roots, parent_paths, counts)

    plan = ds.plan
    with monkeypatch.context() as patch:
        if columnar:
            patch.setattr(R, "COLUMNAR_ROWS", 0)
        else:
            patch.setattr(R, "_local_groups", lambda members, level: None)
        holders = GroupBuffer()
        op = build_op(plan, len(plan.stages) - 1, Recorder(), holders=holders)
        outputs = [op(batch) for batch in batches]
    return [(str(t.schema), t.to_pydict()) for t in outputs], calls, holders.drain()


def batches_of(table, sizes, seed):
    order = list(range(table.num_rows))
    random.Random(seed).shuffle(order)
    table = table.take(order)
    out, start, rng = [], 0, random.Random(seed)
    while start < table.num_rows:
        size = rng.choice(sizes)
        out.append(table.slice(start, size))
        start += size
    return out


@pytest.mark.parametrize("on_child_failure", ["fail", "skip"])
@pytest.mark.parametrize(
    ("sizes", "seed"), [((1,), 0), ((7,), 1), ((64,), 2), ((1, 5, 30, 200), 3), ((10_000,), 4)]
)
def test_columnar_reduce_equals_the_row_wise_buffer(monkeypatch, on_child_failure, sizes, seed):
    ds = pipeline(on_child_failure=on_child_failure)
    members, _ = member_rows(ds, parents(SIZES))
    batches = batches_of(members, sizes, seed)
    columnar = run_reduce(ds, batches, columnar=True, monkeypatch=monkeypatch)
    row_wise = run_reduce(ds, batches, columnar=False, monkeypatch=monkeypatch)
    assert columnar == row_wise
    assert not columnar[2]  # every group completed


@pytest.mark.parametrize("fn", [None, lambda parent, kids: {"n": len(kids), "tag": parent["tag"]}])
def test_columnar_reduce_in_arrival_order_with_default_and_custom_fn(monkeypatch, fn):
    ds = pipeline(marks=False, fn=fn, carry=["tag"])
    members, _ = member_rows(ds, parents(SIZES))
    batches = [members.slice(i, 50) for i in range(0, members.num_rows, 50)]
    columnar = run_reduce(ds, batches, columnar=True, monkeypatch=monkeypatch)
    assert columnar == run_reduce(ds, batches, columnar=False, monkeypatch=monkeypatch)
    rows = [row for _, table in columnar[0] for row in _rows(table)]
    by_root = {row["_lineage_root"]: row for row in rows}
    assert len(by_root) == len(SIZES)
    for j, n in enumerate(SIZES):
        row = by_root[f"d{j}"]
        assert row["_lineage_outcome"] == "PRESENT"
        assert row["tag"] == f"t{j}"  # carried back to the parent
        if fn is None:
            # an empty group has no list column here: no stage established the children's columns
            assert row["i"] == (list(range(n)) if n else None)
        else:
            assert row["n"] == n


def _rows(pydict):
    names = list(pydict)
    return [dict(zip(names, values, strict=True)) for values in zip(*pydict.values(), strict=True)]


def test_a_batch_with_an_identical_duplicate_reduces_as_without_it(monkeypatch):
    ds = pipeline((3, 1), marks=False)
    members, _ = member_rows(ds, parents((3, 1)))
    doubled = pa.concat_tables([members, members.slice(1, 2)])
    columnar = run_reduce(ds, [doubled], columnar=True, monkeypatch=monkeypatch)
    assert columnar == run_reduce(ds, [members], columnar=True, monkeypatch=monkeypatch)


def test_a_batch_with_a_conflicting_duplicate_is_a_fencing_error(monkeypatch):
    ds = pipeline((3,), marks=False)
    members, _ = member_rows(ds, parents((3,)))
    index = members.column_names.index(C.OUTCOME)
    child = next(i for i, p in enumerate(members[C.PATH].to_pylist()) if len(p) == 1)
    other = members.slice(child, 1)
    other = other.set_column(index, C.OUTCOME, pa.array(["FAILED"], pa.string()))
    with pytest.raises(FencingError, match="conflicting reports"):
        run_reduce(ds, [pa.concat_tables([members, other])], columnar=True, monkeypatch=monkeypatch)


def test_partial_groups_go_to_the_holders_in_buffer_order(monkeypatch):
    ds = pipeline((4, 2, 3), marks=False)
    members, _ = member_rows(ds, parents((4, 2, 3)))
    rng = random.Random(7)
    order = list(range(members.num_rows))
    rng.shuffle(order)
    members = members.take(order)
    first, second = members.slice(0, 5), members.slice(5)
    columnar = run_reduce(ds, [first, second], columnar=True, monkeypatch=monkeypatch)
    assert columnar == run_reduce(ds, [first, second], columnar=False, monkeypatch=monkeypatch)
    assert sum(len(t["_lineage_root"]) for _, t in columnar[0]) == 3


def test_nested_levels_reduce_column_wise_as_row_wise(monkeypatch):
    def regions(row):
        for k in range(row["i"] % 3):
            yield {"k": k}

    items = [{"doc": f"d{j}", "n": n} for j, n in enumerate((2, 0, 5))]
    ds = (
        ld.from_items(items, id_column="doc")
        .expand_lineage(children)
        .expand_lineage(regions)
        .reduce_lineage(lambda page, kids: {"regions": len(kids)})
    )
    members, _ = member_rows(ds, items)
    for seed in range(3):
        batches = batches_of(members, (3, 8), seed)
        columnar = run_reduce(ds, batches, columnar=True, monkeypatch=monkeypatch)
        assert columnar == run_reduce(ds, batches, columnar=False, monkeypatch=monkeypatch)


@pytest.mark.parametrize("batch_size", [1, 5, 64, None])
@pytest.mark.parametrize("block", [1, 16, 1024])
def test_end_to_end_edge_cases(batch_size, block):
    rows = run_local(pipeline().plan, batch_size=batch_size, seed=3, rows_per_block=block).rows
    by_root = {row["_lineage_root"]: row for row in rows}
    for j, n in enumerate(SIZES):
        row = by_root[f"d{j}"]
        if j == 6:  # a GroupFailure at child 2
            assert (row["_lineage_outcome"], row["_lineage_cause"]) == ("SUPPRESSED", "grp")
        elif n > 3:  # child 3 FAILED (the filter does not run on it): the first cause
            assert row["_lineage_outcome"] == "SUPPRESSED"
            assert row["_lineage_cause"] == f"rec d{j}.3"
        else:
            assert row["_lineage_outcome"] == "PRESENT"
            assert row["text"] == [f"d{j}.{i}" for i in range(n)]


def test_skip_lists_missing_ordinals_for_427_children():
    rows = run_local(pipeline(on_child_failure="skip").plan, batch_size=7, seed=1).rows
    row = next(r for r in rows if r["_lineage_root"] == "d3")
    assert row["text"] == [f"d3.{i}" for i in range(427) if i % 7 != 3 and i % 5 != 4]
    assert row["_lineage_missing"] == [i for i in range(427) if i % 7 == 3]


# -- the expansion's blocks ---------------------------------------------------------------------


def expand_blocks(fn, items, *, rows_per_block=4, carry=None):
    ds = ld.from_items(items, id_column="doc").expand_lineage(fn, carry=carry)
    plan = ds.plan
    roots = root_ids(items, "doc")
    state = LineageState()
    state.register_roots(roots)
    op = build_op(plan, 0, state, rows_per_block=rows_per_block)
    return list(op(items_table(items, roots))), state


def test_block_columns_keep_the_order_rows_give():
    def uneven(row):
        yield {"b": 1, "a": "x"}
        yield {"a": "y", "c": 2.5}

    blocks, _ = expand_blocks(uneven, [{"doc": "d0", "tag": "t"}], carry=["tag"])
    assert blocks[0].column_names == [
        "tag",
        "b",
        "a",
        C.ROOT,
        C.PATH,
        C.OUTCOME,
        "c",
        C.CAUSE,
        C.STAGE,
        C.SIZE,
        C.PARENT,
    ]
    table = blocks[0]
    assert table["b"].to_pylist() == [1, None, None]
    assert table["c"].to_pylist() == [None, 2.5, None]
    assert table[C.PATH].to_pylist() == [[0], [1], []]
    assert table[C.SIZE].to_pylist() == [None, None, 2]
    assert table[C.OUTCOME].to_pylist() == ["PRESENT"] * 3


def test_a_parent_of_427_children_spreads_over_blocks_with_exact_paths():
    items = [{"doc": "big", "n": 427}, {"doc": "one", "n": 1}, {"doc": "none", "n": 0}]
    blocks, _ = expand_blocks(children, items, rows_per_block=64)
    assert [b.num_rows for b in blocks] == [64] * 6 + [43 + 1 + 2 + 1]  # children and headers
    table = pa.concat_tables(blocks)
    paths = {}
    for root, path, size in zip(
        table[C.ROOT].to_pylist(),
        table[C.PATH].to_pylist(),
        table[C.SIZE].to_pylist(),
        strict=True,
    ):
        paths.setdefault(root, []).append((tuple(path), size))
    assert paths["big"] == [((i,), None) for i in range(427)] + [((), 427)]
    assert paths["one"] == [((0,), None), ((), 1)]
    assert paths["none"] == [((), 0)]


def test_a_child_whose_type_conflicts_fails_its_parent_only():
    def typed(row):
        for i in range(3):
            yield {"v": "text" if row["doc"] == "bad" and i == 1 else i}

    items = [{"doc": "ok"}, {"doc": "bad"}, {"doc": "fine"}]
    blocks, _ = expand_blocks(typed, items, rows_per_block=16)
    table = pa.concat_tables(blocks)
    headers = {
        root: (outcome, size)
        for root, outcome, size in zip(
            table[C.ROOT].to_pylist(),
            table[C.OUTCOME].to_pylist(),
            table[C.SIZE].to_pylist(),
            strict=True,
        )
        if size is not None
    }
    assert headers["ok"] == ("PRESENT", 3)
    assert headers["fine"] == ("PRESENT", 3)
    assert headers["bad"][0] == "FAILED"
    assert "bad" not in [
        r
        for r, s in zip(table[C.ROOT].to_pylist(), table[C.SIZE].to_pylist(), strict=True)
        if s is None
    ]


def test_header_only_block_keeps_its_columns():
    blocks, _ = expand_blocks(children, [{"doc": "a", "n": 0}, {"doc": "b", "n": 0}])
    assert blocks[0].column_names == [
        C.ROOT,
        C.PATH,
        C.SIZE,
        C.PARENT,
        C.OUTCOME,
        C.CAUSE,
        C.STAGE,
    ]
    assert blocks[0][C.SIZE].to_pylist() == [0, 0]


# -- helpers ------------------------------------------------------------------------------------


def test_paths_reads_chunked_and_sliced_columns():
    column = pa.chunked_array(
        [
            pa.array([[0, 1], [0, 2], [3, 4]], C.TYPES[C.PATH]).slice(1),
            pa.array([[5, 6]], C.TYPES[C.PATH]),
        ]
    )
    assert C.paths(column, 2) == [(0, 2), (3, 4), (5, 6)]
    assert C.paths(pa.array([[1], [2, 3]], C.TYPES[C.PATH]), 1) == [(1,), (2, 3)]  # not one depth
    assert C.paths(pa.array([[], []], C.TYPES[C.PATH]), 0) == [(), ()]


def test_pick_slices_contiguous_rows_and_filters_the_rest():
    import numpy as np

    table = pa.table({"x": [0, 1, 2, 3]})
    assert C.pick(table, np.array([False, True, True, False]))["x"].to_pylist() == [1, 2]
    assert C.pick(table, np.array([True, False, True, False]))["x"].to_pylist() == [0, 2]
    assert C.pick(table, np.zeros(4, bool)).num_rows == 0


_PRESENTS = pa.array(["PRESENT"] * 10)


@pytest.mark.parametrize(
    ("column", "expected"),
    [
        (pa.array([], pa.string()), True),
        (_PRESENTS, True),
        (_PRESENTS.slice(3, 4), True),
        (pa.array(["PRESENT", None]), False),  # a null is not PRESENT
        (pa.array(["PRESENT", "FAILED"]), False),
        (pa.array(["FAILED_", "FAILED_"]), False),  # the right lengths, other bytes
        (pa.array(["PRESENTPRESENT", ""]), False),  # the right bytes, other lengths
        (pa.array(["PRESENT"] * 3, pa.large_string()), True),
        (pa.array(["PRESENT", "DROPPED"]).dictionary_encode(), False),
        (pa.array(["PRESENT"] * 3).dictionary_encode(), True),
        (
            pa.chunked_array([_PRESENTS.slice(0, 2), pa.array(["PRESENT", "DROPPED"]).slice(0, 1)]),
            True,
        ),
        (pa.chunked_array([_PRESENTS, pa.array(["DROPPED"])]), False),
        (pa.chunked_array([], pa.string()), True),
    ],
)
def test_all_present_reads_every_kind_of_outcome_column_as_arrow_compares_it(column, expected):
    assert C.all_present(column) is expected
    if len(column):
        assert (pc.sum(pc.equal(column, "PRESENT")).as_py() == len(column)) is expected
