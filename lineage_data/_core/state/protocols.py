"""The coordinator's method table, written once: one typed protocol per owner of state.

:class:`Coordinator` is what the coordinator actor serves (:data:`METHODS`: what its client forwards
and its dispatch accepts). :class:`Journal` and :class:`StageClient` are what a stage's operator
needs, whichever client it holds: a coordinator's, or a flat plan's ``lineage_data._ray.typestore``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import pyarrow as pa

from lineage_data._core.state.fencing import CommitResult, Handoff, Path


class RootRegistry(Protocol):
    """The roots that sources discover while running (see :class:`~.registry.Roots`)."""

    def register_roots(self, roots: Sequence[str], block: str | None = None) -> None:
        """Record the roots of one source block (idempotent per block)."""

    def root_ids_since(self, cursor: int) -> tuple[pa.StringArray, int]:
        """Roots registered after the first ``cursor`` ones, and the new cursor."""


class Fencing(Protocol):
    """Generations, barriers and committed facts (see :class:`~.fencing.Fences`)."""

    def handoff(self, stage_index: int, roots: Sequence[str], paths: Sequence[Path]) -> Handoff:
        """A batch is about to run: its generation and its barred positions."""

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
        """Results of one dispatch, fenced; its outcomes and ``counts`` are added to ``stage``'s."""

    def release(self, roots: Sequence[str], parent_paths: Sequence[Path]) -> None:
        """Parents that were reduced: their fencing state goes."""


class Suspects(Protocol):
    """The attempts that hung, and the keys an earlier attempt crashed or hung on."""

    def hung(self, stage: str, key: str) -> None:
        """The attempt on ``key`` now running timed out."""

    def suspects(self, stage: str, keys: Sequence[str]) -> list[str]:
        """Those of ``keys`` an earlier attempt crashed or hung on."""


class CrashJournal(Suspects, Protocol):
    """Attempts that began and never ended (see :class:`~.journal.AttemptJournal`)."""

    def attempt(
        self, stage: str, key: str | None, ended: Sequence[str] = (), who: str | None = None
    ) -> tuple[int, int]:
        """A call on ``key`` begins, those on ``ended`` are through: ``(crashes, timeouts)``."""

    def crashed_by(self, stage: str, key: str) -> list[str]:
        """The processes that died on ``key``, oldest first."""


class StageTypes(Protocol):
    """The column types every stage establishes (see :class:`~.schema.ColumnTypes`)."""

    def establish_types(self, stage: str, types: dict[str, str]) -> dict[str, str]:
        """The established type of each column of ``types`` (first writer wins)."""

    def note_columns(self, stage: str, names: Sequence[str]) -> None:
        """Columns the stage's rows showed with no decided type yet."""


class TypeRegistry(StageTypes, Protocol):
    """Each stage's column types and every column its rows showed."""

    def established(self, stage: str) -> list[str]:
        """Every column the stage's rows have shown, first seen first."""


class Coordinator(RootRegistry, Fencing, CrashJournal, TypeRegistry, Protocol):
    """Every call the coordinator serves: the owners' calls, with accounting beside them."""

    def count(self, stage: str, counts: dict[str, int]) -> None:
        """Add per-outcome counts for a stage."""

    def reduced(
        self, stage: str, roots: Sequence[str], parent_paths: Sequence[Path], counts: dict[str, int]
    ) -> None:
        """A reduce batch: release its parents, count their outcomes."""

    def snapshot(self) -> dict:
        """Counts, columns, calls served, roots in flight and the epoch, as plain data."""


def _served(protocol: type) -> tuple[str, ...]:
    """The public methods of ``protocol`` and of the protocols it extends, base protocols first."""
    names: dict[str, None] = {}
    for cls in reversed(protocol.__mro__):
        if Protocol in cls.__bases__:
            names.update(dict.fromkeys(n for n in vars(cls) if not n.startswith("_")))
    return tuple(names)


METHODS: tuple[str, ...] = _served(Coordinator)
"""The names the coordinator serves: its client forwards them, its dispatch accepts nothing else."""


@runtime_checkable
class Journal(Suspects, Protocol):
    """The crash journal as a stage's :class:`~lineage_data._core.guard.Guard` uses it."""

    def attempt(self, stage: str, key: str | None, ended: Sequence[str] = ()) -> tuple[int, int]:
        """A call on ``key`` begins, those on ``ended`` are through: ``(crashes, timeouts)``."""

    def why_crashed(self, stage: str, key: str) -> str | None:
        """Why the processes that ran ``key`` before died, when it can be told."""


class StageClient(Journal, StageTypes, Protocol):
    """What every stage's operator talks to: column types and the crash journal."""


class OperatorClient(Coordinator, StageClient, Protocol):
    """What a stage below the source level talks to: the whole table and ``why_crashed``."""
