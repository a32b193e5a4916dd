"""Fencing: dispatch generations, barriers and committed facts, kept per *in-flight parent*.

A parent's state goes when it is reduced (memory grows with the parents in flight, not the corpus).
The state may be lost with its actor and rebuilt empty: each incarnation has its own *epoch*, part of
every generation it hands out, and a commit for a unit it never dispatched is accepted when it comes
from an earlier epoch (nothing here can contradict it), and stale otherwise.
"""

from __future__ import annotations

import enum
import random
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

from lineage_data._core.errors import FencingError

Path = tuple[int, ...]
ParentId = tuple[str, Path | None]  # (root, parent path); None is the parent of a source row
EPOCH_BITS = 32


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


@dataclass(slots=True)
class _Parent:
    generations: dict[tuple[int, int], int] = field(default_factory=dict)
    # unit -> (outcome, cause, generation that committed it)
    committed: dict[tuple[int, int], tuple[str, str | None, int]] = field(default_factory=dict)
    barrier: Barrier | None = None


@dataclass(frozen=True, slots=True)
class Handoff:
    """Answer to :meth:`Fences.handoff`: the dispatch generation and the barred positions."""

    generation: int
    barred: dict[int, str]


@dataclass(frozen=True, slots=True)
class CommitResult:
    """Answer to :meth:`Fences.commit`: a verdict per unit, and units suppressed by a barrier."""

    verdicts: list[Verdict]
    suppressed: dict[int, str]


def _split(root: str, path: Path) -> tuple[ParentId, int]:
    if path:
        return (root, path[:-1]), path[-1]
    return (root, None), 0


class Fences:
    """Generations, barriers and committed facts of one execution (one incarnation: one epoch)."""

    def __init__(self) -> None:
        """A new incarnation: a random epoch of its own."""
        self.epoch = random.getrandbits(30) + 1
        self._generation = self.epoch << EPOCH_BITS
        self._parents: defaultdict[ParentId, _Parent] = defaultdict(_Parent)

    def handoff(self, stage_index: int, roots: Sequence[str], paths: Sequence[Path]) -> Handoff:
        """A batch is about to be handed to a stage's function: new generation, barred siblings."""
        self._generation += 1
        generation = self._generation
        barred: dict[int, str] = {}
        for i, (root, path) in enumerate(zip(roots, paths, strict=True)):
            pid, ordinal = _split(root, tuple(path))
            parent = self._parents[pid]
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
        batches: Sequence[int] | None = None,
    ) -> CommitResult:
        """Results of one dispatch: barriers for its GroupFailures, then every unit fenced.

        A unit whose generation is not current is STALE; one committed before with the same fact a
        REPLAY (another fact: :class:`FencingError`); a sibling of a barred parent SUPPRESSED, unless
        it ran in an earlier function call of the dispatch (``batches``) than the failure's.
        """
        units = [_split(root, tuple(path)) for root, path in zip(roots, paths, strict=True)]
        verdicts = [self._fence(stage_index, generation, pid, ordinal) for pid, ordinal in units]
        failed_in = self._install_barriers(stage_index, units, verdicts, causes, group, batches)
        suppressed: dict[int, str] = {}
        for i, (pid, ordinal) in enumerate(units):
            if verdicts[i] is Verdict.STALE:
                continue
            parent = self._parents[pid]
            barrier = parent.barrier
            outcome, cause = outcomes[i], causes[i]
            earlier = batches is not None and pid in failed_in and batches[i] < failed_in[pid]
            if (
                barrier is not None
                and barrier.stage_index <= stage_index
                and not group[i]
                and outcome != "FAILED"
                and not earlier
            ):
                suppressed[i] = cause = barrier.cause
                outcome = "SUPPRESSED"
            self._settle(parent, (stage_index, ordinal), (outcome, cause, generation))
        return CommitResult(verdicts, suppressed)

    def _install_barriers(
        self,
        stage_index: int,
        units: list[tuple[ParentId, int]],
        verdicts: list[Verdict],
        causes: Sequence[str | None],
        group: Sequence[bool],
        batches: Sequence[int] | None,
    ) -> dict[ParentId, int]:
        """Barriers for the GroupFailures of a commit; returns the call of each failure."""
        failed_in: dict[ParentId, int] = {}
        for i, (pid, _) in enumerate(units):
            if group[i] and verdicts[i] is not Verdict.STALE and pid[1] is not None:
                parent = self._parents[pid]
                if parent.barrier is None:
                    parent.barrier = Barrier(stage_index, causes[i] or "GroupFailure")
                    failed_in[pid] = batches[i] if batches is not None else 0
                elif pid in failed_in and batches is not None:
                    failed_in[pid] = min(failed_in[pid], batches[i])
        return failed_in

    def _fence(self, stage_index: int, generation: int, pid: ParentId, ordinal: int) -> Verdict:
        parent = self._parents.get(pid)
        current = parent.generations.get((stage_index, ordinal)) if parent is not None else None
        if current is None:
            if generation >> EPOCH_BITS == self.epoch:
                return Verdict.STALE  # released, or never dispatched by this incarnation
            # Dispatched by an earlier incarnation of this state (lost with its actor): accept.
            self._parents[pid].generations[(stage_index, ordinal)] = generation
            return Verdict.ACCEPTED
        if current != generation:
            return Verdict.STALE
        assert parent is not None
        fact = parent.committed.get((stage_index, ordinal))
        return Verdict.REPLAY if fact is not None and fact[2] == generation else Verdict.ACCEPTED

    @staticmethod
    def _settle(parent: _Parent, unit: tuple[int, int], fact: tuple[str, str | None, int]) -> None:
        """Record a unit's fact; a newer dispatch (a retried task) supersedes an older one's."""
        previous = parent.committed.get(unit)
        if previous is not None and previous[2] == fact[2] and previous[:2] != fact[:2]:
            raise FencingError(
                f"conflicting replay for stage #{unit[0]}, ordinal {unit[1]}: "
                f"{previous[:2]} then {fact[:2]}"
            )
        parent.committed[unit] = fact

    def release(self, roots: Sequence[str], parent_paths: Sequence[Path]) -> None:
        """Parents that were reduced: their fencing state is no longer needed."""
        for root, path in zip(roots, parent_paths, strict=True):
            self._parents.pop((root, tuple(path)), None)

    def roots_in_flight(self) -> int:
        """The source roots with a parent in flight at any level (never more than the roots)."""
        return len({root for root, _ in self._parents})
