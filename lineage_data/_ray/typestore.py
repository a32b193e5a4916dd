"""Run-wide column types without a coordinator: Ray's own key-value store, first writer wins.

A flat plan (every stage a source-level 1:1 stage, :attr:`Plan.flat`) has no barrier and no partial
group, so it runs without a coordinator. Its stages still establish their column types run-wide
(:class:`~lineage_data._core.columns.EstablishedTypes`): here in the GCS key-value store every Ray
process already talks to, with a put that never overwrites.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import os
import shutil
import tempfile
import threading
from collections.abc import Sequence

from lineage_data._core.state import StageClient
from lineage_data._ray.compat import kv_delete_prefix, kv_get, kv_multi_get, kv_put_new
from lineage_data._ray.deaths import this_worker, why_died

_NAMESPACE = "lineage_data"
_SEP = "\x1f"


class TypeStore(StageClient):
    """A flat plan's picklable :class:`StageClient`: types in the GCS, the journal on each node."""

    def __init__(self, run_id: str) -> None:
        self.name = f"lineage-{run_id}-types"
        self._run_id = run_id

    def for_stage(self, stage: str) -> TypeStore:
        """The same store (stages are named in each call)."""
        return self

    def establish_types(self, stage: str, types: dict[str, str]) -> dict[str, str]:
        """First writer wins: one read for all the columns, then a put-if-absent for each new one."""
        keys = {column: _SEP.join((self._run_id, stage, column)).encode() for column in types}
        known = _read_all(list(keys.values()))
        out = {}
        for column, token in types.items():
            key = keys[column]
            first = known.get(key)
            if first is None and kv_put_new(key, token, _NAMESPACE):  # another was first after all
                first = kv_get(key, _NAMESPACE)
            out[column] = first.decode() if first is not None else token
        return out

    def note_columns(self, stage: str, names: Sequence[str]) -> None:
        """Nothing to keep: a flat plan has no reduce, so no empty group asks for its columns."""

    def attempt(self, stage: str, key: str | None, ended: Sequence[str] = ()) -> tuple[int, int]:
        """The journal's ``attempt``, on this node."""
        return _journal(self._run_id).attempt(stage, key, ended)

    def hung(self, stage: str, key: str) -> None:
        """The journal's ``hung``, on this node."""
        _journal(self._run_id).hung(stage, key)

    def suspects(self, stage: str, keys: Sequence[str]) -> list[str]:
        """The journal's ``suspects``, on this node."""
        return _journal(self._run_id).suspects(stage, keys)

    def why_crashed(self, stage: str, key: str) -> str | None:
        """Why the processes that ran ``key`` before on this node died, as far as Ray can tell."""
        return why_died(_journal(self._run_id).crashed_by(stage, key))

    def drop(self) -> None:
        """Forget the run's types and this node's journal (its pass is over)."""
        shutil.rmtree(_journal_dir(self._run_id), ignore_errors=True)
        kv_delete_prefix(self._run_id + _SEP, _NAMESPACE)


def _read_all(keys: list[bytes]) -> dict[bytes, bytes]:
    """The values of those ``keys`` that have one (a test counts the calls)."""
    return kv_multi_get(keys, _NAMESPACE)


# -- the crash journal of a flat plan ------------------------------------------------------------


def _journal_dir(run_id: str) -> str:
    return os.path.join(tempfile.gettempdir(), "lineage-data-journal", run_id)


class _NodeJournal:
    """A flat plan's attempt journal, in files on this node: a directory per (stage, key), a file each.

    ~0.1 ms an attempt, where a GCS round trip per block is what a flat plan avoids. A file left
    behind is an attempt whose process died. A retry on another node starts counting there, so a
    crashing input costs at most ``max_crash_retries + 1`` deaths per node (bounded, not global).
    """

    def __init__(self, root: str) -> None:
        self._root = root
        self._mine: dict[tuple[str, str], list[str]] = {}  # this process's open attempt files
        self._seq = itertools.count()
        self._lock = threading.Lock()

    def _dir(self, stage: str, key: str) -> str:
        name = hashlib.blake2b(f"{stage}\x1f{key}".encode(), digest_size=16).hexdigest()
        return os.path.join(self._root, name)

    def attempt(self, stage: str, key: str | None, ended: Sequence[str]) -> tuple[int, int]:
        with self._lock:
            for name in ended:
                # ending a key this process holds no attempt on forgets one a dead process left
                # (as AttemptJournal counts ends): see lineage_data._core.guard.born
                mine = self._mine.pop((stage, name), None) or self._left_behind(stage, name)[:1]
                for path in mine:
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(path)
            if key is None:
                return 0, 0
            directory = self._dir(stage, key)
            os.makedirs(directory, exist_ok=True)
            entries = os.listdir(directory)
            crashes = sum(e.startswith("a-") for e in entries)
            timeouts = sum(e.startswith("t-") for e in entries)
            # a dead process's file may carry a reused pid; the Ray worker tells why it died
            name = f"a-{os.getpid()}-{next(self._seq)}-{os.urandom(4).hex()}-{this_worker()}"
            path = os.path.join(directory, name)
            with open(path, "x"):
                pass
            self._mine.setdefault((stage, key), []).append(path)
            return crashes, timeouts

    def _entries(self, stage: str, key: str) -> list[str]:
        """The files of ``key``'s directory, sorted (none before its first attempt)."""
        try:
            return sorted(os.listdir(self._dir(stage, key)))
        except FileNotFoundError:
            return []

    def _left_behind(self, stage: str, key: str) -> list[str]:
        directory = self._dir(stage, key)
        return [os.path.join(directory, e) for e in self._entries(stage, key) if e.startswith("a-")]

    def suspects(self, stage: str, keys: Sequence[str]) -> list[str]:
        """Those of ``keys`` with an attempt left behind (crashed) or a timeout, on this node."""
        with self._lock:
            mine = {os.path.basename(p) for paths in self._mine.values() for p in paths}
        out = []
        for key in keys:
            entries = self._entries(stage, key)
            if any(e.startswith("t-") or (e.startswith("a-") and e not in mine) for e in entries):
                out.append(key)
        return out

    def crashed_by(self, stage: str, key: str) -> list[str]:
        """The Ray workers whose attempts on ``key`` never ended (not this process's own)."""
        with self._lock:
            mine = {os.path.basename(p) for p in self._mine.get((stage, key), [])}
            entries = self._entries(stage, key)
        return [e.rsplit("-", 1)[1] for e in entries if e.startswith("a-") and e not in mine]

    def hung(self, stage: str, key: str) -> None:
        directory = self._dir(stage, key)
        os.makedirs(directory, exist_ok=True)
        with open(os.path.join(directory, f"t-{os.getpid()}-{os.urandom(8).hex()}"), "w"):
            pass


_journals: dict[str, _NodeJournal] = {}


def _journal(run_id: str) -> _NodeJournal:
    journal = _journals.get(run_id)
    if journal is None:
        journal = _journals.setdefault(run_id, _NodeJournal(_journal_dir(run_id)))
    return journal
