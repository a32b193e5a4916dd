"""The stages' watchdog in a Ray worker process (see :mod:`lineage_data._core.guard`).

A call past its ``timeout_s`` ends its process (Ray retries the block); a hang in native code
holding Python's lock is ended by faulthandler's C-level timer, the backstop.
"""

from __future__ import annotations

import faulthandler
import functools
import os

from lineage_data._core.guard import Watchdog

TIMEOUT_EXIT_CODE = 124  # the exit status of a process ended by the watchdog (as timeout(1))


def _backstop(seconds: float | None) -> None:
    """Faulthandler's timer (one per process): end the process in ``seconds``; None cancels it."""
    if seconds is None:
        faulthandler.cancel_dump_traceback_later()
    else:
        faulthandler.dump_traceback_later(seconds, exit=True)


WATCHDOG = Watchdog(end=functools.partial(os._exit, TIMEOUT_EXIT_CODE), backstop=_backstop)
