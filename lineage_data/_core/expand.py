"""``expand_lineage``: one parent row -> its ordered children, then a group header."""

from __future__ import annotations

import pickle
from collections import Counter
from collections.abc import Iterator, Mapping
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from lineage_data._core import columns as C
from lineage_data._core import outcomes
from lineage_data._core.errors import ContractError, PlanError, UserCodeError, describe
from lineage_data._core.outcomes import Outcome, Status
from lineage_data._core.plan import Stage, resolve_callable

DEFAULT_ROWS_PER_BLOCK = 16


class ExpandOp:
    """Expands every PRESENT entity of the stage's level into children.

    Children are emitted in blocks of ``rows_per_block`` rows as the function yields them, so one huge
    parent spreads over many downstream workers. After a parent's last child comes its *header*: the
    parent's columns (binary columns are released unless carried) and the number of children. A parent
    whose function raises gets a FAILED header (children already emitted are discarded at reduce); a
    parent with no children gets a header of size 0 — it is never lost.
    """

    def __init__(
        self,
        stage: Stage,
        index: int,
        coordinator: Any,
        *,
        rows_per_block: int = DEFAULT_ROWS_PER_BLOCK,
    ) -> None:
        self._stage = stage
        self._index = index
        self._coordinator = coordinator
        self._rows_per_block = rows_per_block
        self._fn = resolve_callable(stage.fn, stage.fn_constructor_kwargs)
        self._types = C.EstablishedTypes(coordinator, stage.name)

    def __call__(self, table: pa.Table) -> Iterator[pa.Table]:
        """Process one batch; yields small blocks."""
        table = C.conform(table)
        entity = C.depth_mask(table, self._stage.level, header=False)
        passthrough = C.lineage_only(table.filter(pc.invert(entity)))
        if passthrough.num_rows:
            yield passthrough
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
            blocks.close(header, entering)
        last = blocks.finish()
        if last is not None:
            yield last
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
        return C.check_user_row(child, f"expand_lineage {self._stage.name!r}: child {ordinal}")


ParentKey = tuple[str, tuple[int, ...]]


class _Blocks:
    """The children of one batch on their way out in blocks, and the headers that follow them.

    Every block is built with :meth:`~lineage_data._core.columns.EstablishedTypes.build_rows`, grouped
    by parent: a parent whose children do not fit (conflicting column types among its children, with
    another parent's, or with the stage's established types; a value Arrow cannot hold) is FAILED
    alone and its rows in that block are left out, the other parents' rows go on. Its header counts
    only the children emitted before, which the reduce then discards with it.
    """

    def __init__(self, op: ExpandOp) -> None:
        self._op = op
        self._rows: list[dict] = []
        self._keys: list[ParentKey] = []
        self._emitted: Counter[ParentKey] = Counter()
        self._headers: list[tuple[dict, Status]] = []
        self.failed: dict[ParentKey, Status] = {}
        self.counts: dict[str, int] = {}

    def add(self, key: ParentKey, child: dict) -> pa.Table | None:
        """Buffer one child; returns a block when the buffer is full."""
        self._rows.append(child)
        self._keys.append(key)
        return self.flush() if len(self._rows) >= self._op._rows_per_block else None

    def flush(self) -> pa.Table | None:
        """The buffered children as a block (None when none is left), failing parents that do not fit."""
        if not self._rows:
            return None
        table, failed = self._op._types.build_rows(self._rows, groups=self._keys)
        for i, cause in failed.items():
            self.failed.setdefault(self._keys[i], outcomes.rejected(cause, self._op._stage.name))
        if failed:
            table = table.filter(pa.array([i not in failed for i in range(table.num_rows)]))
        self._emitted.update(k for i, k in enumerate(self._keys) if i not in failed)
        self._rows, self._keys = [], []
        return table if table.num_rows else None

    def close(self, header: dict, status: Status) -> None:
        """A parent is done: its header goes out with the last block."""
        self._headers.append((header, status))

    def finish(self) -> pa.Table | None:
        """The last block: the buffered children, then every header of the batch."""
        tables = [t for t in [self.flush()] if t is not None]
        counts: Counter[str] = Counter()
        headers = []
        for header, status in self._headers:
            key = (header[C.ROOT], tuple(header[C.PATH]))
            if status.present:
                status = self.failed.get(key, status)
            header[C.SIZE] = self._emitted[key]
            header.update(
                {C.OUTCOME: status.outcome.value, C.CAUSE: status.cause, C.STAGE: status.stage}
            )
            counts[status.outcome.value] += 1
            headers.append(header)
        counts["children"] = sum(self._emitted.values())
        self.counts = dict(counts)
        if headers:
            tables.append(C.rows_to_table(headers))
        return C.concat(tables) if tables else None


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
        root, path = self._lineage[C.ROOT], list(self._lineage[C.PATH])
        key = (root, tuple(path))
        n = 0
        children: Any = None
        try:
            children = op._fn(dict(self._row), **stage.fn_kwargs)
            for child in children:
                try:
                    child = op._check(child, n)
                except ContractError as exc:
                    self.result = outcomes.rejected(describe(exc), stage.name)
                    _close(children)
                    return
                block = self._blocks.add(
                    key, {**carry, **child, C.ROOT: root, C.PATH: [*path, n], C.OUTCOME: "PRESENT"}
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
            if stage.on_error == "raise":
                raise UserCodeError(
                    f"expand_lineage {stage.name!r} raised: {describe(exc)}"
                ) from exc
            self.result = outcomes.from_exception(exc, stage.name)


def _close(children: Any) -> None:
    """Stop a parent's child generator early (its ``finally`` blocks run now)."""
    close = getattr(children, "close", None)
    if close is not None:
        try:
            close()
        except Exception:  # noqa: BLE001 - the parent is already decided
            pass
