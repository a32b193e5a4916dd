"""The type registry: each stage's established column types and every column its rows showed."""

from __future__ import annotations

from collections.abc import Mapping, Sequence


class ColumnTypes:
    """Per stage: the first type seen of each column (first writer wins), and all columns seen.

    Example:
        >>> types = ColumnTypes()
        >>> types.establish_types("ocr", {"text": "string"})
        {'text': 'string'}
        >>> types.establish_types("ocr", {"text": "null"})  # the first writer won
        {'text': 'string'}
    """

    def __init__(self, columns: Mapping[str, Sequence[str]] | None = None) -> None:
        """``columns``: what stages of an earlier run showed (see :meth:`established`), kept."""
        self._types: dict[str, dict[str, str]] = {}  # stage -> column -> first type seen
        # stage -> every user column its rows showed, typed or not, first seen first
        self._columns: dict[str, dict[str, None]] = {
            stage: dict.fromkeys(names) for stage, names in (columns or {}).items()
        }

    def establish_types(self, stage: str, types: dict[str, str]) -> dict[str, str]:
        """First writer wins: the type of each column of ``types`` established for ``stage``.

        A column not seen before takes the type given here; one seen before keeps its first type. Types
        are opaque strings (see :func:`lineage_data._core.columns.type_token`); operators call this
        only for columns they have not cached yet, so a run makes a few calls per stage, not per batch.
        """
        self._columns.setdefault(stage, {}).update(dict.fromkeys(types))
        known = self._types.setdefault(stage, {})
        return {name: known.setdefault(name, token) for name, token in types.items()}

    def note_columns(self, stage: str, names: Sequence[str]) -> None:
        """Record columns ``stage``'s rows showed with no decided type yet (only ``None`` or ``[]``).

        Such a column establishes no type, but it is a column of the stage all the same: an empty group
        reduced from the stage's rows lists it as ``[]`` (see :meth:`established`).
        """
        self._columns.setdefault(stage, {}).update(dict.fromkeys(names))

    def established(self, stage: str) -> list[str]:
        """Every column ``stage``'s rows have shown, in first-seen order: typed or not.

        What an empty group of children from ``stage`` reduces to ``[]`` (DESIGN §5, issue 13). A column
        seen only as ``None`` or ``[]`` (an inner empty group's list column) counts: an empty group
        without it would come back with a missing column, or ``None`` in a block it shares.
        """
        return list(self._columns.get(stage, {}))

    def columns(self) -> dict[str, list[str]]:
        """Every stage's columns, as plain data (for a snapshot)."""
        return {stage: list(names) for stage, names in self._columns.items()}
