"""The per-run lineage state: one small owner per kind of state, composed behind one facade.

Pure Python: the coordinator actor is a thin shell over one :class:`LineageState`, and the in-process
executor uses it directly. Every call takes a whole batch. The owners, each the one writer of its
state, are :class:`~.registry.Roots`, :class:`~.fencing.Fences` (per in-flight parent, one epoch per
incarnation), :class:`~.journal.AttemptJournal`, :class:`~.schema.ColumnTypes` and
:class:`~.counts.StageCounts`; the calls they serve are :mod:`.protocols`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pyarrow as pa

from lineage_data._core.state.counts import StageCounts, derived_counts
from lineage_data._core.state.fencing import CommitResult, Fences, Handoff, Path, Verdict
from lineage_data._core.state.journal import AttemptJournal
from lineage_data._core.state.protocols import (
    METHODS,
    Coordinator,
    Journal,
    OperatorClient,
    RootRegistry,
    StageClient,
)
from lineage_data._core.state.registry import Roots
from lineage_data._core.state.schema import ColumnTypes

__all__ = [
    "METHODS",
    "CommitResult",
    "Coordinator",
    "Handoff",
    "Journal",
    "LineageState",
    "OperatorClient",
    "RootRegistry",
    "StageClient",
    "Verdict",
    "derived_counts",
]


def _owned(owner: str, method: Callable[..., Any]) -> Callable[..., Any]:
    """The facade's ``method``: the method of the owner in attribute ``owner``, counted as served."""
    name = method.__name__

    def call(self: LineageState, *args: Any, **kwargs: Any) -> Any:
        self._reports += 1
        return getattr(getattr(self, owner), name)(*args, **kwargs)

    call.__name__, call.__qualname__ = name, f"LineageState.{name}"
    call.__doc__ = method.__doc__
    return call


class LineageState(Coordinator):
    """Barriers, generations and accounting of one execution: the owners, one call per batch."""

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

    register_roots = _owned("roots", Roots.register_roots)
    handoff = _owned("fences", Fences.handoff)
    release = _owned("fences", Fences.release)
    attempt = _owned("journal", AttemptJournal.attempt)
    suspects = _owned("journal", AttemptJournal.suspects)
    crashed_by = _owned("journal", AttemptJournal.crashed_by)
    hung = _owned("journal", AttemptJournal.hung)
    establish_types = _owned("types", ColumnTypes.establish_types)
    note_columns = _owned("types", ColumnTypes.note_columns)
    established = _owned("types", ColumnTypes.established)

    def root_ids_since(self, cursor: int) -> tuple[pa.StringArray, int]:
        """:meth:`.registry.Roots.root_ids_since` (the driver's poll: not counted as served)."""
        return self.roots.root_ids_since(cursor)

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
        """:meth:`.fencing.Fences.commit`, its outcomes and ``counts`` added to ``stage``'s."""
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

    def reduced(
        self, stage: str, roots: Sequence[str], parent_paths: Sequence[Path], counts: dict[str, int]
    ) -> None:
        """A reduce batch: release the reduced parents and count their outcomes, in one call."""
        self.release(roots, parent_paths)
        self.counts.add(stage, counts)

    def count(self, stage: str, counts: dict[str, int]) -> None:
        """Add per-outcome counts for a stage (one call per batch)."""
        self._reports += 1
        self.counts.add(stage, counts)

    def snapshot(self) -> dict:
        """Per-stage counts and columns, calls served, roots in flight and the epoch, as plain data."""
        return {
            "counts": self.counts.as_dict(),
            "columns": self.types.columns(),
            "reports": self._reports,
            "in_flight_parents": self.fences.roots_in_flight(),
            "epoch": self.epoch,
        }

    def why_crashed(self, stage: str, key: str) -> str | None:
        """Why the processes that ran ``key`` died: in one process, nobody can tell (None)."""
        return None
