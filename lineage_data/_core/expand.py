"""``expand_lineage``: one parent row -> its ordered children, then a group header."""

from __future__ import annotations

import pickle
from collections import Counter
from collections.abc import Generator, Iterator, Mapping
from contextlib import suppress
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lineage_data._core import columns as C
from lineage_data._core import outcomes
from lineage_data._core.blocks import DEFAULT_ROWS_PER_BLOCK, TARGET_BLOCK_BYTES, row_bytes
from lineage_data._core.conversion import row_columns
from lineage_data._core.errors import ContractError, PlanError, StageFailedError, describe
from lineage_data._core.guard import Guard, Watchdog, unit_key
from lineage_data._core.outcomes import Outcome, Status
from lineage_data._core.policy import CallPolicy
from lineage_data._core.stages import Expand
from lineage_data._core.state.protocols import OperatorClient

__all__ = ["DEFAULT_ROWS_PER_BLOCK", "ExpandOp"]


class ExpandOp:
    """Expands every PRESENT entity of the stage's level into children.

    Children go out in blocks of ``rows_per_block`` rows or ``target_bytes`` bytes as the function
    yields them. After a parent's last child comes its *header*: the parent's columns (binary ones
    released unless carried) and its number of children; a parent that fails or has no children
    still gets one, so it is never lost.
    """

    def __init__(
        self,
        stage: Expand,
        coordinator: OperatorClient,
        *,
        rows_per_block: int = DEFAULT_ROWS_PER_BLOCK,
        target_bytes: int = TARGET_BLOCK_BYTES,
        watchdog: Watchdog | None = None,
    ) -> None:
        self._stage = stage
        self._guard = Guard.of(stage, coordinator, watchdog=watchdog)
        self._coordinator = coordinator
        self._rows_per_block = rows_per_block
        self._target_bytes = target_bytes
        self._checked: set[tuple] = set()  # key sets of children that passed check_user_row
        self._fn = stage.call.bind()
        self._types = C.EstablishedTypes(coordinator, stage.name)

    def __call__(self, table: pa.Table) -> Iterator[pa.Table]:
        """Process one batch; yields blocks of ``rows_per_block`` rows (the last one fewer)."""
        parents, passthrough = split_level(C.conform(table), self._stage.level, headers=False)
        blocks = _Blocks(self)
        rows, lineage = self._rows(parents)
        guard = self._guard
        whole = True
        if lineage:  # the block is journaled before any parent runs (see _core.guard)
            whole = guard.block(len(lineage), unit_key(*lineage[0][:2]), unit_key(*lineage[-1][:2]))
        for row, (root, path, outcome, cause, stage) in zip(rows, lineage, strict=True):
            key = (root, path)
            entering = (
                None
                if outcome == Outcome.PRESENT.value
                else outcomes.entering(Status(Outcome(outcome), cause, stage))
            )
            payload = None  # a parent that is not expanded keeps no payload
            if entering is None and not whole:  # an isolated block: each parent journaled alone
                entering = guard.unit(unit_key(*key))
            if entering is None:
                guard.tick()  # timeout_s bounds each wait for the next child (not the yields)
                try:
                    entering = yield from self._children(row, key, blocks)
                finally:
                    guard.pause()
                payload = self._parent_payload(row)
                if not whole:
                    guard.done(unit_key(*key))
            yield from blocks.close(key, payload, entering)
        if lineage:
            guard.done_block()
        yield from blocks.finish()
        # rows of other levels go last, so they do not shift the blocks off their boundaries
        if passthrough is not None and passthrough.num_rows:
            yield passthrough
        self._coordinator.count(self._stage.name, blocks.counts)

    def _rows(self, parents: pa.Table) -> tuple[list[dict], list[tuple]]:
        """The parent rows without lineage, and their ``(root, path, outcome, cause, stage)``."""
        rows = parents.select([n for n in parents.column_names if n not in C.ALL]).to_pylist()
        lineage = zip(
            parents[C.ROOT].to_pylist(),
            C.paths(parents[C.PATH], self._stage.level),
            parents[C.OUTCOME].to_pylist(),
            parents[C.CAUSE].to_pylist(),
            parents[C.STAGE].to_pylist(),
            strict=True,
        )
        return rows, list(lineage)

    def _children(
        self, row: dict, key: ParentKey, blocks: _Blocks
    ) -> Generator[pa.Table, None, Status]:
        """One parent's children into ``blocks``, yielding full blocks; returns the parent's status.

        Stops early when a block fails the parent; a raising ``fn`` or a child that is not a dict fails
        it (``on_error="raise"`` stops the run on a raising ``fn``).
        """
        stage = self._stage
        carry = self._carry(row)
        fixed = row_bytes(carry) + _LINEAGE_BYTES  # what every child of this parent adds
        try:
            children = self._fn(dict(row))
            for n, child in enumerate(children):
                try:
                    child = self._check(child, n)
                except ContractError as exc:
                    _close(children)
                    return outcomes.rejected(describe(exc), stage.name)
                block = blocks.add(key, {**carry, **child}, fixed + row_bytes(child))
                if block is not None:
                    # downstream may hold this yield for long (backpressure): not the function's time
                    self._guard.pause()
                    yield block
                self._guard.tick()
                if key in blocks.failed:
                    _close(children)  # this parent is FAILED: its later children are not needed
                    return outcomes.PRESENT
        except (ContractError, PlanError):
            raise
        except StageFailedError as exc:
            raise CallPolicy(stage.name, stage.on_error).stopped(exc) from exc
        except Exception as exc:  # noqa: BLE001 - user code may raise anything
            return CallPolicy(stage.name, stage.on_error).failed(exc, "a parent")
        return outcomes.PRESENT

    def _carry(self, row: dict) -> dict:
        missing = [c for c in self._stage.carry if c not in row]
        if missing:
            raise PlanError(
                f"expand_lineage {self._stage.name!r}: carry column(s) {missing} are not in the parent row "
                f"(columns: {sorted(row)})"
            )
        return {c: row[c] for c in self._stage.carry}

    def _parent_payload(self, row: dict) -> bytes:
        kept = {
            k: v
            for k, v in row.items()
            if k in self._stage.carry or not isinstance(v, bytes | bytearray)
        }
        return pickle.dumps(kept, protocol=5)

    def _check(self, child: object, ordinal: int) -> Mapping:
        if type(child) is dict:  # a dict with keys already checked needs no second look
            keys = tuple(child)
            if keys in self._checked:
                return child
        checked = C.check_user_row(child, f"expand_lineage {self._stage.name!r}: child {ordinal}")
        if type(child) is dict and len(self._checked) < 64:
            self._checked.add(keys)
        return checked


