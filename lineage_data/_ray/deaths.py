"""Why a Ray worker process died: what a crash cause can say beyond "the worker died".

Ray's worker table says only "unexpectedly exits" for a signal, but marks workers its memory monitor
killed ``NODE_OUT_OF_MEMORY``, and faulthandler writes ``Fatal Python error: ...`` to a worker's
``.err`` log on its node. :func:`why_died` reads both, once per failed input.
"""

from __future__ import annotations

import faulthandler
import glob
import os
import re
from collections.abc import Sequence
from typing import Any

import ray

from lineage_data._ray.compat import node_logs_dir, workers_killed_for_memory

_FATAL = re.compile(rb"Fatal Python error: ([^\n]{1,80})")
_TAIL_BYTES = 64 * 1024  # the end of a worker's log holds its last words
_OUT_OF_MEMORY = "killed by Ray's memory monitor: the node ran out of memory"


def this_worker() -> str:
    """This process's Ray worker id (hex), or its pid outside a Ray worker.

    The first call in a Ray worker also points faulthandler at a file of its own (see
    :func:`_keep_last_words`): a process that records an attempt is one whose death is asked about.
    """
    try:
        worker = ray.get_runtime_context().get_worker_id()
    except Exception:  # noqa: BLE001 - not connected to Ray: the pid still names the process
        return f"pid{os.getpid()}"
    if not _LAST_WORDS:
        _keep_last_words(worker)
    return worker


# this process's faulthandler file, kept open for the process's life (empty: not tried yet)
_LAST_WORDS: list[Any] = []


def _keep_last_words(worker: str) -> None:
    """Have faulthandler write a fatal error to ``lineage-data-<worker>.err`` in the node's logs.

    Ray pipes a worker's stderr into its ``.err`` log through a thread of the same process, so the
    "Fatal Python error" line of a crash is lost when the process dies before that thread copies it
    (seen under load). faulthandler writes its own file from the signal handler: nothing is lost.
    """
    _LAST_WORDS.append(None)  # tried once per process
    logs = node_logs_dir(workers_only=True)
    if logs is None:
        return
    try:
        file = open(os.path.join(logs, f"lineage-data-{worker}.err"), "ab")  # noqa: SIM115 - kept open
        faulthandler.enable(file=file, all_threads=False)
    except (OSError, ValueError, RuntimeError):
        return
    _LAST_WORDS[0] = file


def why_died(workers: Sequence[str]) -> str | None:
    """The reason the newest of ``workers`` that left one died, or None when none did."""
    if not workers:
        return None
    try:
        oom = workers_killed_for_memory(set(workers))
    except Exception:  # noqa: BLE001 - a cause is a courtesy: never fail the input over it
        oom = set()
    for worker in reversed(workers):
        said = _OUT_OF_MEMORY if worker in oom else _last_words(worker)
        if said is not None:
            return said
    return None


def _last_words(worker: str) -> str | None:
    """The fatal error faulthandler wrote to the worker's log on this node, if it is here."""
    logs = node_logs_dir()
    if logs is None:
        return None
    ours = os.path.join(logs, f"lineage-data-{worker}.err")
    for path in [ours, *glob.glob(os.path.join(logs, f"worker-{glob.escape(worker)}-*.err"))]:
        try:
            with open(path, "rb") as f:
                f.seek(max(0, os.path.getsize(path) - _TAIL_BYTES))
                found = _FATAL.findall(f.read())
        except OSError:
            continue
        if found:
            return found[-1].decode(errors="replace").strip()
    return None
