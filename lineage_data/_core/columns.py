"""Reserved lineage columns: their names, types and the helpers that read them.

Every row of a lineage plan carries them; :data:`PUBLIC` ones are stable, the rest may change.
A row is an *entity* (a document, a page...) whose level is ``len(path)``, or a *group header*: the
row an expansion emits after one parent's children, with the parent's columns and their number.
A header's ``path`` is its parent's; it closes the group of level ``len(path) + 1``.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lineage_data._core.errors import ContractError
from lineage_data._core.outcomes import Outcome

PREFIX = "_lineage_"

ROOT = "_lineage_root"
OUTCOME = "_lineage_outcome"
CAUSE = "_lineage_cause"
PATH = "_lineage_path"
STAGE = "_lineage_stage"
SIZE = "_lineage_size"  # headers only: number of children in the group
PARENT = "_lineage_parent"  # headers only: the parent row, pickled
MISSING = "_lineage_missing"  # reduced rows under on_child_failure="skip": ordinals left out
# Level-0 rows of a Ray Dataset source in a flat plan (no registration): a 64-bit tag of their
# source block, so the consumer's ledger tells a copy of a row (same block) from a duplicate id.
BLOCK = "_lineage_block"

PUBLIC = (ROOT, OUTCOME, CAUSE)
ALL = (*PUBLIC, PATH, STAGE, SIZE, PARENT)

SCHEMA = pa.schema(
    [
        pa.field(ROOT, pa.string(), nullable=False),
        pa.field(OUTCOME, pa.string(), nullable=False),
        pa.field(CAUSE, pa.string()),
        pa.field(PATH, pa.list_(pa.int32())),
        pa.field(STAGE, pa.string()),
        pa.field(SIZE, pa.int64()),
        pa.field(PARENT, pa.binary()),
    ]
)
TYPES = {field.name: field.type for field in SCHEMA} | {BLOCK: pa.int64()}


def is_reserved(name: str) -> bool:
    """True for a column name the lineage layer owns."""
    return name.startswith(PREFIX)


def check_user_row(value: object, what: str) -> Mapping:
    """``value`` if it is a mapping without reserved columns, else a ContractError about ``what``."""
    if not isinstance(value, Mapping):
        raise ContractError(f"{what} must be a dict, got {type(value).__name__}")
    reserved = [k for k in value if is_reserved(str(k))]
    if reserved:
        raise ContractError(f"{what} uses reserved column(s) {reserved}")
    return value


def user_columns(names: list[str]) -> list[str]:
    """The column names a user function may see, in order."""
    return [name for name in names if not is_reserved(name)]


def conform(table: pa.Table) -> pa.Table:
    """Give ``table`` every lineage column with its canonical type (user columns untouched)."""
    # it runs on every batch of every operator: a schema seen conformant lately is passed at once
    global _CONFORMANT
    schema = table.schema
    if any(schema.equals(known) for known in _CONFORMANT):
        return table
    given = table
    names = schema.names
    for name in ALL:
        wanted = TYPES[name]
        if name not in names:
            table = table.append_column(pa.field(name, wanted), pa.nulls(table.num_rows, wanted))
        elif schema.field(name).type != wanted:  # (raises on a duplicated lineage column)
            index = names.index(name)
            table = table.set_column(index, pa.field(name, wanted), table[name].cast(wanted))
    if table is given:  # remembered in a new tuple: another thread sees one or the other
        _CONFORMANT = (schema, *_CONFORMANT[:3])
    return table


# Schemas that :func:`conform` left unchanged lately (a schema comparison is ~0.1 us, a check ~5 us).
_CONFORMANT: tuple[pa.Schema, ...] = ()


def public(table: pa.Table, *, keep_lineage: bool = True) -> pa.Table:
    """The rows as a user sees them: user columns and :data:`PUBLIC` ones (and :data:`MISSING`).

    ``keep_lineage=False``: committed rows only, user columns only.
    """
    if not keep_lineage:
        if OUTCOME in table.column_names:
            table = table.filter(pc.fill_null(pc.equal(table[OUTCOME], "PRESENT"), False))
        return table.select([n for n in table.column_names if not is_reserved(n)])
    internal = [n for n in table.column_names if is_reserved(n) and n not in (*PUBLIC, MISSING)]
    return table.drop_columns(internal) if internal else table


def as_roots(table: pa.Table) -> pa.Table:
    """Terminal rows of a closed plan as source rows again (outcomes kept, an empty path each)."""
    table = conform(table)
    paths = empty_paths(table.num_rows)
    return table.set_column(table.column_names.index(PATH), pa.field(PATH, TYPES[PATH]), paths)


def empty_paths(n: int) -> pa.ListArray:
    """``n`` empty :data:`PATH` values (level 0), built from buffers: no Python object per row."""
    offsets = pa.py_buffer(np.zeros(n + 1, np.int32))
    return pa.Array.from_buffers(
        TYPES[PATH], n, [None, offsets], children=[pa.array([], pa.int32())]
    )


def concat(tables: list[pa.Table]) -> pa.Table:
    """Concatenate tables with different user columns; missing columns become nulls."""
    tables = [conform(t) for t in tables]
    if not tables:
        return empty()
    if len(tables) == 1:
        return tables[0]
    return pa.concat_tables(tables, promote_options="permissive")


def empty() -> pa.Table:
    """A zero-row table with the lineage columns only."""
    return SCHEMA.empty_table()


def rows_to_table(rows: list[dict]) -> pa.Table:
    """A table from row dicts whose keys may differ (the union of keys, in first-seen order)."""
    if not rows:
        return empty()
    names = dict.fromkeys(name for row in rows for name in row)
    arrays = {name: pa.array([row.get(name) for row in rows], TYPES.get(name)) for name in names}
    return conform(pa.table(arrays))


def depth_mask(table: pa.Table, level: int, *, header: bool) -> pa.ChunkedArray:
    """Rows that are entities of ``level`` (``header=False``) or headers closing ``level`` (True)."""
    depth = pc.list_value_length(table[PATH])
    if header:
        return pc.and_(pc.equal(depth, level - 1), pc.is_valid(table[SIZE]))
    return pc.and_(pc.equal(depth, level), pc.is_null(table[SIZE]))


def one_chunk(column: pa.ChunkedArray) -> pa.Array:
    """``column`` as one array (no copy when it has one chunk)."""
    return column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()


def shape(table: pa.Table) -> tuple[np.ndarray, np.ndarray] | None:
    """Per row: its depth and whether it is a header, as numpy arrays (None when a path is null)."""
    path = one_chunk(table[PATH])
    if path.null_count:
        return None
    size = table[SIZE]
    if size.null_count == len(size):  # no header: the usual batch after an expansion
        header = np.zeros(len(size), bool)
    else:
        header = size.is_valid().to_numpy(zero_copy_only=False)
    return np.diff(path.offsets.to_numpy()), header


def all_present(outcomes: pa.ChunkedArray | pa.Array) -> bool:
    """True when every value of an outcome column is PRESENT (a null is not).

    A string column is read from its buffers: 5 us for 5,000 values, Arrow's compare-and-sum took 20.
    """
    chunks = outcomes.chunks if isinstance(outcomes, pa.ChunkedArray) else [outcomes]
    return all(_all_present(chunk) for chunk in chunks)


_PRESENT = Outcome.PRESENT.value.encode()


def _all_present(chunk: pa.Array) -> bool:
    n = len(chunk)
    if not n:
        return True
    if chunk.null_count:
        return False
    if chunk.type != pa.string():
        return bool(pc.all(pc.equal(chunk, Outcome.PRESENT.value)).as_py())
    offsets = np.frombuffer(chunk.buffers()[1], np.int32, n + 1, chunk.offset * 4)
    width = len(_PRESENT)
    start, end = int(offsets[0]), int(offsets[-1])
    if end - start != width * n or not (np.diff(offsets) == width).all():
        return False
    return bytes(memoryview(chunk.buffers()[2])[start:end]) == _PRESENT * n


def all_source_rows(table: pa.Table) -> bool:
    """True when every row of ``table`` is a source (depth 0) entity, not a header: O(1) checks."""
    path, size = table[PATH], table[SIZE]
    if path.null_count or size.null_count != len(size):
        return False
    return all(
        len(chunk) == 0 or chunk.offsets[0] == chunk.offsets[len(chunk)] for chunk in path.chunks
    )


def pick(table: pa.Table, mask: np.ndarray) -> pa.Table:
    """The rows of ``table`` where ``mask`` is True: a slice (no copy) when they are contiguous."""
    rows = np.flatnonzero(mask)
    if not len(rows):
        return table.slice(0, 0)
    start, stop = int(rows[0]), int(rows[-1]) + 1
    if stop - start == len(rows):
        return table.slice(start, stop - start)
    return table.filter(pa.array(mask))


def paths(column: pa.ChunkedArray | pa.Array, depth: int) -> list[tuple[int, ...]]:
    """The :data:`PATH` values of ``column`` as tuples (via numpy when all are ``depth`` long)."""
    n = len(column)
    if isinstance(column, pa.ChunkedArray):
        column = one_chunk(column)
    if column.null_count == 0 and n:
        lengths = np.diff(column.offsets.to_numpy())
        if lengths.min() == lengths.max() == depth:
            if depth == 0:
                return [()] * n
            flat = pc.list_flatten(column)
            if flat.null_count == 0:
                return list(map(tuple, flat.to_numpy().reshape(n, depth).tolist()))
    return [tuple(p) for p in column.to_pylist()]


def lineage_only(table: pa.Table) -> pa.Table:
    """The lineage columns of ``table``: what a tombstone or a header keeps (its block tag too)."""
    names = [*ALL, BLOCK] if BLOCK in table.column_names else list(ALL)
    return conform(table).select(names)


# Building user columns is its own module; its names stay reachable here (``C.build_columns``).
from lineage_data._core.conversion import (  # noqa: E402, F401
    CONVERSION_ERRORS,
    EstablishedTypes,
    build_columns,
    is_decided,
    token_type,
    type_token,
    with_statuses,
)