ParentKey = tuple[str, tuple[int, ...]]
_Segment = tuple[ParentKey, int, list[dict]]  # children of one parent: ordinal of the first, rows
Payload = bytes | None  # a header's pickled parent row (None: the parent was not expanded)
_Header = tuple[ParentKey, Payload, Status]
_LINEAGE_BYTES = 64  # a child's lineage columns, about


@dataclass(slots=True)
class _Group:
    """A parent's children still to go out (user columns, from ordinal ``first``), then its header."""

    key: ParentKey
    rows: list[dict] = field(default_factory=list)
    bytes: int = 0
    header: tuple[Payload, Status] | None = None
    first: int = 0

    def take(self, count: int) -> _Segment:
        """The first ``count`` rows, out of the group, with the ordinal of the first one."""
        part, self.rows = self.rows[:count], self.rows[count:]
        segment = (self.key, self.first, part)
        self.first += count
        return segment

    @property
    def size(self) -> int:
        return len(self.rows) + (self.header is not None)


class _Blocks:
    """The children of one batch on their way out in blocks, each parent's header with its children.

    A parent whose children do not fit (conflicting column types; a value Arrow cannot hold) is FAILED
    alone, its rows in that block left out. Blocks hold exactly ``rows_per_block`` rows (the last of a
    batch fewer): Ray Data cuts the output every ``rows_per_block`` rows, so equal blocks keep its cuts
    on ours. Small parents wait, closed, in a pool and blocks are packed from whole groups that fill
    them exactly (a group is split only when none is found), so the reduce completes almost every
    parent within one block, without asking the group holders.
    """

    def __init__(self, op: ExpandOp) -> None:
        self._op = op
        self._rows = op._rows_per_block
        self._current: _Group | None = None  # the parent being expanded
        self._pool: list[_Group] = []  # closed parents waiting to be packed
        self._pool_rows = 0
        self._pool_bytes = 0
        self._emitted: Counter[ParentKey] = Counter()
        self._outcomes: Counter[str] = Counter()
        self.failed: dict[ParentKey, Status] = {}
        self.counts: dict[str, int] = {}

    def add(self, key: ParentKey, child: dict, size: int) -> pa.Table | None:
        """Buffer one child of about ``size`` bytes; a block when its parent alone fills one."""
        group = self._current  # None, or this parent's: parents are expanded one at a time
        if group is None:
            group = self._current = _Group(key)
        group.rows.append(child)
        group.bytes += size
        if len(group.rows) >= self._rows or group.bytes >= self._op._target_bytes:
            group.bytes = 0
            return self._build([group.take(len(group.rows))], [])
        return None

    def close(self, key: ParentKey, payload: Payload, status: Status) -> list[pa.Table]:
        """A parent is done: its group joins the pool; returns the blocks the pool now fills."""
        group = self._current or _Group(key)  # None when the parent had no child
        self._current = None
        group.header = (payload, status)
        self._pool.append(group)
        self._pool_rows += group.size
        self._pool_bytes += group.bytes
        return self._pack(final=False)

    def finish(self) -> list[pa.Table]:
        """The last blocks of the batch; :attr:`counts` (per outcome, and children) are final after."""
        blocks = self._pack(final=True)
        self.counts = {**self._outcomes, "children": sum(self._emitted.values())}
        return blocks

    def _pack(self, *, final: bool) -> list[pa.Table]:
        blocks = []
        while self._pool and (
            final or self._pool_rows >= self._rows or self._pool_bytes >= self._op._target_bytes
        ):
            if self._pool_rows <= self._rows or self._pool_bytes >= self._op._target_bytes:
                chosen, split = list(self._pool), None  # everything: the last block, or a heavy one
            else:
                packed = self._fill(split=final or self._pool_rows >= 2 * self._rows)
                if packed is None:
                    break  # wait for more parents
                chosen, split = packed
            blocks.append(self._emit(chosen, split))
        return blocks

    def _fill(self, *, split: bool) -> tuple[list[_Group], tuple[_Group, int] | None] | None:
        """Groups that fill one block exactly, and the group to split to fill it (or None).

        Largest groups first, then one of exactly the room left, or one swapped for a group that much
        larger; else, with ``split``, part of a group's children. None: wait for more parents.
        """
        ranked = sorted(self._pool, key=lambda g: g.size, reverse=True)
        chosen: list[_Group] = []
        room = self._rows
        for group in ranked:
            if group.size <= room:
                chosen.append(group)
                room -= group.size
        if not room:
            return chosen, None
        taken = {id(g) for g in chosen}
        rest = [g for g in ranked if id(g) not in taken]
        exact = next((g for g in rest if g.size == room), None)
        if exact is not None:
            return [*chosen, exact], None
        for i, old in enumerate(chosen):
            bigger = next((g for g in rest if g.size == old.size + room), None)
            if bigger is not None:
                return [*chosen[:i], bigger, *chosen[i + 1 :]], None
        if not split:
            return None
        # rest is not empty: the pool overflows
        donor = next(g for g in rest if len(g.rows) >= room)
        return chosen, (donor, room)

    def _emit(self, chosen: list[_Group], split: tuple[_Group, int] | None) -> pa.Table:
        taken = {id(g) for g in chosen}
        self._pool = [g for g in self._pool if id(g) not in taken]
        self._pool_rows -= sum(g.size for g in chosen)
        self._pool_bytes -= sum(g.bytes for g in chosen)
        segments = [g.take(len(g.rows)) for g in chosen]
        headers = [(g.key, *g.header) for g in chosen if g.header is not None]
        if split is not None:
            donor, count = split
            segment = donor.take(count)
            moved = sum(row_bytes(row) for row in segment[2]) + count * _lineage_bytes(donor.key)
            donor.bytes -= moved
            self._pool_rows -= count
            self._pool_bytes -= moved
            segments.append(segment)
        return self._build(segments, headers)

    def _build(self, segments: list[_Segment], headers: list[_Header]) -> pa.Table:
        """One block: the children (parents that do not fit failed), then the headers given.

        Built column by column: the lineage columns come after the first row's own columns.
        """
        # a failed parent's rest is dropped
        segments = [s for s in segments if s[0] not in self.failed and s[2]]
        if not segments:
            return self._headers(headers) if headers else C.empty()
        rows = [row for _, _, part in segments for row in part]
        keys = [key for key, _, part in segments for _ in part]
        user, failed = self._op._types.build_columns(row_columns(rows), len(rows), groups=keys)
        paths = _child_paths(segments)
        if failed:
            for i, cause in failed.items():
                self.failed.setdefault(keys[i], outcomes.rejected(cause, self._op._stage.name))
            kept = pa.array([i not in failed for i in range(len(rows))])
            user, paths = user.filter(kept), paths.filter(kept)
            keys = [k for i, k in enumerate(keys) if i not in failed]
            self._emitted.update(keys)
        else:
            for key, _, part in segments:
                self._emitted[key] += len(part)
        if not keys:
            return self._headers(headers) if headers else C.empty()
        head = self._header_columns(headers)
        n, blank = len(keys), [None] * len(keys)
        lineage = {
            C.ROOT: pa.array([k[0] for k in keys] + head[C.ROOT], C.TYPES[C.ROOT]),
            C.PATH: pa.concat_arrays([paths, pa.array(head[C.PATH], C.TYPES[C.PATH])]),
            C.OUTCOME: pa.array([Outcome.PRESENT.value] * n + head[C.OUTCOME], C.TYPES[C.OUTCOME]),
        }
        first = len(rows[0])
        order = [*user.column_names[:first], *lineage, *user.column_names[first:]]
        arrays: list[Any] = []
        for name in order:
            if name in lineage:
                arrays.append(lineage[name])
            elif headers:
                column = user[name]
                nulls = pa.nulls(len(headers), column.type)
                arrays.append(pa.chunked_array([*column.chunks, nulls]))
            else:
                arrays.append(user[name])
        # the rest of the lineage, in the order conform adds it
        for name in (C.CAUSE, C.STAGE, C.SIZE, C.PARENT):
            order.append(name)
            arrays.append(pa.array(blank + head[name], C.TYPES[name]))
        return C.conform(pa.Table.from_arrays(arrays, names=order))

    def _header_columns(self, closed: list[_Header]) -> dict[str, list]:
        """The lineage columns of headers with their final status and the number of children emitted."""
        columns: dict[str, list] = {name: [] for name in _HEADER_COLUMNS}
        for key, payload, status in closed:
            if status.present:
                status = self.failed.get(key, status)
            for name, value in zip(
                _HEADER_COLUMNS,
                (key[0], list(key[1]), self._emitted[key], payload)
                + (status.outcome.value, status.cause, status.stage),
                strict=True,
            ):
                columns[name].append(value)
            self._outcomes[status.outcome.value] += 1
        return columns

    def _headers(self, closed: list[_Header]) -> pa.Table:
        """A block of headers only."""
        columns = self._header_columns(closed)
        if all(payload is None for payload in columns[C.PARENT]):
            del columns[C.PARENT]  # as a header row without a payload leaves it out
        return C.conform(
            pa.table({name: pa.array(values, C.TYPES[name]) for name, values in columns.items()})
        )


