"""Failure values a user function returns in place of a row's output."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class RecordFailure:
    """This row failed; its siblings go on.

    >>> RecordFailure("blank page").cause
    'blank page'
    """

    cause: str


@dataclass(frozen=True, slots=True)
class GroupFailure:
    """This row failed and so does its group: siblings not yet started are suppressed.

    >>> GroupFailure("encrypted").cause
    'encrypted'
    """

    cause: str


def is_failure(value: object) -> bool:
    """True for a :class:`RecordFailure` or :class:`GroupFailure` value."""
    return isinstance(value, RecordFailure | GroupFailure)
