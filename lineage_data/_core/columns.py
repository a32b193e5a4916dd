"""Reserved lineage columns: their names, types and the helpers that read them.

Three are public and stable (:data:`ROOT`, :data:`OUTCOME`, :data:`CAUSE`); the rest encode the core's own
bookkeeping and may change. Every row of a lineage plan carries all of them, so lineage travels with the data.

A row is either an *entity* (a document, a page...) whose level is ``len(path)``, or a *group header*: the
row an expansion emits after the children of one parent, holding the parent's columns and the number of
children. A header's ``path`` is its parent's path; it closes the group of level ``len(path) + 1``.
"""

from __future__ import annotations

from collections.abc import Mapping

import pyarrow as pa

from lineage_data._core.errors import ContractError

PREFIX = "_lineage_"

ROOT = "_lineage_root"
OUTCOME = "_lineage_outcome"
CAUSE = "_lineage_cause"
PATH = "_lineage_path"
STAGE = "_lineage_stage"
SIZE = "_lineage_size"  # headers only: number of children in the group
PARENT = "_lineage_parent"  # headers only: the parent row, pickled
MISSING = "_lineage_missing"  # reduced rows under on_child_failure="skip": ordinals left out

PUBLIC = (ROOT, OUTCOME, CAUSE)
BOOKKEEPING = (PATH, STAGE, SIZE, PARENT)
ALL = PUBLIC + BOOKKEEPING

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
TYPES = {field.name: field.type for field in SCHEMA}


def is_reserved(name: str) -> bool:
    """True for a column name the lineage layer owns.

    >>> is_reserved("_lineage_root"), is_reserved("text")
    (True, False)
    """
    return name.startswith(PREFIX)


def check_user_row(value: object, what: str) -> Mapping:
    """``value`` if it is a dict a user function may return: a mapping without reserved columns.

    Raises:
        ContractError: naming ``what`` (e.g. "expand_lineage 'pages': child 3").
    """
    if not isinstance(value, Mapping):
        raise ContractError(f"{what} must be a dict, got {type(value).__name__}")
    reserved = [k for k in value if is_reserved(str(k))]
    if reserved:
        raise ContractError(f"{what} uses reserved column(s) {reserved}")
    return value


def user_columns(names: list[str]) -> list[str]:
    """The column names a user function may see, in order."""
    return [name for name in names if not is_reserved(name)]


def lineage_arrays(rows: list[dict]) -> dict[str, pa.Array]:
    """Typed arrays of the lineage columns of ``rows`` (missing keys become nulls)."""
    return {name: pa.array([row.get(name) for row in rows], type=TYPES[name]) for name in ALL}


def conform(table: pa.Table) -> pa.Table:
    """Give ``table`` every lineage column with its canonical type (user columns untouched)."""
    for name in ALL:
        wanted = TYPES[name]
        if name not in table.column_names:
            table = table.append_column(pa.field(name, wanted), pa.nulls(table.num_rows, wanted))
        elif table.schema.field(name).type != wanted:
            index = table.column_names.index(name)
            table = table.set_column(index, pa.field(name, wanted), table[name].cast(wanted))
    return table


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
    names: dict[str, None] = {}
    for row in rows:
        names.update(dict.fromkeys(row))
    arrays = {}
    for name in names:
        values = [row.get(name) for row in rows]
        arrays[name] = pa.array(values, type=TYPES.get(name))
    return conform(pa.table(arrays))


def depth_mask(table: pa.Table, level: int, *, header: bool) -> pa.ChunkedArray:
    """Rows that are entities of ``level`` (``header=False``) or headers closing ``level`` (True)."""
    import pyarrow.compute as pc

    depth = pc.list_value_length(table[PATH])
    if header:
        return pc.and_(pc.equal(depth, level - 1), pc.is_valid(table[SIZE]))
    return pc.and_(pc.equal(depth, level), pc.is_null(table[SIZE]))


def lineage_only(table: pa.Table) -> pa.Table:
    """The lineage columns of ``table``: what a tombstone or a header keeps."""
    return conform(table).select(list(ALL))
