"""The per-run lineage state: the one writer of barriers, generations and accounting.

It is pure Python. The coordinator actor is a thin shell over one :class:`LineageState`; the in-process
executor uses it directly. Every method takes a whole batch: callers make one call per batch.

Memory: fencing state is kept per *in-flight parent* and released when the parent is reduced. The root
registry (sources that discover their roots while running) grows with the corpus, by the id's bytes + ~18
bytes a root (:class:`~lineage_data._core.roots.RootIndex`); which roots reached the consumer is not kept
here but by the driver's :class:`~lineage_data._core.ledger.Ledger`.

Faults: the state may be lost (its actor died) and rebuilt empty. Each incarnation has its own *epoch*,
part of every generation it hands out: a commit for a unit this incarnation never dispatched is
accepted when it comes from an earlier epoch (nothing here can contradict it), and stale otherwise.
"""

from __future__ import annotations

import enum
import random
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import pyarrow as pa

from lineage_data._core.errors import DuplicateRootError, FencingError
from lineage_data._core.ledger import TerminalRows
from lineage_data._core.outcomes import Outcome, passed_as
from lineage_data._core.roots import RootIndex

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
    # unit -> (outcome, cause, generation that committed it)
    committed: dict[tuple[int, int], tuple[str, str | None, int]] = field(default_factory=dict)
    barrier: Barrier | None = None


