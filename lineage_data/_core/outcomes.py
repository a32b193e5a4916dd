"""Outcomes and the transition rules, as pure functions of values: the operators only apply them."""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from typing import assert_never

from lineage_data._core.errors import describe
from lineage_data._core.failures import GroupFailure, RecordFailure


class Outcome(enum.StrEnum):
    """What became of a row."""

    PRESENT = "PRESENT"
    DROPPED = "DROPPED"
    FAILED = "FAILED"
    SUPPRESSED = "SUPPRESSED"


@dataclass(frozen=True, slots=True)
class Status:
    """An outcome with its cause and the stage that decided it (both None for PRESENT rows)."""

    outcome: Outcome
    cause: str | None = None
    stage: str | None = None

    @property
    def present(self) -> bool:
        """True when the row carries a value."""
        return self.outcome is Outcome.PRESENT


PRESENT = Status(Outcome.PRESENT)


def entering(status: Status) -> Status | None:
    """The status a row keeps when it enters a stage, or None when the stage must run it.

    A FAILED or SUPPRESSED input comes out SUPPRESSED with its cause kept; DROPPED stays DROPPED.
    """
    match status.outcome:
        case Outcome.PRESENT:
            return None
        case Outcome.DROPPED:
            return status
        case Outcome.FAILED | Outcome.SUPPRESSED:
            return Status(Outcome.SUPPRESSED, status.cause, status.stage)
        case _:
            assert_never(status.outcome)


def entering_outcomes(values: Sequence[str]) -> list[str]:
    """:func:`entering` over a column of outcomes that are not PRESENT (causes and stages kept)."""
    return [
        value if (kept := entering(Status(Outcome(value)))) is None else kept.outcome.value
        for value in values
    ]


def passed_as(final: Outcome, position: int, decided: int | None) -> Outcome:
    """The outcome a root had at the stage at ``position``, from its final outcome.

    ``decided``: the position of the stage that decided ``final`` (None: none did). Before it the root
    was PRESENT; at it DROPPED or FAILED; after it, what :func:`entering` keeps.
    """
    if decided is None or position < decided or final is Outcome.PRESENT:
        return Outcome.PRESENT
    at = Outcome.DROPPED if final is Outcome.DROPPED else Outcome.FAILED
    if position == decided:
        return at
    kept = entering(Status(at))
    assert kept is not None
    return kept.outcome


def from_value(value: object, stage: str) -> Status:
    """The status of a row whose user function returned ``value`` (a row value or a failure value)."""
    if isinstance(value, RecordFailure | GroupFailure):
        return Status(Outcome.FAILED, value.cause, stage)
    return PRESENT


def from_exception(exc: BaseException, stage: str) -> Status:
    """The status of a row whose user function raised ``exc``: FAILED with ``"Type: message"``."""
    return Status(Outcome.FAILED, describe(exc), stage)


def rejected(cause: str, stage: str) -> Status:
    """The status of a row whose own data the stage cannot take (bad input): FAILED with ``cause``."""
    return Status(Outcome.FAILED, cause, stage)


def dropped(stage: str) -> Status:
    """The status of a row a filter rejected."""
    return Status(Outcome.DROPPED, None, stage)


def barred(cause: str, stage: str) -> Status:
    """The status of a sibling stopped by a GroupFailure barrier."""
    return Status(Outcome.SUPPRESSED, cause, stage)


@dataclass(frozen=True, slots=True)
class GroupVerdict:
    """How a parent is reduced from its children.

    ``status``: the parent's final status, or None to run the reduce over ``kept`` (ordinals);
    ``missing``: the ordinals left out under ``on_child_failure="skip"``.
    """

    status: Status | None
    kept: tuple[int, ...]
    missing: tuple[int, ...]


def reduce_group(header: Status, children: Sequence[Status], on_child_failure: str) -> GroupVerdict:
    """Decide a parent's fate from its header status and its children's statuses (in ordinal order).

    DROPPED children are left out. Under ``"fail"`` any FAILED or SUPPRESSED child makes the parent
    SUPPRESSED with the first such cause (FAILED before SUPPRESSED, then by ordinal); under ``"skip"``
    the rest is reduced and the failed ordinals are listed.
    """
    if not header.present:
        return GroupVerdict(header, (), ())
    kept = tuple(i for i, s in enumerate(children) if s.present)
    broken = [
        i for i, s in enumerate(children) if s.outcome in (Outcome.FAILED, Outcome.SUPPRESSED)
    ]
    if not broken or on_child_failure == "skip":
        return GroupVerdict(None, kept, tuple(broken))
    first = min(broken, key=lambda i: (children[i].outcome is not Outcome.FAILED, i))
    cause = children[first]
    return GroupVerdict(Status(Outcome.SUPPRESSED, cause.cause, cause.stage), (), ())
