"""Level-0 rows: root ids and the lineage columns a source row starts with."""

from __future__ import annotations

import datetime
import decimal
import hashlib
import itertools
import pickle
import uuid
from collections.abc import Sequence
from typing import Any

import msgpack
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lineage_data._core import columns as C
from lineage_data._core import outcomes
from lineage_data._core.errors import DuplicateRootError, PlanError


def root_ids(rows: Sequence[dict], id_column: str | None) -> list[str]:
    """The root id of every row: the ``id_column`` value as a string, or the row's position.

    Duplicates are a :class:`DuplicateRootError`; a row without the id column is a :class:`PlanError`.
    """
    if id_column is None:
        return [str(i) for i in range(len(rows))]
    values = [row.get(id_column) for row in rows]
    if any(v is None for v in values):
        first = next(i for i, v in enumerate(values) if v is None)
        raise PlanError(f"row {first} has no value in id_column {id_column!r}")
    ids = list(map(str, values))
    check_unique(ids, id_column)
    return ids


def check_unique(ids: Sequence[str], id_column: str | None) -> None:
    """Raise :class:`DuplicateRootError` naming the first repeated id."""
    if len(set(ids)) == len(ids):
        return
    seen: set[str] = set()
    for value in ids:
        if value in seen:
            raise DuplicateRootError(
                f"duplicate id {value!r} in id_column {id_column!r}: every source row needs its own id"
            )
        seen.add(value)


def column_ids(table: pa.Table, id_column: str) -> pa.StringArray:
    """:func:`root_ids` of a block, from its ``id_column``: the same ids and errors, in Arrow."""
    n = table.num_rows
    if id_column not in table.column_names:
        if n:
            raise PlanError(f"row 0 has no value in id_column {id_column!r}")
        return pa.array([], pa.string())
    column = table[id_column].combine_chunks()
    if column.null_count:
        first = int(np.flatnonzero(~column.is_valid().to_numpy(zero_copy_only=False))[0])
        raise PlanError(f"row {first} has no value in id_column {id_column!r}")
    kind = column.type
    if pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_integer(kind):
        ids = column.cast(pa.string())
    else:
        ids = pa.array([str(v) for v in column.to_pylist()], pa.string())
    if not _increasing(ids) and len(pc.unique(ids)) != n:  # (unique: 2x count_distinct's speed)
        check_unique(ids.to_pylist(), id_column)
    return ids


def _increasing(ids: pa.StringArray) -> bool:
    """True when every id sorts after the one before it: common, and ~8x cheaper than hashing."""
    return len(ids) < 2 or pc.all(pc.less(ids.slice(0, len(ids) - 1), ids.slice(1))).as_py()


def ids_digest(ids: pa.StringArray) -> str:
    """A digest of the ids' text, in order (the same for the same ids however the array is laid out)."""
    offsets = np.frombuffer(ids.buffers()[1], np.int32)[ids.offset : ids.offset + len(ids) + 1]
    if not len(ids):
        return hashlib.sha1(b"").hexdigest()
    data = ids.buffers()[2]
    text = memoryview(data)[int(offsets[0]) : int(offsets[-1])] if data is not None else b""
    digest = hashlib.sha1((offsets - offsets[0]).astype("<i4").tobytes())
    digest.update(text)
    return digest.hexdigest()


def content_ids(table: pa.Table) -> list[str]:
    """Ids from :func:`canonical_row` digests, for sources without an id column (equal rows collide)."""
    by_name = dict(zip(table.column_names, table.columns, strict=True))  # as to_pylist: last wins
    names = sorted(by_name)
    values = []
    for name in names:
        column = by_name[name].to_pylist()
        values.append(column if _plain(by_name[name].type) else list(map(_canonical, column)))
    pack = msgpack.Packer(default=_extension).pack
    if not names:
        return [hashlib.sha1(pack({})).hexdigest()[:20]] * table.num_rows
    rows = (dict(zip(names, row, strict=True)) for row in zip(*values, strict=True))
    return [hashlib.sha1(pack(row)).hexdigest()[:20] for row in rows]


def canonical_row(row: dict) -> bytes:
    """The row as msgpack bytes that depend only on its values: a map from name to value, by name.

    Values Arrow gives as Python objects are msgpack's own types (None, bool, int, float as a
    double, str, bytes, lists, dicts written with sorted keys); the rest are extension types:
    1 numpy array or scalar (dtype string, shape, C-order bytes), 2 date/time/datetime (ISO text,
    nanoseconds and UTC offset included), 3 timedelta (days, seconds, microseconds, nanoseconds),
    4 Decimal (its text), 5 UUID (its 16 bytes), 7 an int beyond 64 bits (its decimal text).
    Anything else (an object in a Python-object column) is 6, its pickle at protocol 4: only as
    stable as that object's pickle.
    """
    return _pack({name: _canonical(row[name]) for name in sorted(row)})


