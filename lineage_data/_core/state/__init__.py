"""The per-run lineage state: one small owner per kind of state, composed behind one facade.

It is pure Python. The coordinator actor is a thin shell over one :class:`LineageState`; the in-process
executor uses it directly. Every method takes a whole batch: callers make one call per batch.

The owners, each the one writer of its state (the calls they serve: :mod:`.protocols`):

- :class:`~.registry.Roots`: the roots sources discover while running; grows with the corpus.
- :class:`~.fencing.Fences`: generations, barriers and committed facts, kept per *in-flight parent*
  and released when the parent is reduced; each incarnation has its own epoch (see there).
- :class:`~.journal.AttemptJournal`: the crash journal of :mod:`lineage_data._core.guard`.
- :class:`~.schema.ColumnTypes`: each stage's column types, first writer wins.
- :class:`~.counts.StageCounts`: per-stage outcome counts.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence

import pyarrow as pa

from lineage_data._core.state.counts import StageCounts, derived_counts
from lineage_data._core.state.fencing import (
    EPOCH_BITS,
    Barrier,
    CommitResult,
    Fences,
    Handoff,
    ParentId,
    Path,
    Verdict,
)
from lineage_data._core.state.journal import AttemptJournal
from lineage_data._core.state.protocols import (
    METHODS,
    Coordinator,
    CrashJournal,
    Fencing,
    Journal,
    OperatorClient,
    RootRegistry,
    StageClient,
    TypeRegistry,
)
from lineage_data._core.state.registry import Roots
from lineage_data._core.state.schema import ColumnTypes

__all__ = [
    "EPOCH_BITS",
    "METHODS",
    "AttemptJournal",
    "Barrier",
    "ColumnTypes",
    "CommitResult",
    "Coordinator",
    "CrashJournal",
    "Fences",
    "Fencing",
    "Handoff",
    "Journal",
    "OperatorClient",
    "LineageState",
    "ParentId",
    "Path",
    "RootRegistry",
    "Roots",
    "StageClient",
    "StageCounts",
    "TypeRegistry",
    "Verdict",
    "derived_counts",
]


class LineageState(Coordinator):
    """Barriers, generations and accounting of one execution: the owners, one call per batch.

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
        self.roots = Roots()
        self.fences = Fences()
        self.journal = AttemptJournal()
        self.types = ColumnTypes(columns)
        self.counts = StageCounts()
        self._reports = 0  # calls served

    @property
    def epoch(self) -> int:
        """This incarnation's epoch (part of every generation it hands out)."""
        return self.fences.epoch

    # -- source ---------------------------------------------------------------------------------
    def register_roots(self, roots: Sequence[str], block: str | None = None) -> None:
        """:meth:`Roots.register_roots <.registry.Roots.register_roots>`."""
        self._reports += 1
        self.roots.register_roots(roots, block)

    def root_ids_since(self, cursor: int) -> tuple[pa.StringArray, int]:
        """:meth:`Roots.root_ids_since <.registry.Roots.root_ids_since>`."""
        return self.roots.root_ids_since(cursor)

    # -- per-row stages -------------------------------------------------------------------------
    def handoff(self, stage_index: int, roots: Sequence[str], paths: Sequence[Path]) -> Handoff:
        """:meth:`Fences.handoff <.fencing.Fences.handoff>`."""
        self._reports += 1
        return self.fences.handoff(stage_index, roots, paths)

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
        """:meth:`Fences.commit <.fencing.Fences.commit>`, counted for ``stage``.

        ``counts`` are outcome counts of the batch's other rows (barred, passed through), added to the
        stage's counts together with the outcomes of the units committed here.
        """
        self._reports += 1
        result = self.fences.commit(
            stage_index, generation, roots, paths, outcomes, causes, group=group, batches=batches
        )
        if stage:
            tally: Counter[str] = Counter(counts or {})
            for i, verdict in enumerate(result.verdicts):
                if verdict is not Verdict.STALE:
                    tally["SUPPRESSED" if i in result.suppressed else outcomes[i]] += 1
            self.counts.add(stage, tally)
        return result

    def release(self, roots: Sequence[str], parent_paths: Sequence[Path]) -> None:
        """:meth:`Fences.release <.fencing.Fences.release>`."""
        self._reports += 1
        self.fences.release(roots, parent_paths)

    def reduced(
        self, stage: str, roots: Sequence[str], parent_paths: Sequence[Path], counts: dict[str, int]
    ) -> None:
        """A reduce batch: release the reduced parents and count their outcomes, in one call."""
        self.release(roots, parent_paths)
        self.counts.add(stage, counts)

    # -- counts and accounting ------------------------------------------------------------------
    def count(self, stage: str, counts: dict[str, int]) -> None:
        """Add per-outcome counts for a stage (one call per batch)."""
        self._reports += 1
        self.counts.add(stage, counts)

    def snapshot(self) -> dict:
        """Per-stage counts and columns, calls served, roots in flight and the epoch, as plain data.

        In flight: the source roots with a parent in flight at any level (a page waiting for its
        lines is its document's), so never more than the roots that exist.
        """
        return {
            "counts": self.counts.as_dict(),
            "columns": self.types.columns(),
            "reports": self._reports,
            "in_flight_parents": self.fences.roots_in_flight(),
            "epoch": self.epoch,
        }

    # -- crash journal (see lineage_data._core.guard) --------------------------------------------
    def attempt(
        self, stage: str, key: str | None, ended: Sequence[str] = (), who: str | None = None
    ) -> tuple[int, int]:
        """:meth:`AttemptJournal.attempt <.journal.AttemptJournal.attempt>`."""
        self._reports += 1
        return self.journal.attempt(stage, key, ended, who)

    def suspects(self, stage: str, keys: Sequence[str]) -> list[str]:
        """:meth:`AttemptJournal.suspects <.journal.AttemptJournal.suspects>`."""
        self._reports += 1
        return self.journal.suspects(stage, keys)

    def crashed_by(self, stage: str, key: str) -> list[str]:
        """:meth:`AttemptJournal.crashed_by <.journal.AttemptJournal.crashed_by>`."""
        self._reports += 1
        return self.journal.crashed_by(stage, key)

    def why_crashed(self, stage: str, key: str) -> str | None:
        """Why the processes that ran ``key`` died: in one process, nobody can tell (None)."""
        return None

    def hung(self, stage: str, key: str) -> None:
        """:meth:`AttemptJournal.hung <.journal.AttemptJournal.hung>`."""
        self._reports += 1
        self.journal.hung(stage, key)

    # -- column types -----------------------------------------------------------------------------
    def establish_types(self, stage: str, types: dict[str, str]) -> dict[str, str]:
        """:meth:`ColumnTypes.establish_types <.schema.ColumnTypes.establish_types>`."""
        self._reports += 1
        return self.types.establish_types(stage, types)

    def note_columns(self, stage: str, names: Sequence[str]) -> None:
        """:meth:`ColumnTypes.note_columns <.schema.ColumnTypes.note_columns>`."""
        self._reports += 1
        self.types.note_columns(stage, names)

    def established(self, stage: str) -> list[str]:
        """:meth:`ColumnTypes.established <.schema.ColumnTypes.established>`."""
        self._reports += 1
        return self.types.established(stage)
