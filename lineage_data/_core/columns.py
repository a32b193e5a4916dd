"""Reserved lineage columns: their names, types and the helpers that read them.

Three are public and stable (:data:`ROOT`, :data:`OUTCOME`, :data:`CAUSE`); the rest encode the core's own
bookkeeping and may change. Every row of a lineage plan carries all of them, so lineage travels with the data.

A row is either an *entity* (a document, a page...) whose level is ``len(path)``, or a *group header*: the
row an expansion emits after the children of one parent, holding the parent's columns and the number of
children. A header's ``path`` is its parent's path; it closes the group of level ``len(path) + 1``.
"""

from __future__ import annotations

import base64
import functools
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lineage_data._core.errors import ContractError
from lineage_data._core.outcomes import Outcome, Status

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
TYPES = {field.name: field.type for field in SCHEMA} | {BLOCK: pa.int64()}


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


def conform(table: pa.Table) -> pa.Table:
    """Give ``table`` every lineage column with its canonical type (user columns untouched)."""
    # it runs on every batch of every operator: a schema seen conformant lately is passed at once
    global _CONFORMANT
    schema = table.schema
    if any(schema.equals(known) for known in _CONFORMANT):
        return table
    changed = False
    names = schema.names
    types = dict(zip(names, schema.types, strict=True))
    unique = len(types) == len(names)  # else schema.field raises on a duplicated lineage column
    for name in ALL:
        wanted = TYPES[name]
        if name not in types:
            table = table.append_column(pa.field(name, wanted), pa.nulls(table.num_rows, wanted))
            changed = True
        elif (types[name] if unique else schema.field(name).type) != wanted:
            index = names.index(name)
            table = table.set_column(index, pa.field(name, wanted), table[name].cast(wanted))
            changed = True
    if not changed:  # remembered in a new tuple: a reader in another thread sees one or the other
        _CONFORMANT = (schema, *_CONFORMANT[:3])
    return table


# Schemas that :func:`conform` left unchanged lately (a schema comparison is ~0.1 us, a check ~5 us).
_CONFORMANT: tuple[pa.Schema, ...] = ()


