"""The crash journal: attempts that began and never ended, per stage and key (see ``_core.guard``)."""

from __future__ import annotations

from collections.abc import Sequence

_WHO_KEPT = 4  # processes remembered per journaled key (a crash needs the last few only)


class AttemptJournal:
    """Attempts per ``(stage, key)``: begun, ended, hung; and who began the last few."""

    def __init__(self) -> None:
        self._attempts: dict[tuple[str, str], list[int]] = {}  # (stage, key) -> begun, ended, hung
        self._who: dict[tuple[str, str], list[str]] = {}  # (stage, key) -> who began its attempts

    def attempt(
        self, stage: str, key: str | None, ended: Sequence[str] = (), who: str | None = None
    ) -> tuple[int, int]:
        """A call on ``key`` (None: none) by ``who`` begins; those on ``ended`` are through.

        Returns ``(crashes, timeouts)`` of the earlier attempts on ``key``: those that never ended
        (their process died) and those reported hung. A key is forgotten once all its attempts ended.
        """
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
        journal = self._attempts
        return [
            k
            for k in keys
            if (entry := journal.get((stage, k))) is not None and (entry[0] > entry[1] or entry[2])
        ]

    def crashed_by(self, stage: str, key: str) -> list[str]:
        """The processes of the last few earlier attempts on ``key``, oldest first.

        Asked only for a unit about to fail for its crashes: none of them ended, so they died on it.
        """
        return self._who.get((stage, key), [])[:-1]

    def hung(self, stage: str, key: str) -> None:
        """The attempt on ``key`` now running got no result in its stage's ``timeout_s``."""
        entry = self._attempts.setdefault((stage, key), [1, 0, 0])
        entry[2] += 1
