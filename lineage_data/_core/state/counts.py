"""Per-stage outcome counts: what a run's stages reported, and what source-level stages imply."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence

from lineage_data._core.outcomes import Outcome, passed_as
from lineage_data._core.terminal_rows import TerminalRows


class StageCounts:
    """Outcome counts per stage, added one batch at a time."""

    def __init__(self) -> None:
        self._counts: dict[str, Counter[str]] = defaultdict(Counter)

    def add(self, stage: str, counts: Mapping[str, int]) -> None:
        """Add a batch's per-outcome counts to ``stage``'s."""
        self._counts[stage].update(counts)

    def as_dict(self) -> dict[str, dict[str, int]]:
        """Every stage's counts, as plain data."""
        return {stage: dict(c) for stage, c in self._counts.items()}


def derived_counts(
    stages: Sequence[str], derived: Sequence[str], terminal: Mapping[str, Sequence]
) -> dict[str, dict[str, int]]:
    """Counts of source-level 1:1 stages (``derived``), which report nothing, from the terminal rows.

    ``terminal`` maps each root to ``(outcome, cause, stage, ...)``; what it was at each stage is
    :func:`~lineage_data._core.outcomes.passed_as`. ``TerminalRows`` are counted with no loop.
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