def public(table: pa.Table, *, keep_lineage: bool = True) -> pa.Table:
    """The rows as a user sees them: user columns and the public lineage columns, nothing internal.

    Public: :data:`ROOT`, :data:`OUTCOME`, :data:`CAUSE` (and :data:`MISSING`, which only
    ``on_child_failure="skip"`` adds). ``keep_lineage=False``: committed rows only, user columns only.
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
    paths = pa.array([[]] * table.num_rows, TYPES[PATH])
    return table.set_column(table.column_names.index(PATH), pa.field(PATH, TYPES[PATH]), paths)


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
    depth = pc.list_value_length(table[PATH])
    if header:
        return pc.and_(pc.equal(depth, level - 1), pc.is_valid(table[SIZE]))
    return pc.and_(pc.equal(depth, level), pc.is_null(table[SIZE]))


def one_chunk(column: pa.ChunkedArray) -> pa.Array:
    """``column`` as one array (no copy when it has one chunk)."""
    return column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()


def shape(table: pa.Table) -> tuple[np.ndarray, np.ndarray] | None:
    """Per row of ``table``: its depth (path length) and whether it is a header, as numpy arrays.

    The numpy counterpart of :func:`depth_mask`; None when a row has no path (no depth at all).
    """
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

    A plain string column is read from its buffers: every value 7 bytes long and the bytes
    ``PRESENT`` over and over (5 us for 5,000 values; Arrow's compare-and-sum took 20).
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
    """True when every row of ``table`` is a source (depth 0) entity, not a header: O(1) checks.

    Its paths are all empty (their offsets start and end equal) and it has no group size.
    """
    path, size = table[PATH], table[SIZE]
    if path.null_count or size.null_count != len(size):
        return False
    return all(
        len(chunk) == 0 or chunk.offsets[0] == chunk.offsets[len(chunk)] for chunk in path.chunks
    )


def pick(table: pa.Table, mask: np.ndarray) -> pa.Table:
    """The rows of ``table`` where ``mask`` is True: a slice (no copy) when they are contiguous.

    >>> pick(pa.table({"x": [1, 2, 3]}), np.array([False, True, True]))["x"].to_pylist()
    [2, 3]
    """
    rows = np.flatnonzero(mask)
    if not len(rows):
        return table.slice(0, 0)
    start, stop = int(rows[0]), int(rows[-1]) + 1
    if stop - start == len(rows):
        return table.slice(start, stop - start)
    return table.filter(pa.array(mask))


def paths(column: pa.ChunkedArray | pa.Array, depth: int) -> list[tuple[int, ...]]:
    """The :data:`PATH` values of ``column`` as tuples; all of them are expected to be ``depth`` long.

    Paths of one level all have the same length, so they are read as one numpy matrix rather than
    one Python list per row; a column that does not fit that shape is read row by row.

    >>> paths(pa.array([[0, 1], [0, 2]], TYPES[PATH]), 2)
    [(0, 1), (0, 2)]
    """
    n = len(column)
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
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


# -- bad input: building Arrow data from user values, one root's bad values failing that root only ---------

TYPE_CONFLICT = "TypeConflict"
CONVERSION_ERRORS = (pa.ArrowException, TypeError, ValueError, OverflowError)


@functools.lru_cache(maxsize=4096)
def unify_types(a: pa.DataType | None, b: pa.DataType) -> pa.DataType | None:
    """The type both ``a`` and ``b`` promote to safely (as ``pa.unify_schemas`` "permissive"), or None.

    ``a=None`` means nothing is known yet: the answer is ``b``. Ray Data concatenates blocks with the
    same promotion, so blocks whose column types unify here never stop a run.

    >>> unify_types(pa.int64(), pa.float64())
    DataType(double)
    >>> unify_types(pa.int64(), pa.string()) is None
    True
    """
    if a is None or a == b:
        return b
    try:
        schema = pa.unify_schemas(
            [pa.schema([pa.field("x", a)]), pa.schema([pa.field("x", b)])],
            promote_options="permissive",
        )
    except (pa.ArrowException, TypeError, ValueError):
        return None
    return schema.field(0).type


@functools.lru_cache(maxsize=4096)
def is_decided(t: pa.DataType) -> bool:
    """False when ``t`` is, or holds, the null type (a column of ``None`` or of empty lists).

    Such a type says nothing about the values still to come, so it is never established.

    >>> is_decided(pa.list_(pa.int64())), is_decided(pa.list_(pa.null()))
    (True, False)
    """
    if pa.types.is_null(t):
        return False
    if pa.types.is_struct(t):
        return all(is_decided(t.field(i).type) for i in range(t.num_fields))
    if pa.types.is_map(t):
        return is_decided(t.key_type) and is_decided(t.item_type)
    value_type = getattr(t, "value_type", None)
    if isinstance(value_type, pa.DataType) and not pa.types.is_dictionary(t):
        return is_decided(value_type)
    return True


def type_token(t: pa.DataType) -> str:
    """``t`` as a string that survives any nesting (a one-field Arrow schema, base64)."""
    return base64.b64encode(pa.schema([pa.field("t", t)]).serialize().to_pybytes()).decode()


def token_type(token: str) -> pa.DataType:
    """The type :func:`type_token` encoded."""
    return pa.ipc.read_schema(pa.py_buffer(base64.b64decode(token))).field(0).type


def _value_type(name: str, value: Any) -> pa.DataType | str:
    """The Arrow type of one value, or the cause of a row whose value Arrow cannot hold."""
    try:
        return pa.array([value]).type
    except CONVERSION_ERRORS:
        kind = type(value).__name__
        return f"{TYPE_CONFLICT}: column {name!r} cannot store a value of type {kind} in Arrow"


def build_columns(
    columns: Mapping[str, Sequence[Any]],
    num_rows: int,
    *,
    types: Mapping[str, pa.DataType] | None = None,
    groups: Sequence[Hashable] | None = None,
) -> tuple[pa.Table, dict[int, str]]:
    """A table from Python column values, with the rows whose values do not fit failed, not the job.

    Returns the table and ``{row index: cause}`` for the failed rows (their user values are null in the
    table). A column takes the type of its first value, promoted (:func:`unify_types`) by the values
    after it; a value of a type that does not unify fails its row with ``"TypeConflict: column 'x' has
    int64 and string"``, a value Arrow cannot hold at all (an arbitrary object) fails it too. ``types``
    gives columns an established type to start from (a value must unify with it). With ``groups``
    (a key per row, e.g. the parent), rows fail together: groups are taken in order of first row, and a
    group with any value that does not fit fails as a whole, its values deciding nothing. Reserved
    columns are the library's own and are built with their canonical type, never isolated.
    """
    types = types or {}
    arrays: dict[str, pa.Array] = {}
    for name, values in columns.items():
        if is_reserved(name):
            arrays[name] = pa.array(values, type=TYPES.get(name))
            continue
        try:
            array = pa.array(values)
        except CONVERSION_ERRORS:
            break
        if unify_types(types.get(name), array.type) is None:
            break
        arrays[name] = array
    else:
        return _table(arrays, num_rows), {}
    return _isolate(columns, num_rows, types, groups)


def _isolate(
    columns: Mapping[str, Sequence[Any]],
    num_rows: int,
    types: Mapping[str, pa.DataType],
    groups: Sequence[Hashable] | None,
) -> tuple[pa.Table, dict[int, str]]:
    """The slow path of :func:`build_columns`: decide each group's fate, then build what fits."""
    keys: Sequence[Hashable] = groups if groups is not None else range(num_rows)
    members: dict[Hashable, list[int]] = {}
    for i, key in enumerate(keys):
        members.setdefault(key, []).append(i)
    user = [name for name in columns if not is_reserved(name)]
    value_types: dict[str, dict[int, pa.DataType | str]] = {name: {} for name in user}
    for name in user:
        for i, value in enumerate(columns[name]):
            if value is not None:
                value_types[name][i] = _value_type(name, value)
    # groups failed because a value did not convert to the type chosen for its column
    forced: dict[Hashable, str] = {}
    while True:
        failed: dict[int, str] = {}
        targets: dict[str, pa.DataType | None] = {name: types.get(name) for name in user}
        for key, rows in members.items():
            cause = forced.get(key)
            trial: dict[str, pa.DataType | None] = {}
            for name in user if cause is None else ():
                target = targets[name]
                for i in rows:
                    found = value_types[name].get(i)
                    if found is None:
                        continue
                    if isinstance(found, str):
                        cause = found
                        break
                    if pa.types.is_null(found):
                        continue
                    unified = unify_types(target, found)
                    if unified is None:
                        cause = f"{TYPE_CONFLICT}: column {name!r} has {target} and {found}"
                        break
                    target = unified
                if cause is not None:
                    break
                trial[name] = target
            if cause is None:
                targets.update(trial)
            else:
                failed.update(dict.fromkeys(rows, cause))
        arrays: dict[str, pa.Array] = {}
        misfit: str | None = None
        for name, values in columns.items():
            if is_reserved(name):
                arrays[name] = pa.array(values, type=TYPES.get(name))
                continue
            kept = [None if i in failed else v for i, v in enumerate(values)]
            try:
                arrays[name] = pa.array(kept, type=targets[name])
            except CONVERSION_ERRORS:
                misfit = name
                break
        if misfit is None:
            return _table(arrays, num_rows), failed
        target = targets[misfit]
        before = len(forced)
        live = [(i, v) for i, v in enumerate(columns[misfit]) if i not in failed and v is not None]
        for i, value in live:
            try:
                pa.array([value], type=target)
            except CONVERSION_ERRORS:
                forced.setdefault(
                    keys[i],
                    f"{TYPE_CONFLICT}: column {misfit!r} has {target} and a "
                    f"{type(value).__name__} value that does not fit it",
                )
        if len(forced) == before:  # each value fits alone but not together: none of them is kept
            for i, value in live:
                forced.setdefault(
                    keys[i],
                    f"{TYPE_CONFLICT}: column {misfit!r} cannot store a value of type "
                    f"{type(value).__name__} in Arrow",
                )
        if len(forced) == before:  # nothing left to fail: a bug here, not bad input
            raise ContractError(f"column {misfit!r} cannot be stored as Arrow {target}")