def _plain(kind: pa.DataType) -> bool:
    """True when Arrow gives this type's values as msgpack-ready objects: no dict, no object."""
    if pa.types.is_struct(kind) or isinstance(kind, pa.ExtensionType):
        return False
    if pa.types.is_map(kind):
        return _plain(kind.key_type) and _plain(kind.item_type)
    if pa.types.is_dictionary(kind):
        return _plain(kind.value_type)
    value_type = getattr(kind, "value_type", None)  # the list types
    return value_type is None or _plain(value_type)


def _canonical(value: Any) -> Any:
    """``value`` with every dict's keys in sorted order (msgpack writes dicts in insertion order)."""
    if isinstance(value, dict):
        try:
            keys = sorted(value)
        except TypeError:  # keys of mixed types (an object column's dict): their own order
            keys = list(value)
        return {key: _canonical(value[key]) for key in keys}
    if isinstance(value, list | tuple):
        return [_canonical(item) for item in value]
    if type(value) is int and not -(2**63) <= value < 2**64:
        return msgpack.ExtType(7, str(value).encode())
    return value


def _extension(value: Any) -> msgpack.ExtType:
    """The extension encoding of a value msgpack has no type for (see :func:`canonical_row`)."""
    if isinstance(value, np.generic):
        value = np.asarray(value)
    if isinstance(value, np.ndarray):
        data: Any = value.tobytes() if not value.dtype.hasobject else value.ravel().tolist()
        return msgpack.ExtType(1, _pack([value.dtype.str, list(value.shape), _canonical(data)]))
    if isinstance(value, datetime.date | datetime.time):
        return msgpack.ExtType(2, value.isoformat().encode())
    if isinstance(value, datetime.timedelta):
        parts = [value.days, value.seconds, value.microseconds, getattr(value, "nanoseconds", 0)]
        return msgpack.ExtType(3, _pack(parts))
    if isinstance(value, decimal.Decimal):
        return msgpack.ExtType(4, str(value).encode())
    if isinstance(value, uuid.UUID):
        return msgpack.ExtType(5, value.bytes)
    return msgpack.ExtType(6, pickle.dumps(value, protocol=4))


def _pack(value: Any) -> bytes:
    return msgpack.packb(value, default=_extension)


def with_lineage(table: pa.Table, roots: Sequence[str]) -> pa.Table:
    """``table`` plus the lineage columns of level-0 PRESENT rows named ``roots``."""
    reserved = [name for name in table.column_names if C.is_reserved(name)]
    if reserved:
        raise PlanError(f"source columns {reserved} use the reserved prefix {C.PREFIX!r}")
    n = table.num_rows
    ids = roots if isinstance(roots, pa.Array) else pa.array(list(roots), pa.string())
    table = table.append_column(C.ROOT, ids)
    table = table.append_column(C.OUTCOME, _repeated(outcomes.Outcome.PRESENT.value, n))
    return C.conform(table.append_column(C.PATH, C.empty_paths(n)))


def _repeated(text: str, n: int) -> pa.StringArray:
    """``n`` copies of ``text`` as a string array, built from buffers (no Python object per row)."""
    data = text.encode()
    offsets = np.arange(n + 1, dtype=np.int32) * len(data)
    return pa.StringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(data * n))


def items_table(items: Sequence[dict], roots: Sequence[str]) -> pa.Table:
    """Level-0 rows from Python dicts: every key of any row is a column (missing values are null).

    A row whose values do not fit its columns' types is FAILED at stage ``from_items`` alone.
    """
    names = list(dict.fromkeys(itertools.chain.from_iterable(items)))
    table = _rows_table(items, names)
    failed: dict[int, str] = {}
    if table is None:
        columns = {name: [item.get(name) for item in items] for name in names}
        table, failed = C.build_columns(columns, len(items))
    table = with_lineage(table, roots)
    return C.with_statuses(
        table, {i: outcomes.rejected(c, "from_items") for i, c in failed.items()}
    )


def _rows_table(items: Sequence[dict], names: list[str]) -> pa.Table | None:
    """The rows converted by Arrow in one call when every row fits (else None: isolate the rows)."""
    if not items or list(items[0]) != names or any(C.is_reserved(n) for n in names):
        return None
    try:
        return pa.Table.from_pylist(list(items))
    except C.CONVERSION_ERRORS:  # the same errors build_columns catches
        return None
