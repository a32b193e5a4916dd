"""``expand_lineage``: one parent row -> its ordered children, then a group header."""

from __future__ import annotations

import pickle
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from lineage_data._core import columns as C
from lineage_data._core import outcomes
from lineage_data._core.blocks import DEFAULT_ROWS_PER_BLOCK, TARGET_BLOCK_BYTES, row_bytes
from lineage_data._core.errors import ContractError, PlanError, describe
from lineage_data._core.outcomes import Outcome, Status
from lineage_data._core.policy import CallPolicy
from lineage_data._core.stages import Expand

__all__ = ["DEFAULT_ROWS_PER_BLOCK", "ExpandOp"]


class ExpandOp:
    """Expands every PRESENT entity of the stage's level into children.

    Children are emitted in blocks of ``rows_per_block`` rows (see :mod:`blocks`: one downstream batch)
    or ``target_bytes`` bytes, whichever is reached first, as the function yields them, so one huge
    parent spreads over many downstream workers and many small parents share a block. After a
    parent's last child comes its *header*: the parent's columns (binary columns are released unless
    carried) and the number of children. A parent whose function raises gets a FAILED header
    (children already emitted are discarded at reduce); a parent with no children gets a header of
    size 0 — it is never lost.
    """

    def __init__(
        self,
        stage: Expand,
        index: int,
        coordinator: Any,
        *,
        rows_per_block: int = DEFAULT_ROWS_PER_BLOCK,
        target_bytes: int = TARGET_BLOCK_BYTES,
    ) -> None:
        self._stage = stage
        self._index = index
        self._coordinator = coordinator
        self._rows_per_block = rows_per_block
        self._target_bytes = target_bytes
        self._checked: set[tuple] = set()  # key sets of children that passed check_user_row
        self._fn = stage.call.bind()
        self._types = C.EstablishedTypes(coordinator, stage.name)

    def __call__(self, table: pa.Table) -> Iterator[pa.Table]:
        """Process one batch; yields blocks of ``rows_per_block`` rows (the last one fewer)."""
        table = C.conform(table)
        entity = C.depth_mask(table, self._stage.level, header=False)
        blocks = _Blocks(self)
        for row in table.filter(entity).to_pylist():
            lineage = {name: row.pop(name) for name in C.ALL}
            status = Status(Outcome(lineage[C.OUTCOME]), lineage[C.CAUSE], lineage[C.STAGE])
            header = {C.ROOT: lineage[C.ROOT], C.PATH: lineage[C.PATH], C.SIZE: 0}
            entering = outcomes.entering(status)
            if entering is None:
                children = _Children(self, row, lineage, blocks)
                yield from children
                entering = children.result
                header[C.PARENT] = self._parent_payload(row)
            yield from blocks.close(header, entering)
        yield from blocks.finish()
        # rows of other levels go last, so they do not shift the blocks off their boundaries
        passthrough = C.lineage_only(table.filter(pc.invert(entity)))
        if passthrough.num_rows:
            yield passthrough
        self._coordinator.count(self._stage.name, blocks.counts)

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
_LINEAGE_BYTES = 64  # a child's lineage columns, about


@dataclass(slots=True)
class _Group:
    """A parent's rows still to go out: children not emitted yet, then (once it is closed) its header."""

    key: ParentKey
    rows: list[dict] = field(default_factory=list)
    bytes: int = 0
    header: tuple[dict, Status] | None = None

    @property
    def size(self) -> int:
        return len(self.rows) + (self.header is not None)


