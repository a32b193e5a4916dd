"""The per-run lineage state: the one writer of barriers, generations and accounting.

It is pure Python. The coordinator actor is a thin shell over one :class:`LineageState`; the in-process
executor uses it directly. Every method takes a whole batch: callers make one call per batch.

Memory: fencing state is kept per *in-flight parent* and released when the parent is reduced (or, for
source rows, when the row reaches the end of the plan). The root registry and the per-root terminal
record grow with the corpus (one small tuple per source row); they are what the run report is made of.
"""

from __future__ import annotations

import enum
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from lineage_data._core.errors import DuplicateRootError, FencingError

Path = tuple[int, ...]
ParentId = tuple[str, Path | None]  # (root, parent path); None is the parent of a source row


class Verdict(enum.Enum):
    """How a committed report was taken."""

    ACCEPTED = "accepted"
    REPLAY = "replay"  # identical to a fact already committed: harmless
    STALE = "stale"  # its generation is not current: rejected, nothing changed


@dataclass(slots=True)
class Barrier:
    """A GroupFailure of one child: stops its siblings at ``stage_index`` and later stages."""

    stage_index: int
    cause: str
    generation: int


@dataclass(slots=True)
class _Parent:
    generations: dict[tuple[int, int], int] = field(default_factory=dict)
    committed: dict[tuple[int, int], tuple[str, str | None]] = field(default_factory=dict)
    barrier: Barrier | None = None


@dataclass(frozen=True, slots=True)
class Handoff:
    """Answer to :meth:`LineageState.handoff`: the dispatch generation and the barred positions."""

    generation: int
    barred: dict[int, str]


@dataclass(frozen=True, slots=True)
class CommitResult:
    """Answer to :meth:`LineageState.commit`: a verdict per unit, and units suppressed by a barrier."""

    verdicts: list[Verdict]
    suppressed: dict[int, str]


@dataclass(frozen=True, slots=True)
class Terminal:
    """The one terminal row of a source root."""

    outcome: str
    cause: str | None
    stage: str | None
    committed_s: float


@dataclass(frozen=True, slots=True)
class Accounting:
    """End-of-run check: roots with no terminal row, and roots with more than one."""

    expected: int
    terminal: int
    missing: tuple[str, ...]
    duplicated: tuple[str, ...]
    unknown: tuple[str, ...]

    @property
    def ok(self) -> bool:
        """True when every expected root has exactly one terminal row and no other root appeared."""
        return not (self.missing or self.duplicated or self.unknown)


def _split(root: str, path: Path) -> tuple[ParentId, int]:
    if path:
        return (root, path[:-1]), path[-1]
    return (root, None), 0


