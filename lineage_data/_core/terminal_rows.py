"""The terminal rows of a run, one per source root in completion order, as its report reads them.

:meth:`~lineage_data._core.ledger.Ledger.terminal`'s columns, turned into Python rows only when asked.
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Callable, Iterator, Mapping

import numpy as np
import pyarrow as pa

from lineage_data._core.outcomes import Outcome

# a root's outcome code is its index here + 1 (0: not yet)
OUTCOMES = tuple(o.value for o in Outcome)

TerminalRow = tuple[str, str | None, str | None, float]  # outcome, cause, stage, committed_s


class TerminalRows(Mapping[str, TerminalRow]):
    """The terminal rows of a ledger, in completion order: a read-only mapping built for one report."""

    def __init__(
        self,
        roots: Callable[[], pa.StringArray],
        codes: Callable[[], np.ndarray],
        seconds: Callable[[], np.ndarray],
        slots: np.ndarray,
        detail: Mapping[int, tuple[str | None, str | None]],
        *,
        tally: np.ndarray,
    ) -> None:
        """``roots``, ``codes`` and ``seconds`` are read on first use; ``tally``: rows per code."""
        self._read_ids, self._read_codes, self._read_seconds = roots, codes, seconds
        self._tally = tally
        self._size = len(slots)
        self._details: dict[int, tuple[str | None, str | None]] = {}  # position -> detail
        if detail and len(slots):
            position = np.zeros(int(slots.max()) + 1, dtype=np.int64)
            position[slots] = np.arange(len(slots))
            self._details = {int(position[s]): d for s, d in detail.items()}

    @functools.cached_property
    def _ids(self) -> pa.StringArray:
        return self._read_ids()

    @functools.cached_property
    def _codes(self) -> np.ndarray:
        return self._read_codes()

    @functools.cached_property
    def _seconds(self) -> np.ndarray:
        return self._read_seconds()

    @functools.cached_property
    def _roots(self) -> list[str]:
        return self._ids.to_pylist()

    @functools.cached_property
    def _where(self) -> dict[str, int]:
        return {r: i for i, r in enumerate(self._roots)}

    def _causes_stages(self) -> tuple[list[str | None], list[str | None]]:
        causes: list[str | None] = [None] * self._size
        stages: list[str | None] = [None] * self._size
        for i, (cause, stage) in self._details.items():
            causes[i], stages[i] = cause, stage
        return causes, stages

    @functools.cached_property
    def _values(self) -> list[TerminalRow]:
        outcomes = np.array(("",) + OUTCOMES, dtype=object)[self._codes].tolist()
        causes, stages = self._causes_stages()
        return list(zip(outcomes, causes, stages, self._seconds.tolist(), strict=True))

    def __len__(self) -> int:
        return self._size

    def __iter__(self) -> Iterator[str]:
        return iter(self._roots)

    def __getitem__(self, root: str) -> TerminalRow:
        return self._values[self._where[root]]

    def to_arrow(self) -> pa.Table:
        """The rows as columns ``root, outcome, cause, stage, committed_s``: no Python object per root."""
        causes, stages = self._causes_stages()
        return pa.table(
            {
                "root": self._ids,
                "outcome": _outcome_names().take(pa.array(self._codes, pa.uint8())),
                "cause": pa.array(causes, pa.string()),
                "stage": pa.array(stages, pa.string()),
                "committed_s": pa.array(np.asarray(self._seconds, dtype=np.float64)),
            }
        )

    def values(self) -> list[TerminalRow]:  # type: ignore[override]
        """Every terminal row, in completion order."""
        return self._values

    def outcome_stage_counts(self) -> Counter[tuple[str, str | None]]:
        """How many roots ended with each ``(outcome, stage)``."""
        counts: Counter[tuple[str, str | None]] = Counter(
            {(o, None): n for o, n in zip(OUTCOMES, self._tally[1:].tolist(), strict=True)}
        )
        for i, (_, stage) in self._details.items():
            if stage is not None:
                outcome = OUTCOMES[int(self._codes[i]) - 1]
                counts[(outcome, None)] -= 1
                counts[(outcome, stage)] += 1
        return +counts


@functools.cache
def _outcome_names() -> pa.StringArray:
    """The outcome name of each code (0: none yet), built on first use.

    The first Arrow array a process builds imports pandas (~0.3 s), which the coordinator, importing
    this module, must not pay on the critical path of every run's first batch.
    """
    return pa.array((None, *OUTCOMES), pa.string())