class _Blocks:
    """The children of one batch on their way out in blocks, each parent's header with its children.

    Every block is built with :meth:`~lineage_data._core.columns.EstablishedTypes.build_rows`, grouped
    by parent: a parent whose children do not fit (conflicting column types among its children, with
    another parent's, or with the stage's established types; a value Arrow cannot hold) is FAILED
    alone and its rows in that block are left out, the other parents' rows go on. Its header counts
    only the children emitted before, which the reduce then discards with it.

    Blocks hold exactly ``rows_per_block`` rows (the last of a batch fewer), because Ray Data cuts the
    expansion's output every ``rows_per_block`` rows: equal blocks keep those cuts on our boundaries.
    A parent with more children than a block spreads over consecutive blocks of its own, its header
    after its last children. Smaller parents wait, closed, in a pool, and blocks are packed from whole
    groups (children + header) that fill them exactly; only when no exact fill is found among two
    blocks' worth of groups (or at the end) is a group split. So the reduce completes almost every
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
        group = self._current
        if group is None or group.key != key:
            group = self._current = _Group(key)
        group.rows.append(child)
        group.bytes += size
        if len(group.rows) >= self._rows or group.bytes >= self._op._target_bytes:
            rows, group.rows, group.bytes = group.rows, [], 0
            return self._build([(key, row) for row in rows], [])
        return None

    def close(self, header: dict, status: Status) -> list[pa.Table]:
        """A parent is done: its group joins the pool; returns the blocks the pool now fills."""
        key = (header[C.ROOT], tuple(header[C.PATH]))
        group = self._current if self._current is not None and self._current.key == key else None
        self._current = None
        group = group or _Group(key)
        group.header = (header, status)
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

        Largest groups first, then one group of exactly the room left, or one swapped for a group
        that much larger; else, with ``split``, the room is filled by part of a group's children.
        None: no exact fill and no split allowed (wait for more parents).
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
        donor = next(
            g for g in rest if len(g.rows) >= room
        )  # rest is not empty: the pool overflows
        return chosen, (donor, room)

    def _emit(self, chosen: list[_Group], split: tuple[_Group, int] | None) -> pa.Table:
        taken = {id(g) for g in chosen}
        self._pool = [g for g in self._pool if id(g) not in taken]
        rows = [(g.key, row) for g in chosen for row in g.rows]
        headers = [g.header for g in chosen if g.header is not None]
        self._pool_rows -= sum(g.size for g in chosen)
        self._pool_bytes -= sum(g.bytes for g in chosen)
        if split is not None:
            donor, count = split
            part, donor.rows = donor.rows[:count], donor.rows[count:]
            moved = sum(row_bytes(row) for row in part)
            donor.bytes -= moved
            self._pool_rows -= count
            self._pool_bytes -= moved
            rows.extend((donor.key, row) for row in part)
        return self._build(rows, headers)

    def _build(
        self, rows: list[tuple[ParentKey, dict]], headers: list[tuple[dict, Status]]
    ) -> pa.Table:
        """One block: the children (parents that do not fit failed), then the headers given."""
        rows = [
            (k, r) for k, r in rows if k not in self.failed
        ]  # a failed parent's rest is dropped
        tables = []
        if rows:
            keys = [k for k, _ in rows]
            table, failed = self._op._types.build_rows([r for _, r in rows], groups=keys)
            for i, cause in failed.items():
                self.failed.setdefault(keys[i], outcomes.rejected(cause, self._op._stage.name))
            if failed:
                table = table.filter(pa.array([i not in failed for i in range(table.num_rows)]))
            self._emitted.update(k for i, k in enumerate(keys) if i not in failed)
            if table.num_rows:
                tables.append(table)
        if headers:
            tables.append(self._headers(headers))
        return C.concat(tables)

    def _headers(self, closed: list[tuple[dict, Status]]) -> pa.Table:
        """Headers with their final status and the number of children emitted before them."""
        out = []
        for header, status in closed:
            key = (header[C.ROOT], tuple(header[C.PATH]))
            if status.present:
                status = self.failed.get(key, status)
            header[C.SIZE] = self._emitted[key]
            header.update(
                {C.OUTCOME: status.outcome.value, C.CAUSE: status.cause, C.STAGE: status.stage}
            )
            self._outcomes[status.outcome.value] += 1
            out.append(header)
        return C.rows_to_table(out)


class _Children:
    """Iterates one parent's children into ``blocks``, yielding full blocks; ``result`` after the end.

    The parent's iteration stops early when a block fails it; a raising ``fn`` or a child that is not a
    dict fails the parent (``on_error="raise"`` stops the run on a raising ``fn``).
    """

    def __init__(self, op: ExpandOp, row: dict, lineage: dict, blocks: _Blocks) -> None:
        self._op, self._row, self._lineage, self._blocks = op, row, lineage, blocks
        self.result: Status = outcomes.PRESENT

    def __iter__(self) -> Iterator[pa.Table]:
        op, stage = self._op, self._op._stage
        carry = op._carry(self._row)
        fixed = row_bytes(carry) + _LINEAGE_BYTES  # what every child of this parent adds
        root, path = self._lineage[C.ROOT], list(self._lineage[C.PATH])
        key = (root, tuple(path))
        n = 0
        children: Any = None
        try:
            children = op._fn(dict(self._row))
            for child in children:
                try:
                    child = op._check(child, n)
                except ContractError as exc:
                    self.result = outcomes.rejected(describe(exc), stage.name)
                    _close(children)
                    return
                block = self._blocks.add(
                    key,
                    {**carry, **child, C.ROOT: root, C.PATH: [*path, n], C.OUTCOME: "PRESENT"},
                    fixed + row_bytes(child),
                )
                n += 1
                if block is not None:
                    yield block
                if key in self._blocks.failed:
                    _close(children)  # this parent is FAILED: its later children are not needed
                    return
        except (ContractError, PlanError):
            raise
        except Exception as exc:  # noqa: BLE001 - user code may raise anything
            self.result = CallPolicy(stage.name, stage.on_error).failed(exc, "a parent")


def _close(children: Any) -> None:
    """Stop a parent's child generator early (its ``finally`` blocks run now)."""
    close = getattr(children, "close", None)
    if close is not None:
        try:
            close()
        except Exception:  # noqa: BLE001 - the parent is already decided
            pass