_HEADER_COLUMNS = (C.ROOT, C.PATH, C.SIZE, C.PARENT, C.OUTCOME, C.CAUSE, C.STAGE)


def split_level(table: pa.Table, level: int, *, headers: bool) -> tuple[pa.Table, pa.Table | None]:
    """The entities of ``level`` in ``table``, and the lineage of its other rows (None: no other).

    ``headers``: the headers closing ``level`` count as its entities. A table with a row without a
    path takes the Arrow way (such a row is in neither).
    """
    found = C.shape(table)
    if found is None:
        member = C.depth_mask(table, level, header=False)
        if headers:
            member = pc.or_(member, C.depth_mask(table, level, header=True))
        return table.filter(member), C.lineage_only(table.filter(pc.invert(member)))
    depth, header = found
    member = np.where(header, headers & (depth == level - 1), depth == level)
    if member.all():  # the usual batch: members only
        return table, None
    return C.pick(table, member), C.pick(C.lineage_only(table), ~member)


def _lineage_bytes(key: ParentKey) -> int:
    """What :func:`row_bytes` counts for a child's root, path and outcome columns."""
    return len(key[0]) + 8 * (len(key[1]) + 1) + len(Outcome.PRESENT.value)


def _child_paths(segments: list[_Segment]) -> pa.Array:
    """The :data:`~lineage_data._core.columns.PATH` of the children: the parent's path, then the ordinal."""
    depth = len(segments[0][0][1])  # every parent of a batch is of the stage's level
    counts = np.array([len(part) for _, _, part in segments])
    firsts = np.array([first for _, first, _ in segments])
    # a child's ordinal: its row in the block, shifted by its segment's first ordinal minus first row
    values = np.arange(counts.sum()) + np.repeat(firsts - (np.cumsum(counts) - counts), counts)
    if depth:
        parents = np.array([key[1] for key, _, _ in segments]).reshape(len(segments), depth)
        values = np.column_stack([np.repeat(parents, counts, axis=0), values]).ravel()
    offsets = np.arange(0, len(values) + 1, depth + 1, dtype=np.int32)
    return pa.ListArray.from_arrays(
        pa.array(offsets), pa.array(values.astype(np.int32)), type=C.TYPES[C.PATH]
    )


def _close(children: Any) -> None:
    """Stop a parent's child generator early (its ``finally`` blocks run now)."""
    close = getattr(children, "close", None)
    if close is not None:
        with suppress(Exception):  # the parent is already decided
            close()
