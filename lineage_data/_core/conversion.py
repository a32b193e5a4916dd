"""User values to Arrow columns: one type per column and stage, a root whose values do not fit failing alone.

Bad input is a root's outcome, not the job's. :class:`EstablishedTypes` keeps one type per column of a
stage across a run, so that Ray Data can concatenate every block. Also reachable as ``C.X``.
"""

from __future__ import annotations

import base64
import functools
import itertools
from collections.abc import Hashable, Mapping, Sequence
from typing import Any

import pyarrow as pa

from lineage_data._core import columns as C
from lineage_data._core.errors import ContractError
from lineage_data._core.outcomes import Status
from lineage_data._core.state.protocols import OperatorClient, StageClient

TYPE_CONFLICT = "TypeConflict"
CONVERSION_ERRORS = (pa.ArrowException, TypeError, ValueError, OverflowError)


@functools.lru_cache(maxsize=4096)
def unify_types(a: pa.DataType | None, b: pa.DataType) -> pa.DataType | None:
    """The type both ``a`` and ``b`` promote to safely (as ``pa.unify_schemas`` "permissive"), or None.

    ``a=None``: nothing known yet. Ray Data concatenates blocks with the same promotion.
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
    """False when ``t`` is, or holds, the null type: it tells nothing of later values (never established)."""
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
        return _unstorable(name, value)


def _unstorable(name: str, value: Any) -> str:
    kind = type(value).__name__
    return f"{TYPE_CONFLICT}: column {name!r} cannot store a value of type {kind} in Arrow"


def build_columns(
    columns: Mapping[str, Sequence[Any]],
    num_rows: int,
    *,
    types: Mapping[str, pa.DataType] | None = None,
    groups: Sequence[Hashable] | None = None,
) -> tuple[pa.Table, dict[int, str]]:
    """A table from Python column values, and ``{row index: cause}`` for the rows whose values do not fit.

    A failed row's user values are null. A column's type is its values' types unified, starting from
    ``types`` (the established ones); a value that does not unify or that Arrow cannot hold fails its
    row, or with ``groups`` (a key per row) its whole group, whose values then decide nothing.
    """
    types = types or {}
    arrays: dict[str, pa.Array] = {}
    for name, values in columns.items():
        if C.is_reserved(name):
            arrays[name] = pa.array(values, type=C.TYPES.get(name))
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
    """The slow path of :func:`build_columns`: decide each group's fate, then build what fits.

    If a column still does not convert to its type, the groups holding the values that do not fit are
    failed (``forced``) and the fates decided again.
    """
    keys: Sequence[Hashable] = groups if groups is not None else range(num_rows)
    members: dict[Hashable, list[int]] = {}
    for i, key in enumerate(keys):
        members.setdefault(key, []).append(i)
    user = [name for name in columns if not C.is_reserved(name)]
    value_types = {
        name: {i: _value_type(name, v) for i, v in enumerate(columns[name]) if v is not None}
        for name in user
    }
    # groups failed because a value did not convert to the type chosen for its column
    forced: dict[Hashable, str] = {}
    while True:
        targets: dict[str, pa.DataType | None] = {name: types.get(name) for name in user}
        failed: dict[int, str] = {}
        for key, rows in members.items():
            cause = forced.get(key) or _widen(targets, user, rows, value_types)
            if cause is not None:
                failed.update(dict.fromkeys(rows, cause))
        arrays: dict[str, pa.Array] = {}
        for name, values in columns.items():
            if C.is_reserved(name):
                arrays[name] = pa.array(values, type=C.TYPES.get(name))
                continue
            kept = [None if i in failed else v for i, v in enumerate(values)]
            try:
                arrays[name] = pa.array(kept, type=targets[name])
            except CONVERSION_ERRORS:
                _force(name, columns[name], targets[name], failed, keys, forced)
                break
        else:
            return _table(arrays, num_rows), failed


def _widen(
    targets: dict[str, pa.DataType | None],
    user: Sequence[str],
    rows: Sequence[int],
    value_types: Mapping[str, Mapping[int, pa.DataType | str]],
) -> str | None:
    """Unify one group's values into ``targets``; the cause instead if one of them does not fit.

    ``targets`` changes only when the whole group fits: a failed group's values decide nothing.
    """
    trial: dict[str, pa.DataType | None] = {}
    for name in user:
        target = targets[name]
        for i in rows:
            found = value_types[name].get(i)
            if found is None:
                continue
            if isinstance(found, str):
                return found
            if pa.types.is_null(found):
                continue
            unified = unify_types(target, found)
            if unified is None:
                return f"{TYPE_CONFLICT}: column {name!r} has {target} and {found}"
            target = unified
        trial[name] = target
    targets.update(trial)
    return None


def _force(
    misfit: str,
    values: Sequence[Any],
    target: pa.DataType | None,
    failed: Mapping[int, str],
    keys: Sequence[Hashable],
    forced: dict[Hashable, str],
) -> None:
    """Fail (in ``forced``) the groups whose values of column ``misfit`` do not convert to ``target``.

    A :class:`ContractError` when no group is left to fail: a bug here, not bad input.
    """
    before = len(forced)
    live = [(i, v) for i, v in enumerate(values) if i not in failed and v is not None]
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
            forced.setdefault(keys[i], _unstorable(misfit, value))
    if len(forced) == before:
        raise ContractError(f"column {misfit!r} cannot be stored as Arrow {target}")


def _table(arrays: dict[str, pa.Array], num_rows: int) -> pa.Table:
    if not arrays:
        return pa.table({"__empty__": pa.nulls(num_rows)}).drop(["__empty__"])
    return pa.table(arrays)


def row_columns(rows: Sequence[Mapping]) -> dict[str, list]:
    """Row dicts whose keys may differ as columns, in order of first appearance (None where absent)."""
    names = dict.fromkeys(itertools.chain.from_iterable(rows))
    return {name: [row.get(name) for row in rows] for name in names}


def with_statuses(table: pa.Table, statuses: Mapping[int, Status]) -> pa.Table:
    """``table`` (with lineage columns) whose rows ``statuses`` (by index) take those statuses."""
    if not statuses:
        return table
    table = C.conform(table)
    columns = {name: table[name].to_pylist() for name in (C.OUTCOME, C.CAUSE, C.STAGE)}
    for i, status in statuses.items():
        columns[C.OUTCOME][i] = status.outcome.value
        columns[C.CAUSE][i] = status.cause
        columns[C.STAGE][i] = status.stage
    for name, values in columns.items():
        index = table.column_names.index(name)
        table = table.set_column(
            index, pa.field(name, C.TYPES[name]), pa.array(values, C.TYPES[name])
        )
    return table


class EstablishedTypes:
    """One operator's view of the run's column types of one stage: first writer wins, run-wide.

    A column ``int64`` in one block and ``string`` in another would stop Ray Data's concatenation, so
    the first block that shows a decided type establishes it (``coordinator.establish_types``) and later
    rows that do not unify fail. A column with no decided type yet is only noted
    (``coordinator.note_columns``): an empty group still reduces it to ``[]``.
    """

    def __init__(self, coordinator: StageClient | OperatorClient, stage: str) -> None:
        self._coordinator = coordinator
        self._stage = stage
        self._known: dict[str, pa.DataType] = {}
        self._noted: set[str] = set()  # columns noted with no decided type
        # the last schema that needed nothing (an established type never changes)
        self._fits: pa.Schema | None = None

    def build_rows(
        self, rows: Sequence[Mapping], *, groups: Sequence[Hashable] | None = None
    ) -> tuple[pa.Table, dict[int, str]]:
        """:meth:`build_columns` over row dicts whose keys may differ, with every lineage column."""
        if not rows:
            return C.empty(), {}
        table, failed = self.build_columns(row_columns(rows), len(rows), groups=groups)
        return C.conform(table), failed

    def build_columns(
        self,
        columns: Mapping[str, Sequence[Any]],
        num_rows: int,
        *,
        groups: Sequence[Hashable] | None = None,
    ) -> tuple[pa.Table, dict[int, str]]:
        """:func:`build_columns` with the established types; establishes the new columns it shows.

        Built again if a column it shows was just established (elsewhere) with a conflicting type.
        """
        table, failed = build_columns(columns, num_rows, types=self._known, groups=groups)
        answer = self._establish(table.schema)
        if any(unify_types(self._known[n], table.schema.field(n).type) is None for n in answer):
            table, failed = build_columns(columns, num_rows, types=self._known, groups=groups)
        self._note_open(table.schema)
        return table, failed

    def _establish(self, schema: pa.Schema) -> dict[str, str]:
        """Establish the decided user columns of ``schema`` not known yet; the coordinator's answer."""
        new = {
            f.name: type_token(f.type)
            for f in schema
            if not C.is_reserved(f.name) and f.name not in self._known and is_decided(f.type)
        }
        answer = self._coordinator.establish_types(self._stage, new) if new else {}
        for name, token in answer.items():
            self._known[name] = token_type(token)
        return answer

    def _note_open(self, schema: pa.Schema) -> None:
        """Note the user columns of ``schema`` with no decided type that neither cache knows (one call)."""
        open_ = [
            f.name
            for f in schema
            if f.name not in self._known
            and f.name not in self._noted
            and not C.is_reserved(f.name)
            and not is_decided(f.type)
        ]
        if open_:
            self._coordinator.note_columns(self._stage, open_)
            self._noted.update(open_)

    def conform_table(self, table: pa.Table) -> tuple[pa.Table, dict[int, str]]:
        """``table`` (user columns) cast to the established types; rows whose values do not fit fail.

        Returns the table (a failed row's conflicting value is null) and ``{row index: cause}``.
        """
        schema = table.schema
        if self._fits is not None and schema.equals(self._fits):  # the usual batch
            return table, {}
        self._establish(schema)
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
            f.name in self._known or not is_decided(f.type) or C.is_reserved(f.name) for f in schema
        ):
            self._fits = schema  # every decided column established, none cast
        return table, failed
