"""The core's exceptions (defined in :mod:`lineage_data.exceptions`) and :func:`describe`."""

from __future__ import annotations

from lineage_data.exceptions import (
    AccountingError,
    ContractError,
    DuplicateRootError,
    ExecutionError,
    FencingError,
    HelperLostError,
    LineageError,
    PlanError,
    StageFailedError,
    UserCodeError,
    WorkerCrashedError,
)

__all__ = [
    "AccountingError",
    "ContractError",
    "DuplicateRootError",
    "ExecutionError",
    "FencingError",
    "HelperLostError",
    "LineageError",
    "PlanError",
    "StageFailedError",
    "UserCodeError",
    "WorkerCrashedError",
    "describe",
]


def describe(exc: BaseException) -> str:
    """The cause string kept for a failed row: ``"Type: message"``.

    >>> describe(ValueError("bad page"))
    'ValueError: bad page'
    """
    message = str(exc)
    name = type(exc).__name__
    return f"{name}: {message}" if message else name
