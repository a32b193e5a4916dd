"""The consumer's ledger: which source roots reached the consumer, exactly once.

What reached the consumer is the truth. The driver feeds every output batch (or every write result)
through one :class:`Ledger`; it drops a second copy of anything already delivered, records each root's
terminal row, and at the end of a pass names the roots that did not arrive, so they can be run again
(a *repair pass*) or end as a ``LostError`` row. Pure Python + pyarrow: no side channel, no Ray.

A closed plan (level 0) delivers one row per root. A plan that ends with open levels delivers the
entities of its last level plus one *header* per inner node (see :mod:`columns`); a root is complete when
every node its headers announce has arrived. Headers are bookkeeping: :meth:`Ledger.take` removes them.
A root that leaves no row at that level (its expansion raised, or every node on its way failed) is
represented by exactly one stand-in row with its terminal status, so no input silently disappears.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field

import pyarrow as pa

from lineage_data._core import columns as C
from lineage_data._core.outcomes import Outcome, Status, entering

LOST = "LostError"


@dataclass(frozen=True, slots=True)
class Terminal:
    """The one terminal row of a source root, as the consumer received it."""

    outcome: str
    cause: str | None
    stage: str | None
    committed_s: float


@dataclass(slots=True)
class _Partial:
    """An open-level root on its way: per depth, nodes announced by headers vs nodes received.

    Depth 0 is announced by the source; the headers at depth ``d`` announce the nodes of depth ``d+1``.
    Rows arrive in any order, so the root is complete only when every depth balances.
    """

    announced: list[int]
    received: list[int]
    seen: set[tuple[tuple[int, ...], bool]] = field(default_factory=set)
    status: tuple[str, str | None, str | None] | None = None  # from the root's own header
    rows: int = 0  # entity rows handed to the consumer
    first_bad: tuple[tuple[int, ...], str, str | None, str | None] | None = None  # inner header

    @property
    def complete(self) -> bool:
        return self.status is not None and self.announced == self.received


class Ledger:
    """Delivered roots of one run (all of its passes), with duplicates dropped.

    Example:
        >>> import pyarrow as pa
        >>> ledger = Ledger(0, ["a", "b"], started_at=0.0)
        >>> out = ledger.take(C.conform(pa.table({C.ROOT: ["a", "a"], C.OUTCOME: ["PRESENT"] * 2})))
        >>> out.num_rows, ledger.duplicates, ledger.missing()
        (1, 1, ['b'])
    """

    def __init__(self, level: int, expected: Iterable[str] = (), *, started_at: float) -> None:
        self.level = level
        self._started_at = started_at
        self._expected: set[str] = set(expected)
        self._done: dict[str, Terminal] = {}
        self._partial: dict[str, _Partial] = {}
        self._committed = 0
        self.completed: list[str] = []  # roots in the order they completed (append-only)
        self.duplicates = 0

    # -- what is expected -----------------------------------------------------------------------
    def expect(self, roots: Iterable[str]) -> None:
        """Roots the run must account for (known up front, or discovered by the source)."""
        self._expected.update(roots)

    # -- what arrived ---------------------------------------------------------------------------
    def take(self, table: pa.Table, now: float | None = None) -> pa.Table:
        """Account one output batch; returns the rows to hand to the consumer (no copies, no headers)."""
        now = time.time() if now is None else now
        if not table.num_rows:
            return table
        if self.level == 0:
            keep = self._take_closed(table, now)
            if len(keep) == table.num_rows:
                return table
            return table.take(pa.array(keep, pa.int64()))
        table = C.conform(table)
        keep, stand_ins = self._take_open(table, now)
        out = table.take(pa.array(keep, pa.int64()))
        if stand_ins:
            out = C.concat([out, C.rows_to_table(stand_ins)])
        return out.drop_columns([C.SIZE, C.PARENT])

    def _take_closed(self, table: pa.Table, now: float) -> list[int]:
        keep: list[int] = []
        roots = table[C.ROOT].to_pylist()
        outcomes = table[C.OUTCOME].to_pylist()
        causes = _column(table, C.CAUSE)
        stages = _column(table, C.STAGE)
        for i, root in enumerate(roots):
            if root in self._done:
                self.duplicates += 1
                continue
            self._record(root, (outcomes[i], causes[i], stages[i]), now)
            keep.append(i)
        return keep

    def _take_open(self, table: pa.Table, now: float) -> tuple[list[int], list[dict]]:
        """Rows to keep, and one stand-in row per root completed here with no row of its own."""
        keep: list[int] = []
        stand_ins: list[dict] = []
        roots = table[C.ROOT].to_pylist()
        paths = table[C.PATH].to_pylist()
        sizes = table[C.SIZE].to_pylist()
        outcomes = table[C.OUTCOME].to_pylist()
        causes = table[C.CAUSE].to_pylist()
        stages = table[C.STAGE].to_pylist()
        for i, root in enumerate(roots):
            if root in self._done:
                self.duplicates += 1
                continue
            part = self._partial.get(root)
            if part is None:
                depths = self.level + 1
                part = self._partial[root] = _Partial([1] + [0] * self.level, [0] * depths)
            path = tuple(paths[i] or ())
            header = sizes[i] is not None
            if (path, header) in part.seen:
                self.duplicates += 1
                continue
            part.seen.add((path, header))
            part.received[len(path)] += 1
            if header:
                part.announced[len(path) + 1] += sizes[i]
                if not path:
                    part.status = (outcomes[i], causes[i], stages[i])
                elif outcomes[i] != Outcome.PRESENT.value and (
                    part.first_bad is None or path < part.first_bad[0]
                ):
                    part.first_bad = (path, outcomes[i], causes[i], stages[i])
            else:
                keep.append(i)
                part.rows += 1
            if part.status is not None and part.complete:
                del self._partial[root]
                status = part.status
                if not part.rows:
                    status = _stand_in_status(part)
                    if status[0] != Outcome.PRESENT.value:
                        stand_ins.append(_stand_in(root, status))
                self._record(root, status, now)
        return keep, stand_ins

    def _record(self, root: str, status: tuple[str, str | None, str | None], now: float) -> None:
        self._done[root] = Terminal(status[0], status[1], status[2], now - self._started_at)
        self._committed += status[0] == Outcome.PRESENT.value
        self.completed.append(root)

    # -- the end of a pass ----------------------------------------------------------------------
    def delivered(self, root: str) -> bool:
        """True once ``root`` is complete at the consumer."""
        return root in self._done

    def missing(self) -> list[str]:
        """Expected roots not complete at the consumer, sorted."""
        return sorted(self._expected - self._done.keys())

    def unexpected(self) -> list[str]:
        """Roots delivered that no source announced (a bug upstream, reported loudly)."""
        return sorted(self._done.keys() - self._expected) if self._expected else []

    def lost(self, roots: Iterable[str], attempts: int, now: float | None = None) -> pa.Table:
        """Terminal FAILED rows for roots still missing after ``attempts`` repair passes; recorded."""
        roots = sorted(roots)
        cause = f"{LOST}: not delivered after {attempts} repair pass(es) (worker, actor or node loss)"
        now = time.time() if now is None else now
        for root in roots:
            self._partial.pop(root, None)
            self._record(root, (Outcome.FAILED.value, cause, None), now)
        n = len(roots)
        return C.conform(
            pa.table(
                {
                    C.ROOT: pa.array(roots, pa.string()),
                    C.OUTCOME: pa.array([Outcome.FAILED.value] * n, pa.string()),
                    C.CAUSE: pa.array([cause] * n, pa.string()),
                }
            )
        ).drop_columns([C.PATH, C.SIZE, C.PARENT] if self.level == 0 else [C.SIZE, C.PARENT])

    def terminal(self) -> dict[str, tuple[str, str | None, str | None, float]]:
        """Every delivered root's terminal row: ``root -> (outcome, cause, stage, committed_s)``."""
        return {r: (t.outcome, t.cause, t.stage, t.committed_s) for r, t in self._done.items()}

    def progress(self) -> dict[str, int]:
        """Parents committed / failed so far, the expected total and the roots on their way."""
        return {
            "committed": self._committed,
            "failed": len(self._done) - self._committed,
            "total": len(self._expected),
            "in_flight_parents": len(self._partial),
        }


def _stand_in_status(part: _Partial) -> tuple[str, str | None, str | None]:
    """The status of a root that left no row at the consumer's level.

    Its own status when it is not PRESENT (its expansion raised, a source-level stage failed it);
    else that of its first inner node that is not, as a child's failure reaches its parent
    (FAILED becomes SUPPRESSED); else PRESENT (every group on its way was empty).
    """
    assert part.status is not None
    if part.status[0] != Outcome.PRESENT.value or part.first_bad is None:
        return part.status
    _, outcome, cause, stage = part.first_bad
    entered = entering(Status(Outcome(outcome), cause, stage))
    assert entered is not None
    return (entered.outcome.value, entered.cause, entered.stage)


def _stand_in(root: str, status: tuple[str, str | None, str | None]) -> dict:
    """The one row that represents a root at an open level where it has no row of its own."""
    return {C.ROOT: root, C.PATH: [], C.OUTCOME: status[0], C.CAUSE: status[1], C.STAGE: status[2]}


def _column(table: pa.Table, name: str) -> list:
    if name in table.column_names:
        return table[name].to_pylist()
    return [None] * table.num_rows

