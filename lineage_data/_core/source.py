"""Level-0 rows: root ids and the lineage columns a source row starts with."""

from __future__ import annotations

import hashlib
import pickle
from collections.abc import Iterable, Sequence

import pyarrow as pa

from lineage_data._core import columns as C
from lineage_data._core import outcomes
from lineage_data._core.errors import DuplicateRootError, PlanError


def root_ids(rows: Sequence[dict], id_column: str | None) -> list[str]:
    """The root id of every row: the ``id_column`` value as a string, or the row's position.

    Duplicates are a :class:`DuplicateRootError`; a row without the id column is a :class:`PlanError`.

    >>> root_ids([{"uri": "a"}, {"uri": "b"}], "uri")
    ['a', 'b']
    >>> root_ids([{"x": 1}, {"x": 1}], None)
    ['0', '1']
    """
    if id_column is None:
        return [str(i) for i in range(len(rows))]
    ids: list[str] = []
    for i, row in enumerate(rows):
        if id_column not in row or row[id_column] is None:
            raise PlanError(f"row {i} has no value in id_column {id_column!r}")
        ids.append(str(row[id_column]))
    check_unique(ids, id_column)
    return ids


def check_unique(ids: Iterable[str], id_column: str | None) -> None:
    """Raise :class:`DuplicateRootError` naming the first repeated id."""
    seen: set[str] = set()
    for value in ids:
        if value in seen:
            raise DuplicateRootError(
                f"duplicate id {value!r} in id_column {id_column!r}: every source row needs its own id"
            )
        seen.add(value)


def content_ids(table: pa.Table) -> list[str]:
    """Stable ids from row content, for sources without an id column (identical rows collide)."""
    return [
        hashlib.sha1(pickle.dumps(sorted(row.items()))).hexdigest()[:20]
        for row in table.to_pylist()
    ]


def with_lineage(table: pa.Table, roots: Sequence[str]) -> pa.Table:
    """``table`` plus the lineage columns of level-0 PRESENT rows named ``roots``."""
    reserved = [name for name in table.column_names if C.is_reserved(name)]
    if reserved:
        raise PlanError(f"source columns {reserved} use the reserved prefix {C.PREFIX!r}")
    n = table.num_rows
    table = table.append_column(C.ROOT, pa.array(list(roots), pa.string()))
    table = table.append_column(C.OUTCOME, pa.array(["PRESENT"] * n, pa.string()))
    table = table.append_column(C.PATH, pa.array([[]] * n, C.TYPES[C.PATH]))
    return C.conform(table)


def items_table(items: Sequence[dict], roots: Sequence[str]) -> pa.Table:
    """Level-0 rows from Python dicts: every key of any row is a column (missing values are null).

    A row whose values do not fit its columns' types (int in one row, str in another; an object Arrow
    cannot hold) is FAILED at stage ``from_items`` with a ``TypeConflict`` cause; the others go on.
    """
    names: dict[str, None] = {}
    for item in items:
        names.update(dict.fromkeys(item))
    columns = {name: [item.get(name) for item in items] for name in names}
    table, failed = C.build_columns(columns, len(items))
    table = with_lineage(table, roots)
    return C.with_statuses(
        table, {i: outcomes.rejected(c, "from_items") for i, c in failed.items()}
    )
