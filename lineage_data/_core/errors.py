"""The exception tree: one root, :class:`LineageError`, and a few leaves."""

from __future__ import annotations


class LineageError(Exception):
    """Root of every error raised by lineage_data."""


class PlanError(LineageError):
    """The plan is invalid; raised while it is built, before anything runs."""


class ContractError(LineageError):
    """A user function broke the 1:1 row contract of a stage. Never retried."""


class UserCodeError(LineageError):
    """A user function raised; the original exception is kept as ``__cause__``."""


class StageFailedError(LineageError):
    """A stage cannot go on for any input (its model server cannot be reached, refuses the key).

    Raised by a stage's own code (the connectors do) to stop the run instead of failing every row
    one by one; the run raises it with the stage's name in the message. Never retried per row.
    """


class FencingError(LineageError):
    """A report conflicts with a fact already committed for the same work unit."""


class DuplicateRootError(LineageError):
    """Two source rows share one lineage root id."""


class WorkerCrashedError(LineageError):
    """The process running a stage died every time it ran one input (a native crash, an OOM kill).

    The cause of that input's FAILED row (see :mod:`lineage_data._core.guard`); a constructor that
    crashes every time raises it for the stage instead.
    """


class AccountingError(LineageError):
    """At the end of a run, a source root did not reach exactly one terminal row."""


def describe(exc: BaseException) -> str:
    """The cause string kept for a failed row: ``"Type: message"``.

    >>> describe(ValueError("bad page"))
    'ValueError: bad page'
    """
    message = str(exc)
    name = type(exc).__name__
    return f"{name}: {message}" if message else name


class HelperLostError(LineageError):
    """A helper actor of the library (coordinator, group holder) could not be reached in time.

    Raised when a fault cannot be survived (e.g. the cluster the driver was attached to is gone); the
    message names the stage that needed the helper.
    """


class ExecutionError(LineageError):
    """The Ray execution failed for a reason outside user code; the message names the stage."""
