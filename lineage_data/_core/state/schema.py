"""The type registry: each stage's established column types and every column its rows showed."""

from __future__ import annotations

from collections.abc import Mapping, Sequence


class ColumnTypes:
    """Per stage: the first type seen of each column (first writer wins), and all columns seen."""

    def __init__(self, columns: Mapping[str, Sequence[str]] | None = None) -> None:
        """``columns``: what stages of an earlier run showed (see :meth:`established`), kept."""
        self._types: dict[str, dict[str, str]] = {}  # stage -> column -> first type seen
        # stage -> every user column its rows showed, typed or not, first seen first
        self._columns: dict[str, dict[str, None]] = {
            stage: dict.fromkeys(names) for stage, names in (columns or {}).items()
        }

    def establish_types(self, stage: str, types: dict[str, str]) -> dict[str, str]:
        """First writer wins: the type of each column of ``types`` established for ``stage``.

        Types are opaque strings (:func:`~lineage_data._core.columns.type_token`); operators ask only
        for columns they have not cached, so a run makes a few calls per stage.
        """
        self._columns.setdefault(stage, {}).update(dict.fromkeys(types))
        known = self._types.setdefault(stage, {})
        return {name: known.setdefault(name, token) for name, token in types.items()}

    def note_columns(self, stage: str, names: Sequence[str]) -> None:
        """Record columns ``stage``'s rows showed with no type yet (only ``None`` or ``[]``)."""
        self._columns.setdefault(stage, {}).update(dict.fromkeys(names))

    def established(self, stage: str) -> list[str]:
        """Every column ``stage``'s rows have shown, typed or not, first seen first.

        What an empty group of children from ``stage`` reduces to ``[]`` (DESIGN §5): without an
        untyped column it would miss that column, or get ``None`` in a block it shares.
        """
        return list(self._columns.get(stage, {}))

    def columns(self) -> dict[str, list[str]]:
        """Every stage's columns, as plain data (for a snapshot)."""
        return {stage: list(names) for stage, names in self._columns.items()}
