"""The core's exceptions (defined in :mod:`lineage_data.exceptions`) and :func:`describe`."""

from __future__ import annotations

from lineage_data import exceptions

# Every public exception, re-exported: the core imports the ones it raises from here.
from lineage_data.exceptions import *  # noqa: F403

__all__ = [*exceptions.__all__, "describe"]


def describe(exc: BaseException) -> str:
    """The cause string kept for a failed row: ``"Type: message"``."""
    message = str(exc)
    name = type(exc).__name__
    return f"{name}: {message}" if message else name