def _table(arrays: dict[str, pa.Array], num_rows: int) -> pa.Table:
    if not arrays:
        return pa.table({"__empty__": pa.nulls(num_rows)}).drop(["__empty__"])
    return pa.table(arrays)


def build_rows(
    rows: Sequence[Mapping],
    *,
    types: Mapping[str, pa.DataType] | None = None,
    groups: Sequence[Hashable] | None = None,
) -> tuple[pa.Table, dict[int, str]]:
    """:func:`build_columns` over row dicts whose keys may differ, with every lineage column."""
    if not rows:
        return empty(), {}
    names: dict[str, None] = {}
    for row in rows:
        names.update(dict.fromkeys(row))
    columns = {name: [row.get(name) for row in rows] for name in names}
    table, failed = build_columns(columns, len(rows), types=types, groups=groups)
    return conform(table), failed


def with_statuses(table: pa.Table, statuses: Mapping[int, Status]) -> pa.Table:
    """``table`` (with lineage columns) whose rows ``statuses`` (by index) take those statuses."""
    if not statuses:
        return table
    table = conform(table)
    columns = {
        OUTCOME: table[OUTCOME].to_pylist(),
        CAUSE: table[CAUSE].to_pylist(),
        STAGE: table[STAGE].to_pylist(),
    }
    for i, status in statuses.items():
        columns[OUTCOME][i] = status.outcome.value
        columns[CAUSE][i] = status.cause
        columns[STAGE][i] = status.stage
    for name, values in columns.items():
        index = table.column_names.index(name)
        table = table.set_column(index, pa.field(name, TYPES[name]), pa.array(values, TYPES[name]))
    return table


