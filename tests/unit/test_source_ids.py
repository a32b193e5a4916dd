"""Level-0 rows built in Arrow: the same ids, errors and rows as the row-by-row rules."""

import pathlib

import numpy as np
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


# -- content ids (from_ray without id_column) ------------------------------------------------------


def _every_type() -> pa.Table:
    import datetime
    import decimal

    from ray.data._internal.tensor_extensions.arrow import (
        ArrowTensorArray,
        ArrowVariableShapedTensorArray,
    )

    utc = datetime.UTC
    return pa.table(
        {
            "int": pa.array([1, None], pa.int64()),
            "uint": pa.array([2**64 - 1, 0], pa.uint64()),
            "float": pa.array([0.5, float("nan")], pa.float64()),
            "half": pa.array([np.float16(1.5), None], pa.float16()),
            "bool": [True, False],
            "str": ["a", None],
            "bytes": [b"\x00x", b""],
            "list": [[1, 2], []],
            "nested": [[[1.0], None], None],
            "struct": [{"b": 1, "a": "x"}, {"b": None, "a": None}],
            "map": pa.array([[("k", 1)], []], pa.map_(pa.string(), pa.int64())),
            "ts": pa.array(
                [datetime.datetime(2024, 1, 2, 3, 4, 5, 6, tzinfo=utc), None],
                pa.timestamp("ns", tz="UTC"),
            ),
            "ts_naive": pa.array([1, 2], pa.timestamp("us")),
            "date": [datetime.date(2024, 1, 2), None],
            "time": pa.array([1, 2], pa.time64("ns")),
            "duration": pa.array([1, 10**12], pa.duration("ns")),
            "decimal": [decimal.Decimal("1.50"), None],
            "dict": pa.array(["p", "q"]).dictionary_encode(),
            "tensor": ArrowTensorArray.from_numpy(np.arange(4, dtype=np.float32).reshape(2, 2)),
            "ragged": ArrowVariableShapedTensorArray.from_numpy(
                [np.zeros((1, 2)), np.ones((3, 1))]
            ),
            "large": pa.array(["x", "y"], pa.large_string()),
        }
    )


def test_content_ids_cover_every_type_a_ray_data_row_can_hold():
    import hashlib

    from lineage_data._core.source import canonical_row, content_ids

    table = _every_type()
    ids = content_ids(table)
    assert len(set(ids)) == 2
    assert all(len(i) == 20 for i in ids)
    assert content_ids(table.select(sorted(table.column_names, reverse=True))) == ids
    assert content_ids(table.slice(1)) == ids[1:]
    rows = table.to_pylist()
    assert ids == [hashlib.sha1(canonical_row(row)).hexdigest()[:20] for row in rows]


def test_content_ids_do_not_depend_on_key_order_and_differ_for_different_values():
    from lineage_data._core.source import canonical_row

    assert canonical_row({"a": 1, "b": {"x": 1, "y": 2}}) == canonical_row(
        {"b": {"y": 2, "x": 1}, "a": 1}
    )
    different = [
        {"a": 1},
        {"a": 1.0},
        {"a": True},
        {"a": "1"},
        {"a": b"1"},
        {"a": [1]},
        {"a": None},
        {"b": 1},
        {"a": 2},
        {"a": np.int64(1)},
        {"a": np.int32(1)},
        {"a": np.array([1])},
        {"a": 2**70},
    ]
    assert len({canonical_row(row) for row in different}) == len(different)


def test_content_ids_are_the_same_in_another_process_with_another_hash_seed():
    import os
    import subprocess
    import sys

    from lineage_data._core.source import content_ids

    code = (
        "import sys; sys.path[:0] = sys.argv[1:]\n"
        "from tests.unit.test_source_ids import _every_type\n"
        "from lineage_data._core.source import content_ids\n"
        "print(' '.join(content_ids(_every_type())))\n"
    )
    root = pathlib.Path(__file__).resolve().parents[2]
    for seed in ("1", "12345"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        result = subprocess.run(
            [sys.executable, "-c", code, str(root)],
            capture_output=True,
            text=True,
            env=env,
            check=True,
        )
        assert result.stdout.split() == content_ids(_every_type())


def test_content_ids_are_pinned():
    # the bytes of the encoding are the resume contract of from_ray roots: changing them makes
    # every root of an existing output new (write a migration note if this must change)
    from lineage_data._core.source import content_ids

    table = pa.table({"uri": ["s3://b/a.pdf"], "n": [3], "x": [[0.5, None]]})
    assert content_ids(table) == ["993d415207ac5f062baf"]