class LineageState:
    """Barriers, generations and accounting of one execution.

    Example:
        >>> state = LineageState()
        >>> state.register_roots(["a"])
        >>> h = state.handoff(0, ["a", "a"], [(0,), (1,)])
        >>> r = state.commit(0, h.generation, ["a"], [(0,)], ["FAILED"], ["bad"], group=[True])
        >>> state.handoff(0, ["a"], [(1,)]).barred
        {0: 'bad'}
    """

    def __init__(
        self, started_at: float = 0.0, *, stages: Sequence[str] = (), derived: Sequence[str] = ()
    ) -> None:
        self._started_at = started_at
        self._order = {name: i for i, name in enumerate(stages)}
        self._derived = tuple(derived)
        self._generation = 0
        self._parents: dict[ParentId, _Parent] = {}
        self._roots: set[str] = set()
        self._excluded: set[str] = set()
        self._terminal: dict[str, Terminal] = {}
        self._duplicated: set[str] = set()
        self._unknown: set[str] = set()
        self._counts: dict[str, Counter[str]] = defaultdict(Counter)
        self._reports = 0

    # -- source ---------------------------------------------------------------------------------
    def register_roots(self, roots: Iterable[str]) -> None:
        """Record source roots; a root seen twice is a :class:`DuplicateRootError`."""
        self._reports += 1
        for root in roots:
            if root in self._roots:
                raise DuplicateRootError(
                    f"duplicate lineage root id {root!r}: source ids must be unique"
                )
            self._roots.add(root)

    def exclude_roots(self, roots: Iterable[str]) -> None:
        """Roots the run skips on purpose (already committed by an earlier run)."""
        self._excluded.update(roots)

    # -- per-row stages -------------------------------------------------------------------------
    def handoff(self, stage_index: int, roots: Sequence[str], paths: Sequence[Path]) -> Handoff:
        """A batch is about to be handed to a stage's function: new generation, barred siblings."""
        self._reports += 1
        self._generation += 1
        generation = self._generation
        barred: dict[int, str] = {}
        for i, (root, path) in enumerate(zip(roots, paths, strict=True)):
            pid, ordinal = _split(root, tuple(path))
            parent = self._parents.get(pid)
            if parent is None:
                parent = self._parents[pid] = _Parent()
            barrier = parent.barrier
            if barrier is not None and barrier.stage_index <= stage_index:
                barred[i] = barrier.cause
                continue
            parent.generations[(stage_index, ordinal)] = generation
        return Handoff(generation, barred)

    def commit(
        self,
        stage_index: int,
        generation: int,
        roots: Sequence[str],
        paths: Sequence[Path],
        outcomes: Sequence[str],
        causes: Sequence[str | None],
        *,
        group: Sequence[bool],
        stage: str = "",
        counts: dict[str, int] | None = None,
    ) -> CommitResult:
        """Results of one dispatch. Installs barriers for GroupFailures, then fences every unit.

        A unit whose generation is not current is STALE (its result must be discarded). A unit already
        committed with the same outcome and cause is a REPLAY; with another, a :class:`FencingError`.
        A sibling of a barred parent that ran concurrently with the failure comes back SUPPRESSED.
        ``counts`` are outcome counts of the batch's other rows (barred, passed through), added to the
        stage's counts together with the outcomes of the units committed here.
        """
        self._reports += 1
        units = [_split(root, tuple(path)) for root, path in zip(roots, paths, strict=True)]
        verdicts = [self._fence(stage_index, generation, pid, ordinal) for pid, ordinal in units]
        for i, (pid, _) in enumerate(units):
            if group[i] and verdicts[i] is not Verdict.STALE and pid[1] is not None:
                parent = self._parents[pid]
                if parent.barrier is None:
                    self._generation += 1
                    parent.barrier = Barrier(
                        stage_index, causes[i] or "GroupFailure", self._generation
                    )
        suppressed: dict[int, str] = {}
        tally: Counter[str] = Counter(counts or {})
        for i, (pid, ordinal) in enumerate(units):
            if verdicts[i] is Verdict.STALE:
                continue
            parent = self._parents[pid]
            barrier = parent.barrier
            outcome = outcomes[i]
            if (
                barrier is not None
                and barrier.stage_index <= stage_index
                and not group[i]
                and outcome != "FAILED"
            ):
                suppressed[i] = barrier.cause
                outcome = "SUPPRESSED"
            cause = barrier.cause if i in suppressed and barrier is not None else causes[i]
            self._settle(parent, (stage_index, ordinal), (outcome, cause))
            tally[outcome] += 1
        if stage:
            self._counts[stage].update(tally)
        return CommitResult(verdicts, suppressed)

    def _fence(self, stage_index: int, generation: int, pid: ParentId, ordinal: int) -> Verdict:
        parent = self._parents.get(pid)
        if parent is None or parent.generations.get((stage_index, ordinal)) != generation:
            return Verdict.STALE
        return Verdict.REPLAY if (stage_index, ordinal) in parent.committed else Verdict.ACCEPTED

    @staticmethod
    def _settle(parent: _Parent, unit: tuple[int, int], fact: tuple[str, str | None]) -> None:
        previous = parent.committed.get(unit)
        if previous is not None and previous != fact:
            raise FencingError(
                f"conflicting replay for stage #{unit[0]}, ordinal {unit[1]}: {previous} then {fact}"
            )
        parent.committed[unit] = fact

    def release(self, roots: Sequence[str], parent_paths: Sequence[Path]) -> None:
        """Parents that were reduced: their fencing state is no longer needed."""
        self._reports += 1
        for root, path in zip(roots, parent_paths, strict=True):
            self._parents.pop((root, tuple(path)), None)

    def reduced(
        self, stage: str, roots: Sequence[str], parent_paths: Sequence[Path], counts: dict[str, int]
    ) -> None:
        """A reduce batch: release the reduced parents and count their outcomes, in one call."""
        self.release(roots, parent_paths)
        self._counts[stage].update(counts)

    # -- counts and accounting ------------------------------------------------------------------
    def count(self, stage: str, counts: dict[str, int]) -> None:
        """Add per-outcome counts for a stage (one call per batch)."""
        self._reports += 1
        self._counts[stage].update(counts)

    def record_terminal(
        self,
        roots: Sequence[str],
        outcomes: Sequence[str],
        causes: Sequence[str | None],
        stages: Sequence[str | None],
        now: float,
    ) -> None:
        """Source rows that reached the end of the plan at time ``now`` (one call per output batch)."""
        committed_s = now - self._started_at
        self._reports += 1
        for root, outcome, cause, stage in zip(roots, outcomes, causes, stages, strict=True):
            self._parents.pop((root, None), None)
            if root in self._terminal:
                self._duplicated.add(root)
                continue
            if self._roots and root not in self._roots:
                self._unknown.add(root)
            self._terminal[root] = Terminal(outcome, cause, stage, committed_s)

    def progress(self) -> dict[str, int]:
        """Parents committed, failed (any other terminal outcome) and expected so far."""
        committed = sum(1 for t in self._terminal.values() if t.outcome == "PRESENT")
        return {
            "committed": committed,
            "failed": len(self._terminal) - committed,
            "total": len(self._roots - self._excluded),
            "in_flight_parents": len(self._parents),
            "reports": self._reports,
        }

    def accounting(self) -> Accounting:
        """Compare terminal rows with registered roots."""
        expected = self._roots - self._excluded
        missing = sorted(expected - self._terminal.keys())
        return Accounting(
            expected=len(expected),
            terminal=len(self._terminal),
            missing=tuple(missing),
            duplicated=tuple(sorted(self._duplicated)),
            unknown=tuple(sorted(self._unknown)),
        )

    def _derived_counts(self) -> dict[str, dict[str, int]]:
        """Counts of source-level 1:1 stages, from the terminal rows (those stages report nothing).

        A root that ended PRESENT, or failed at a later stage, passed a stage PRESENT; at the stage
        that decided it, it was FAILED or DROPPED; after it, SUPPRESSED or DROPPED.
        """
        counts: dict[str, Counter[str]] = {name: Counter() for name in self._derived}
        for t in self._terminal.values():
            decided = self._order.get(t.stage, -1) if t.stage is not None else None
            for name in self._derived:
                here = self._order[name]
                if decided is None or here < decided or t.outcome == "PRESENT":
                    counts[name]["PRESENT"] += 1
                elif here == decided:
                    counts[name]["DROPPED" if t.outcome == "DROPPED" else "FAILED"] += 1
                else:
                    counts[name]["DROPPED" if t.outcome == "DROPPED" else "SUPPRESSED"] += 1
        return {name: dict(c) for name, c in counts.items()}

    def snapshot(self) -> dict:
        """Everything the run report needs, as plain data."""
        return {
            "counts": {stage: dict(c) for stage, c in self._counts.items()}
            | self._derived_counts(),
            "terminal": {
                root: (t.outcome, t.cause, t.stage, t.committed_s)
                for root, t in self._terminal.items()
            },
            "progress": self.progress(),
        }