class EstablishedTypes:
    """One operator's view of the run's column types of one stage: first writer wins, run-wide.

    Blocks of different tasks meet in Ray Data, which concatenates them with permissive promotion only;
    a column that is ``int64`` in one block and ``string`` in another would stop the run there. So the
    first block that shows a column (with a decided type) establishes its type for the stage, through
    ``coordinator.establish_types(stage, {column: token})``, and later rows whose values do not unify
    with it fail, their root with them. Established types are cached here: the coordinator is asked
    only when a column this operator has not seen yet appears. A column shown with no decided type
    (only ``None`` or ``[]`` so far) establishes nothing but is noted (``coordinator.note_columns``):
    it is a column of the stage all the same, which an empty group of its rows reduces to ``[]``.
    """

    def __init__(self, coordinator: Any, stage: str) -> None:
        self._coordinator = coordinator
        self._stage = stage
        self._known: dict[str, pa.DataType] = {}
        self._noted: set[str] = set()  # columns noted with no decided type
        # the last schema that needed nothing (an established type never changes)
        self._fits: pa.Schema | None = None

    def build_rows(
        self, rows: Sequence[Mapping], *, groups: Sequence[Hashable] | None = None
    ) -> tuple[pa.Table, dict[int, str]]:
        """:func:`build_rows` with the established types; establishes the new columns it shows."""
        return self._established(
            lambda: build_rows(rows, types=self._known, groups=groups),
        )

    def build_columns(
        self,
        columns: Mapping[str, Sequence[Any]],
        num_rows: int,
        *,
        groups: Sequence[Hashable] | None = None,
    ) -> tuple[pa.Table, dict[int, str]]:
        """:func:`build_columns` with the established types; establishes the new columns it shows."""
        return self._established(
            lambda: build_columns(columns, num_rows, types=self._known, groups=groups),
        )

    def _established(
        self, build: Callable[[], tuple[pa.Table, dict[int, str]]]
    ) -> tuple[pa.Table, dict[int, str]]:
        """``build()``, then again if a column it shows was established with a type it conflicts with."""
        table, failed = build()
        new = {
            field.name: type_token(field.type)
            for field in table.schema
            if not is_reserved(field.name)
            and field.name not in self._known
            and is_decided(field.type)
        }
        if new:
            answer = self._coordinator.establish_types(self._stage, new)
            redo = False
            for name, token in answer.items():
                established = token_type(token)
                self._known[name] = established
                redo = redo or unify_types(established, table.schema.field(name).type) is None
            if redo:
                table, failed = build()
        self._note_open(table.schema)
        return table, failed

    def _note_open(self, schema: pa.Schema) -> None:
        """Note the user columns of ``schema`` with no decided type that neither cache knows (one call)."""
        open_ = [
            f.name
            for f in schema
            if f.name not in self._known
            and f.name not in self._noted
            and not is_reserved(f.name)
            and not is_decided(f.type)
        ]
        if open_:
            self._coordinator.note_columns(self._stage, open_)
            self._noted.update(open_)

    def conform_table(self, table: pa.Table) -> tuple[pa.Table, dict[int, str]]:
        """``table`` (user columns) cast to the established types; rows whose values do not fit fail.

        Returns the table (a failed row's value in a conflicting column becomes null) and
        ``{row index: cause}``. Columns new to this operator are established first (one call).
        """
        schema = table.schema
        if self._fits is not None and schema.equals(self._fits):  # the usual batch
            return table, {}
        new = {
            f.name: type_token(f.type)
            for f in table.schema
            if not is_reserved(f.name) and f.name not in self._known and is_decided(f.type)
        }
        if new:
            for name, token in self._coordinator.establish_types(self._stage, new).items():
                self._known[name] = token_type(token)
        self._note_open(schema)
        failed: dict[int, str] = {}
        for index, f in enumerate(table.schema):
            established = self._known.get(f.name)
            if established is None or unify_types(established, f.type) is not None:
                continue
            try:
                column = table[f.name].cast(established)
            except CONVERSION_ERRORS:
                cause = f"{TYPE_CONFLICT}: column {f.name!r} has {established} and {f.type}"
                valid = table[f.name].is_valid().to_pylist()
                failed.update({i: cause for i, ok in enumerate(valid) if ok})
                column = pa.nulls(table.num_rows, established)
            table = table.set_column(index, pa.field(f.name, established), column)
        if table.schema.equals(schema) and all(
            f.name in self._known or not is_decided(f.type) or is_reserved(f.name) for f in schema
        ):
            self._fits = schema  # every decided column established, none cast
        return table, failed