EPOCH_BITS = 32
_WHO_KEPT = 4  # processes remembered per journaled key (a crash needs the last few only)


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

    def __init__(self, columns: Mapping[str, Sequence[str]] | None = None) -> None:
        """``columns``: what stages of an earlier run showed (see :meth:`established`), kept."""
        self.epoch = random.getrandbits(30) + 1
        self._generation = self.epoch << EPOCH_BITS
        self._parents: dict[ParentId, _Parent] = {}
        self._roots = RootIndex()  # registered roots, in order (a few bytes each, see _core.roots)
        self._blocks: set[str] = set()
        self._counts: dict[str, Counter[str]] = defaultdict(Counter)
        self._types: dict[str, dict[str, str]] = {}  # stage -> column -> first type seen
        # stage -> every user column its rows showed, typed or not, first seen first
        self._columns: dict[str, dict[str, None]] = {
            stage: dict.fromkeys(names) for stage, names in (columns or {}).items()
        }
        self._attempts: dict[tuple[str, str], list[int]] = {}  # (stage, key) -> begun, ended, hung
        self._who: dict[tuple[str, str], list[str]] = {}  # (stage, key) -> who began its attempts
        self._reports = 0

    # -- source ---------------------------------------------------------------------------------
    def register_roots(self, roots: Sequence[str], block: str | None = None) -> None:
        """Record the roots of one source block; a root seen in another block is a duplicate.

        ``block`` names the source block (e.g. a digest of its ids): registering the same block again
        (a retried source task) changes nothing. Without it, every call is a block of its own.

        Raises:
            DuplicateRootError: a root was already registered by another block.
        """
        self._reports += 1
        key = block if block is not None else f"#{self._reports}"
        if key in self._blocks or not len(roots):
            self._blocks.add(key)
            return
        # the block is new, so a root registered before was registered by another block
        _, known = self._roots.add_known(roots, all_new=True)
        if known.any():
            root = roots[int(known.argmax())]
            root = root.as_py() if isinstance(root, pa.Scalar) else root
            raise DuplicateRootError(
                f"duplicate lineage root id {root!r}: source ids must be unique"
            )
        self._blocks.add(key)

    def root_ids_since(self, cursor: int) -> tuple[pa.StringArray, int]:
        """Roots registered after the first ``cursor`` ones, and the new cursor (for the driver).

        The roots are an Arrow array: cheap to send, no Python object per root.
        """
        size = len(self._roots)
        return self._roots.ids(range(min(cursor, size), size)), size

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
        batches: Sequence[int] | None = None,
    ) -> CommitResult:
        """Results of one dispatch. Installs barriers for GroupFailures, then fences every unit.

        A unit whose generation is not current is STALE (its result must be discarded). A unit already
        committed with the same outcome and cause is a REPLAY; with another, a :class:`FencingError`.
        A sibling of a barred parent that ran concurrently with the failure comes back SUPPRESSED.
        ``batches`` numbers the function calls of a dispatch that ran its units in several (in order):
        a sibling that ran in a call before the failure's had finished and keeps its outcome, as if it
        had been committed on its own first.
        ``counts`` are outcome counts of the batch's other rows (barred, passed through), added to the
        stage's counts together with the outcomes of the units committed here.
        """
        self._reports += 1
        units = [_split(root, tuple(path)) for root, path in zip(roots, paths, strict=True)]
        verdicts = [self._fence(stage_index, generation, pid, ordinal) for pid, ordinal in units]
        failed_in: dict[ParentId, int] = {}  # barriers installed here: the call of the failure
        for i, (pid, _) in enumerate(units):
            if group[i] and verdicts[i] is not Verdict.STALE and pid[1] is not None:
                parent = self._parents[pid]
                if parent.barrier is None:
                    self._generation += 1
                    parent.barrier = Barrier(
                        stage_index, causes[i] or "GroupFailure", self._generation
                    )
                    failed_in[pid] = batches[i] if batches is not None else 0
                elif pid in failed_in and batches is not None:
                    failed_in[pid] = min(failed_in[pid], batches[i])
        suppressed: dict[int, str] = {}
        tally: Counter[str] = Counter(counts or {})
        for i, (pid, ordinal) in enumerate(units):
            if verdicts[i] is Verdict.STALE:
                continue
            parent = self._parents[pid]
            barrier = parent.barrier
            outcome = outcomes[i]
            earlier = batches is not None and pid in failed_in and batches[i] < failed_in[pid]
            if (
                barrier is not None
                and barrier.stage_index <= stage_index
                and not group[i]
                and outcome != "FAILED"
                and not earlier
            ):
                suppressed[i] = barrier.cause
                outcome = "SUPPRESSED"
            cause = barrier.cause if i in suppressed and barrier is not None else causes[i]
            self._settle(parent, (stage_index, ordinal), (outcome, cause, generation))
            tally[outcome] += 1
        if stage:
            self._counts[stage].update(tally)
        return CommitResult(verdicts, suppressed)

    def _fence(self, stage_index: int, generation: int, pid: ParentId, ordinal: int) -> Verdict:
        parent = self._parents.get(pid)
        current = parent.generations.get((stage_index, ordinal)) if parent is not None else None
        if current is None:
            if generation >> EPOCH_BITS == self.epoch:
                return Verdict.STALE  # released, or never dispatched by this incarnation
            # Dispatched by an earlier incarnation of this state (lost with its actor): accept.
            if parent is None:
                parent = self._parents[pid] = _Parent()
            parent.generations[(stage_index, ordinal)] = generation
            return Verdict.ACCEPTED
        if current != generation:
            return Verdict.STALE
        assert parent is not None
        fact = parent.committed.get((stage_index, ordinal))
        return Verdict.REPLAY if fact is not None and fact[2] == generation else Verdict.ACCEPTED

    @staticmethod
    def _settle(parent: _Parent, unit: tuple[int, int], fact: tuple[str, str | None, int]) -> None:
        """Record a unit's fact; a newer dispatch (a retried task) supersedes an older one's.

        The same dispatch reporting two different facts is a :class:`FencingError`.
        """
        previous = parent.committed.get(unit)
        if previous is not None and previous[2] == fact[2] and previous[:2] != fact[:2]:
            raise FencingError(
                f"conflicting replay for stage #{unit[0]}, ordinal {unit[1]}: "
                f"{previous[:2]} then {fact[:2]}"
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

    def snapshot(self) -> dict:
        """Per-stage counts and columns, calls served, roots in flight and the epoch, as plain data.

        In flight: the source roots with a parent in flight at any level (a page waiting for its
        lines is its document's), so never more than the roots that exist.
        """
        return {
            "counts": {stage: dict(c) for stage, c in self._counts.items()},
            "columns": {stage: list(names) for stage, names in self._columns.items()},
            "reports": self._reports,
            "in_flight_parents": len({root for root, _ in self._parents}),
            "epoch": self.epoch,
        }

    # -- crash journal (see lineage_data._core.guard) --------------------------------------------
    def attempt(
        self, stage: str, key: str | None, ended: Sequence[str] = (), who: str | None = None
    ) -> tuple[int, int]:
        """A call on ``key`` begins in ``stage``; the calls on ``ended`` are through.

        Returns ``(crashes, timeouts)`` of the earlier attempts on ``key``: attempts that began and
        never ended (their process died), and those a watchdog reported as hung. A key is forgotten
        once every attempt on it has ended. ``key=None`` only ends ``ended``. ``who`` names the
        process that makes the attempt (see :meth:`crashed_by`).
        """
        self._reports += 1
        journal = self._attempts
        for name in ended:
            entry = journal.get((stage, name))
            if entry is not None:
                entry[1] += 1
                if entry[1] >= entry[0]:
                    del journal[(stage, name)]
                    self._who.pop((stage, name), None)
        if key is None:
            return 0, 0
        entry = journal.setdefault((stage, key), [0, 0, 0])
        crashes = entry[0] - entry[1]
        entry[0] += 1
        if who is not None:
            whos = self._who.setdefault((stage, key), [])
            whos[:] = [*whos[-(_WHO_KEPT - 1) :], who]
        return crashes, entry[2]

    def suspects(self, stage: str, keys: Sequence[str]) -> list[str]:
        """Those of ``keys`` that an earlier attempt crashed or hung on (one call per isolated block)."""
        self._reports += 1
        journal = self._attempts
        return [
            k
            for k in keys
            if (entry := journal.get((stage, k))) is not None and (entry[0] > entry[1] or entry[2])
        ]

    def crashed_by(self, stage: str, key: str) -> list[str]:
        """The processes that made the earlier attempts on ``key`` (the last few), oldest first.

        Asked only for a unit that is about to fail for its crashes: every earlier attempt on it
        began and none ended, so these are the processes that died on it.
        """
        self._reports += 1
        return self._who.get((stage, key), [])[:-1]

    def hung(self, stage: str, key: str) -> None:
        """The attempt on ``key`` now running got no result in its stage's ``timeout_s``."""
        self._reports += 1
        entry = self._attempts.setdefault((stage, key), [1, 0, 0])
        entry[2] += 1

    # -- column types -----------------------------------------------------------------------------
    def establish_types(self, stage: str, types: dict[str, str]) -> dict[str, str]:
        """First writer wins: the type of each column of ``types`` established for ``stage``.

        A column not seen before takes the type given here; one seen before keeps its first type. Types
        are opaque strings (see :func:`lineage_data._core.columns.type_token`); operators call this
        only for columns they have not cached yet, so a run makes a few calls per stage, not per batch.
        """
        self._reports += 1
        self._columns.setdefault(stage, {}).update(dict.fromkeys(types))
        known = self._types.setdefault(stage, {})
        return {name: known.setdefault(name, token) for name, token in types.items()}

    def note_columns(self, stage: str, names: Sequence[str]) -> None:
        """Record columns ``stage``'s rows showed with no decided type yet (only ``None`` or ``[]``).

        Such a column establishes no type, but it is a column of the stage all the same: an empty group
        reduced from the stage's rows lists it as ``[]`` (see :meth:`established`).
        """
        self._reports += 1
        self._columns.setdefault(stage, {}).update(dict.fromkeys(names))

    def established(self, stage: str) -> list[str]:
        """Every column ``stage``'s rows have shown, in first-seen order: typed or not.

        What an empty group of children from ``stage`` reduces to ``[]`` (DESIGN §5, issue 13). A column
        seen only as ``None`` or ``[]`` (an inner empty group's list column) counts: an empty group
        without it would come back with a missing column, or ``None`` in a block it shares.
        """
        self._reports += 1
        return list(self._columns.get(stage, {}))


def derived_counts(
    stages: Sequence[str], derived: Sequence[str], terminal: Mapping[str, Sequence]
) -> dict[str, dict[str, int]]:
    """Counts of source-level 1:1 stages (``derived``), which report nothing, from the terminal rows.

    ``terminal`` maps each root to ``(outcome, cause, stage, ...)`` as the consumer received it; what
    it was at each stage is :func:`~lineage_data._core.outcomes.passed_as`. Only the number of roots
    per ``(outcome, stage)`` matters, so a ledger's :class:`~lineage_data._core.ledger.TerminalRows`
    is counted without a loop over its roots.
    """
    if isinstance(terminal, TerminalRows):
        ended = terminal.outcome_stage_counts()
    else:
        ended = Counter((row[0], row[2]) for row in terminal.values())
    order = {name: i for i, name in enumerate(stages)}
    counts: dict[str, Counter[str]] = {name: Counter() for name in derived}
    for (outcome, stage), n in ended.items():
        decided = order.get(stage, -1) if stage is not None else None
        for name in derived:
            counts[name][passed_as(Outcome(outcome), order[name], decided).value] += n
    return {name: dict(c) for name, c in counts.items()}
