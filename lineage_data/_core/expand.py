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

    def __call__(self, table: pa.Table) -> Iterator[pa.Table]:
        """Process one batch; yields small blocks."""
        table = C.conform(table)
        entity = C.depth_mask(table, self._stage.level, header=False)
        passthrough = C.lineage_only(table.filter(pc.invert(entity)))
        if passthrough.num_rows:
            yield passthrough
        counts: Counter[str] = Counter()
        buffer: list[dict] = []
        headers: list[dict] = []
        for row in table.filter(entity).to_pylist():
            lineage = {name: row.pop(name) for name in C.ALL}
            status = Status(Outcome(lineage[C.OUTCOME]), lineage[C.CAUSE], lineage[C.STAGE])
            header = {C.ROOT: lineage[C.ROOT], C.PATH: lineage[C.PATH], C.SIZE: 0}
            entering = outcomes.entering(status)
            if entering is None:
                children = _Children(self, row, lineage, buffer)
                yield from children
                size, entering = children.result
                header[C.SIZE] = size
                header[C.PARENT] = self._parent_payload(row)
                counts["children"] += size
            header.update(
                {
                    C.OUTCOME: entering.outcome.value,
                    C.CAUSE: entering.cause,
                    C.STAGE: entering.stage,
                }
            )
            counts[entering.outcome.value] += 1
            headers.append(header)
        if buffer or headers:
            yield C.rows_to_table(buffer + headers)
        self._coordinator.count(self._stage.name, dict(counts))

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


class _Children:
    """Iterates one parent's children into ``buffer``, yielding full blocks; ``result`` after the end."""

    def __init__(self, op: ExpandOp, row: dict, lineage: dict, buffer: list[dict]) -> None:
        self._op, self._row, self._lineage, self._buffer = op, row, lineage, buffer
        self.result: tuple[int, Status] = (0, outcomes.PRESENT)

    def __iter__(self) -> Iterator[pa.Table]:
        op, stage = self._op, self._op._stage
        carry = op._carry(self._row)
        root, path = self._lineage[C.ROOT], list(self._lineage[C.PATH])
        n = 0
        try:
            for child in op._fn(dict(self._row), **stage.fn_kwargs):
                child = op._check(child, n)
                self._buffer.append(
                    {**carry, **child, C.ROOT: root, C.PATH: [*path, n], C.OUTCOME: "PRESENT"}
                )
                n += 1
                if len(self._buffer) >= op._rows_per_block:
                    yield C.rows_to_table(self._buffer)
                    self._buffer.clear()
        except (ContractError, PlanError):
            raise
        except Exception as exc:  # noqa: BLE001 - user code may raise anything
            if stage.on_error == "raise":
                raise UserCodeError(
                    f"expand_lineage {stage.name!r} raised: {describe(exc)}"
                ) from exc
            self.result = (n, outcomes.from_exception(exc, stage.name))
            return
        self.result = (n, outcomes.PRESENT)
