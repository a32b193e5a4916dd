"""Level-0 rows built in Arrow: the same ids, errors and rows as the row-by-row rules."""

import pyarrow as pa
import pytest

import lineage_data as ld
from lineage_data._core import columns as C
from lineage_data._core.source import column_ids, ids_digest, items_table, root_ids


@pytest.mark.parametrize(
    "values",
    [
        ["a", "b", "c"],
        [3, -1, 10**12],
        [0.5, 1.0, 2.25],
        [True, False],
        [b"x", b"y"],
    ],
)
def test_column_ids_are_the_ids_root_ids_gives(values):
    table = pa.table({"id": values, "v": list(range(len(values)))})
    expected = root_ids([{"id": v} for v in values], "id")
    assert column_ids(table, "id").to_pylist() == expected
    assert column_ids(table.slice(1), "id").to_pylist() == expected[1:]


@pytest.mark.parametrize(
    ("table", "error", "message"),
    [
        (pa.table({"id": ["a", None]}), ld.PlanError, "row 1 has no value in id_column 'id'"),
        (pa.table({"x": [1]}), ld.PlanError, "row 0 has no value in id_column 'id'"),
        (pa.table({"id": ["a", "b", "a"]}), ld.DuplicateRootError, "duplicate id 'a'"),
        (pa.table({"id": ["a", "b", "b", "c"]}), ld.DuplicateRootError, "duplicate id 'b'"),
    ],
)
def test_column_ids_raise_what_root_ids_raises(table, error, message):
    with pytest.raises(error, match=message):
        column_ids(table, "id")
    with pytest.raises(error, match=message):
        root_ids(table.to_pylist(), "id")


def test_ids_digest_is_the_same_for_the_same_ids_however_laid_out():
    ids = pa.array(["x", "a", "bb", "c"], pa.string())
    assert ids_digest(ids.slice(1)) == ids_digest(pa.array(["a", "bb", "c"], pa.string()))
    assert ids_digest(ids.slice(1)) != ids_digest(pa.array(["ab", "b", "c"], pa.string()))
    assert ids_digest(ids.slice(4)) == ids_digest(pa.array([], pa.string()))


def test_items_table_fast_path_gives_the_rows_the_column_rules_give():
    uniform = [{"a": i, "b": f"s{i}", "c": None if i % 2 else [i]} for i in range(5)]
    ragged = [{"a": 1}, {"a": 2, "b": "x"}]  # a key the first row lacks: column by column
    conflict = [{"a": 1}, {"a": "two"}, {"a": 3}]  # one row's value does not fit: that row fails
    for items in (uniform, ragged, conflict):
        roots = [str(i) for i in range(len(items))]
        table = items_table(items, roots)
        columns = {n: [r.get(n) for r in items] for n in dict.fromkeys(k for r in items for k in r)}
        expected, failed = C.build_columns(columns, len(items))
        assert table.select(expected.column_names) == expected
        outcomes = table[C.OUTCOME].to_pylist()
        assert [i for i, o in enumerate(outcomes) if o == "FAILED"] == sorted(failed)
    assert items_table(conflict, ["0", "1", "2"])[C.OUTCOME].to_pylist()[1] == "FAILED"
