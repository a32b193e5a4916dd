"""Every public exception of lineage_data and its connectors, in one place.

One root, :class:`LineageError`, catches whatever the library raises on purpose; the leaf says why.
The classes are also importable from where they are used (the same objects). This module imports
only the standard library, so the Ray-free core can raise these:

    >>> from lineage_data.exceptions import CorruptInputError, LineageError
    >>> issubclass(CorruptInputError, LineageError)
    True
"""

from __future__ import annotations

from typing import Self

__all__ = [
    "AccountingError",
    "ConnectorError",
    "ContractError",
    "CorruptInputError",
    "DuplicateRootError",
    "EmptyInputError",
    "EncryptedInputError",
    "ExecutionError",
    "FencingError",
    "HelperLostError",
    "LineageError",
    "OversizedInputError",
    "PlanError",
    "RayCompatError",
    "S3AccessError",
    "S3BucketNotFoundError",
    "S3ConnectionError",
    "ShardError",
    "StageFailedError",
    "TruncatedInputError",
    "UnsupportedInputError",
    "UserCodeError",
    "WorkerCrashedError",
]


class LineageError(Exception):
    """Root of every error raised by lineage_data."""


# -- the plan and the run ------------------------------------------------------------------------


class PlanError(LineageError):
    """The plan is invalid; raised while it is built, before anything runs."""


class ContractError(LineageError):
    """A user function broke the 1:1 row contract of a stage. Never retried."""


class UserCodeError(LineageError):
    """A user function raised; the original exception is kept as ``__cause__``."""


class StageFailedError(LineageError):
    """A stage cannot go on for any input (its model server cannot be reached, refuses the key).

    Raised by a stage's own code to stop the run instead of failing every row one by one; the run
    raises it with the stage's name in the message.
    """


class FencingError(LineageError):
    """A report conflicts with a fact already committed for the same work unit."""


class DuplicateRootError(LineageError):
    """Two source rows share one lineage root id."""


class WorkerCrashedError(LineageError):
    """The process running a stage died every time it ran one input (a native crash, an OOM kill).

    The cause of that input's FAILED row; a constructor that crashes every time raises it instead.
    """


class AccountingError(LineageError):
    """At the end of a run, a source root did not reach exactly one terminal row."""


class HelperLostError(LineageError):
    """A helper actor of the library (coordinator, group holder) could not be reached in time.

    Raised when a fault cannot be survived (e.g. the cluster is gone); names the stage that needed it.
    """


class ExecutionError(LineageError):
    """The Ray execution failed for a reason outside user code; the message names the stage."""


class RayCompatError(LineageError):
    """A private Ray symbol the library relies on is gone or changed (a Ray upgrade).

    The message names it and the Ray release it was written against (see ``_ray/compat.py``).
    """


# -- storage (lineage_data.storage) --------------------------------------------------------------


class S3AccessError(LineageError, PermissionError):
    """S3 refused the request (bad or missing credentials, no permission); names endpoint and bucket."""


class S3BucketNotFoundError(LineageError, FileNotFoundError):
    """The bucket does not exist at the endpoint."""


class S3ConnectionError(LineageError, ConnectionError):
    """The S3 endpoint cannot be reached at all."""


# -- connectors: inputs a format connector rejects (lineage_data.connectors.errors) ---------------


class ConnectorError(LineageError):
    """Root of the connector errors: an input a connector cannot turn into rows."""

    @classmethod
    def for_input(cls, name: str, cause: str) -> Self:
        """The error (to raise) with the standard ``"<name>: <cause>"`` message.

        ``name`` usually comes from :func:`lineage_data.connectors.errors.input_name`.
        """
        return cls(f"{name}: {cause}")


class CorruptInputError(ConnectorError):
    """The input has the right type but its structure cannot be parsed or decoded."""


class EncryptedInputError(ConnectorError):
    """The input is encrypted (e.g. a PDF that needs a password) and cannot be read without it."""


class EmptyInputError(ConnectorError):
    """The input has no content: zero bytes, a PDF with zero pages, a video with no frames."""


class UnsupportedInputError(ConnectorError):
    """The input is of the wrong type for this connector (e.g. a PNG handed to the PDF reader)."""


class OversizedInputError(ConnectorError):
    """The input exceeds a configured cap (bytes, pages, seconds, frames)."""


class TruncatedInputError(ConnectorError):
    """The input ends early: its container says more data follows than the bytes hold."""


# -- shards (lineage_data.connectors.shards) -----------------------------------------------------


class ShardError(LineageError):
    """The shard directory cannot be used as asked (e.g. it holds shards and resume is off)."""
