"""The consumer's ledger: which source roots reached the consumer, exactly once.

What reached the consumer is the truth. The driver feeds every output batch (or write result) through
one :class:`Ledger`, which drops copies, records each root's terminal row in a few bytes, and names the
roots that did not arrive, to run again (a *repair pass*) or end as a ``LostError`` row. No Ray.

A closed plan (level 0) delivers one row per root. An open plan delivers the entities of its last
level plus one *header* per inner node (:mod:`columns`): a root is complete when every node its headers
announce has arrived. A root that leaves no row at that level is represented by one stand-in row with
its terminal status, so no input silently disappears.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lineage_data._core import columns as C
from lineage_data._core.errors import DuplicateRootError
from lineage_data._core.outcomes import Outcome, Status, entering
from lineage_data._core.roots import Column, RootIndex
from lineage_data._core.terminal_rows import OUTCOMES, TerminalRows, _outcome_names

LOST = "LostError"

_DONE = 0x07  # the outcome code bits of a root's flags
_EXPECTED = 0x08  # a source announced the root


@dataclass(slots=True)
class _Partial:
    """An open-level root on its way: per depth, nodes announced by headers vs nodes received.

    The headers at depth ``d`` announce the nodes of depth ``d+1`` (depth 0: the source). Rows arrive in
    any order, so the root is complete only when every depth balances.
    """

    announced: list[int]
    received: list[int]
    seen: set[tuple[tuple[int, ...], bool]] = field(default_factory=set)
    status: tuple[str, str | None, str | None] | None = None  # from the root's own header
    rows: int = 0  # entity rows handed to the consumer
    first_bad: tuple[tuple[int, ...], str, str | None, str | None] | None = None  # inner header


class Ledger:
    """Delivered roots of one run (all of its passes), with duplicates dropped.

    A finished root costs its id's bytes + ~30 bytes (:mod:`roots`; here its flags, commit time and
    place in completion order); only one with a cause or stage keeps them in a dict, and open-level
    roots on their way keep a :class:`_Partial`.
    """

    def __init__(self, level: int, expected: Iterable[str] = (), *, started_at: float) -> None:
        self.level = level
        self._started_at = started_at
        self._index = RootIndex()  # every root expected or delivered: its slot
        self._flags = Column(np.uint8)  # per slot: outcome code | _EXPECTED
        self._seconds = Column(np.float64)  # per slot: committed, seconds after started_at
        self._order = Column(np.int32)  # slots in the order their roots completed
        self._blocks = Column(np.int64)  # per slot: its source block's tag (tagged rows only)
        self._done = 0
        self._expected = 0
        self._tally = np.zeros(len(OUTCOMES) + 1, dtype=np.int64)  # roots done, per outcome code
        self._detail: dict[int, tuple[str | None, str | None]] = {}  # slot -> (cause, stage)
        self._partial: dict[str, _Partial] = {}
        self.duplicates = 0
        self.expect(expected)

    # -- what is expected -----------------------------------------------------------------------
    def reserve(self, roots: int, *, tagged: bool = False) -> None:
        """Size the per-root state for ``roots`` roots in all, once (a hint: the source's row count).

        Growing re-placed every root in the hash table at each doubling (~a quarter of the ledger's CPU
        over 1M roots, measured). ``tagged``: rows will carry their source block's tag (a flat plan).
        """
        self._index.reserve(roots)
        columns = (self._flags, self._seconds, self._order, *([self._blocks] if tagged else ()))
        for column in columns:
            column.ensure(roots)

    def expect(self, roots: Iterable[str]) -> None:
        """Roots the run must account for (known up front, or discovered by the source)."""
        roots = roots if isinstance(roots, pa.Array | pa.ChunkedArray) else list(roots)
        if not len(roots):
            return
        slots = self._slots(roots)  # (grows the columns)
        flags = self._flags.data
        flags[slots] |= _EXPECTED
        self._expected = int(np.count_nonzero(flags[: len(self._index)] & _EXPECTED))

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
        kept, _, stand_ins = self._take_open(table, now)
        out = table.take(pa.array(kept, pa.int64()))
        if stand_ins:
            out = C.concat([out, C.rows_to_table(stand_ins)])
        return out.drop_columns([C.SIZE, C.PARENT])

    def take_kept(self, table: pa.Table, now: float | None = None) -> tuple[pa.Table, pa.Table]:
        """:meth:`take` of an open level's batch, for a run that is kept.

        Returns the first copies of its rows, headers included (what a plan can go on from), and the
        stand-in rows of the roots it completed without a row of their own.
        """
        assert self.level, "a closed plan's rows are kept as they are delivered"
        now = time.time() if now is None else now
        table = C.conform(table)
        kept, headers, stand_ins = self._take_open(table, now)
        rows = table.take(pa.array(sorted(kept + headers), pa.int64()))
        return rows, C.rows_to_table(stand_ins)

    def _take_closed(self, table: pa.Table, now: float) -> np.ndarray:
        """The rows of roots not delivered before (the first copy of each), recorded, vectorized."""
        slots = self._slots(table[C.ROOT])  # (take passes no empty batch)
        n = len(slots)
        increasing = bool((slots[1:] > slots[:-1]).all())  # distinct roots, in slot order
        run = None
        if increasing and int(slots[-1]) - int(slots[0]) == n - 1:
            run = slice(int(slots[0]), int(slots[0]) + n)  # the usual batch: new roots, in order
            done = (self._flags.data[run] & _DONE) != 0
            keep = np.flatnonzero(~done) if done.any() else np.arange(n)
        else:
            if increasing:
                first = np.arange(n)
            else:
                _, first = np.unique(slots, return_index=True)
                first.sort()
            keep = first[(self._flags.data[slots[first]] & _DONE) == 0]
        every = len(keep) == n
        # where the kept rows' slots are: a slice when they are the whole run (no gather, no scatter)
        at: slice | np.ndarray = run if every and run is not None else slots[keep]
        if C.BLOCK in table.column_names:
            self._check_blocks(table, slots, keep, at)
        self.duplicates += table.num_rows - len(keep)
        if len(keep):
            codes = _codes(table[C.OUTCOME])
            codes = codes if every else codes[keep]
            causes, stages = table[C.CAUSE], table[C.STAGE]  # (the terminal step conforms)
            detail: dict[int, tuple[str | None, str | None]] = {}
            if causes.null_count < n or stages.null_count < n:  # not the usual PRESENT batch
                picked = pa.array(keep, pa.int64())
                cause, stage = causes.take(picked), stages.take(picked)
                told = pc.or_(pc.is_valid(cause), pc.is_valid(stage))
                for i in np.flatnonzero(told.to_numpy()).tolist():
                    detail[int(slots[keep[i]])] = (cause[i].as_py(), stage[i].as_py())
            self._record(slots if every else slots[keep], codes, detail, now, at=at)
        return keep

    def _check_blocks(
        self, table: pa.Table, slots: np.ndarray, keep: np.ndarray, at: slice | np.ndarray
    ) -> None:
        """A root seen again from another source block is a duplicate id; ``at``: the kept rows' slots.

        The same block again is a copy (Ray ran its source task again): dropped, as any copy is.
        """
        column = C.one_chunk(table[C.BLOCK])
        column = pc.fill_null(column, 0) if column.null_count else column
        tags = np.asarray(column.to_numpy(zero_copy_only=False), dtype=np.int64)
        blocks = self._blocks
        blocks.ensure(len(self._index))
        every = len(keep) == len(slots)
        blocks.data[at] = tags if every else tags[keep]
        if every:  # each row named its own root's block just now: nothing to compare
            return
        known = blocks.data[slots]
        clash = np.flatnonzero((known != tags) & (known != 0) & (tags != 0))  # 0: no tag
        if len(clash):
            root = table[C.ROOT][int(clash[0])].as_py()
            raise DuplicateRootError(
                f"duplicate lineage root id {root!r}: source ids must be unique (it is in two "
                "blocks of the source dataset)"
            )

    def _take_open(self, table: pa.Table, now: float) -> tuple[list[int], list[int], list[dict]]:
        """Entity rows to keep, headers seen first here, and a stand-in per root done without a row."""
        keep: list[int] = []
        headers: list[int] = []
        stand_ins: list[dict] = []
        slots = self._index.find(table[C.ROOT])
        known = slots >= 0
        done = np.zeros(len(slots), dtype=bool)
        done[known] = (self._flags.data[slots[known]] & _DONE) != 0
        finished: dict[str, tuple[str, str | None, str | None]] = {}
        roots, paths, sizes, outcomes, causes, stages = (
            table[name].to_pylist()
            for name in (C.ROOT, C.PATH, C.SIZE, C.OUTCOME, C.CAUSE, C.STAGE)
        )
        for i, (root, was_done) in enumerate(zip(roots, done.tolist(), strict=True)):
            if was_done or root in finished:
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
                headers.append(i)
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
            if part.status is not None and part.announced == part.received:  # complete
                del self._partial[root]
                status = part.status
                if not part.rows:
                    status = _stand_in_status(part)
                    if status[0] != Outcome.PRESENT.value:
                        stand_ins.append(_stand_in(root, status))
                finished[root] = status
        if finished:
            self._record_statuses(list(finished), list(finished.values()), now)
        return keep, headers, stand_ins

    def _slots(self, roots: pa.Array | pa.ChunkedArray | list[str]) -> np.ndarray:
        """The slots of ``roots``, new roots added (not expected, not done)."""
        slots = self._index.add(roots)
        size = len(self._index)
        self._flags.ensure(size)
        self._seconds.ensure(size)
        return slots

    def _record_statuses(
        self, roots: list[str], statuses: list[tuple[str, str | None, str | None]], now: float
    ) -> None:
        slots = self._slots(roots)
        codes = np.array([OUTCOMES.index(s[0]) + 1 for s in statuses], dtype=np.uint8)
        detail = {
            int(slot): (s[1], s[2])
            for slot, s in zip(slots.tolist(), statuses, strict=True)
            if s[1] is not None or s[2] is not None
        }
        self._record(slots, codes, detail, now)

    def _record(
        self,
        slots: np.ndarray,
        codes: np.ndarray,
        detail: dict[int, tuple[str | None, str | None]],
        now: float,
        *,
        at: slice | np.ndarray | None = None,
    ) -> None:
        """Roots (distinct, not done before) complete; ``at``: the same slots as a slice, if a run."""
        at = slots if at is None else at
        self._flags.data[at] |= codes
        self._seconds.data[at] = now - self._started_at
        self._order.ensure(self._done + len(slots))
        self._order.data[self._done : self._done + len(slots)] = slots
        self._done += len(slots)
        self._tally += np.bincount(codes, minlength=len(self._tally))
        self._detail.update(detail)

    # -- the end of a pass ----------------------------------------------------------------------
    def delivered(self, root: str) -> bool:
        """True once ``root`` is complete at the consumer."""
        slot = int(self._index.find([root])[0])
        return slot >= 0 and bool(self._flags.data[slot] & _DONE)

    def expect_arrived(self) -> None:
        """Expect every root that arrived so far (a source that does not name its roots)."""
        if self._partial:
            self.expect(list(self._partial))
        size = len(self._index)
        self._flags.data[:size] |= _EXPECTED
        self._expected = size

    def missing(self) -> list[str]:
        """Expected roots not complete at the consumer, sorted."""
        flags = self._flags.data[: len(self._index)]
        return self._ids(np.flatnonzero((flags & _EXPECTED != 0) & (flags & _DONE == 0)))

    def unexpected(self) -> list[str]:
        """Roots delivered that no source announced (a bug upstream, reported loudly)."""
        if not self._expected:
            return []
        flags = self._flags.data[: len(self._index)]
        return self._ids(np.flatnonzero((flags & _EXPECTED == 0) & (flags & _DONE != 0)))

    def _ids(self, slots: np.ndarray) -> list[str]:
        return sorted(self._index.ids(slots).to_pylist())

    def lost(self, roots: Iterable[str], attempts: int, now: float | None = None) -> pa.Table:
        """Terminal FAILED rows for roots still missing after ``attempts`` repair passes; recorded."""
        roots = sorted(roots)
        cause = (
            f"{LOST}: not delivered after {attempts} repair pass(es) (worker, actor or node loss)"
        )
        now = time.time() if now is None else now
        for root in roots:
            self._partial.pop(root, None)
        fresh = [r for r in roots if not self.delivered(r)]
        if fresh:
            self._record_statuses(fresh, [(Outcome.FAILED.value, cause, None)] * len(fresh), now)
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

    def terminal(self) -> TerminalRows:
        """Every delivered root's ``root -> (outcome, cause, stage, committed_s)``, read when asked."""
        order = self._order.data[: self._done].copy()
        index, flags, seconds = self._index, self._flags, self._seconds
        return TerminalRows(
            lambda: index.ids(order),  # the ids, taken only when a report asks for them
            lambda: flags.data[order] & _DONE,
            lambda: seconds.data[order],
            order,
            self._detail,
            tally=self._tally.copy(),
        )

    def completed_since(self, cursor: int) -> tuple[list[str], int]:
        """Roots completed after the first ``cursor`` ones (in completion order), and the new cursor."""
        slots = self._order.data[cursor : self._done]
        return self._index.ids(slots).to_pylist(), self._done

    def progress(self) -> dict[str, int]:
        """Parents committed / failed so far, the expected total and the roots on their way."""
        return {
            "committed": int(self._tally[1]),
            "failed": self._done - int(self._tally[1]),
            "total": self._expected,
            "in_flight_parents": len(self._partial),
        }

    @property
    def nbytes(self) -> int:
        """Bytes held for the roots (numpy and Arrow buffers; dict entries estimated)."""
        columns = sum(
            c.data.nbytes for c in (self._flags, self._seconds, self._order, self._blocks)
        )
        dicts = 200 * len(self._detail) + 400 * len(self._partial)
        return self._index.nbytes + columns + dicts


def view(rows: pa.Table) -> pa.Table:
    """Rows kept by :meth:`Ledger.take_kept` as a consumer sees them: entities, no bookkeeping."""
    rows = C.conform(rows)
    return rows.filter(pc.is_null(rows[C.SIZE])).drop_columns([C.SIZE, C.PARENT])


def as_root_headers(rows: pa.Table) -> pa.Table:
    """Terminal rows of roots that left nothing to go on from (lost ones) as childless root headers."""
    rows = C.as_roots(rows)
    sizes = pa.array([0] * rows.num_rows, C.TYPES[C.SIZE])
    return rows.set_column(rows.column_names.index(C.SIZE), C.SIZE, sizes)


def _stand_in_status(part: _Partial) -> tuple[str, str | None, str | None]:
    """The status of a root that left no row at the consumer's level.

    Its own when not PRESENT; else its first inner node's that is not, as a child's failure reaches
    its parent; else PRESENT (every group on its way was empty).
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


def _codes(outcomes: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """Outcome codes (1 = PRESENT ...) of an outcome column."""
    if C.all_present(outcomes):  # the usual batch: a third of index_in's time
        return np.ones(len(outcomes), dtype=np.uint8)
    index = pc.index_in(outcomes, value_set=_outcome_names().slice(1))
    if index.null_count:
        raise ValueError(f"unknown outcome in {pc.unique(outcomes).to_pylist()}")
    return (np.asarray(index.to_numpy(zero_copy_only=False)) + 1).astype(np.uint8)
