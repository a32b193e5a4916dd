"""Inputs that crash or hang the process running a stage: fail that input, not the job.

A dead worker raises nothing and Ray retries its task on the same input without end. So each block an
operator runs is journaled in the coordinator first (one call per block, the previous block's end sent
with it): an attempt that began and never ended is a crash. A block that crashed or timed out is
isolated on its retry: its units (rows, parents, groups) run one at a time, alone in the process,
each journaled, so a death is pinned on the unit that was running; a unit that killed its process
``max_crash_retries + 1`` times (at least once alone) or hung ends FAILED without running again.
Deaths no unit owns are bounded too (:func:`doom_limit`, :func:`born`). The user-facing rules are in
docs/guide/fault-tolerance.md. Ray-free: the process is ended only through :class:`Watchdog`'s ``end``.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar, cast

from lineage_data._core import outcomes
from lineage_data._core.errors import WorkerCrashedError
from lineage_data._core.outcomes import Status
from lineage_data._core.state.protocols import Journal

R = TypeVar("R")

DEFAULT_MAX_CRASH_RETRIES = 2
_BACKSTOP_S = 10.0  # the backstop ends a process this long after a deadline its thread missed


_LIVES: dict[str, tuple[str, int]] = {}  # by stage: this actor's life's key, barren lives before it
_concurrent = False  # several operators of a stage run in this process at once (set_concurrent)


def set_concurrent() -> None:
    """Say that this process runs several operators of a stage at once (threads of one actor).

    Then each isolated unit's end is journaled at once, so a later crash in another thread is not
    pinned on it.
    """
    global _concurrent
    _concurrent = True


def doom_limit(max_crash_retries: int, units: int) -> int:
    """Deaths of one block, isolated or not, past which no unit of it is run again.

    More than the block needs when every death is pinned on a unit: more means deaths no unit owns.
    """
    retries = max_crash_retries + 1
    return retries * (units + 1) + units * max(1, max_crash_retries) + 1


def barren_limit(max_crash_retries: int) -> int:
    """Lives in a row an actor may end without finishing anything before its stage fails.

    Isolation starts after ``max_crash_retries + 1`` such lives and a unit alone fails after at most
    ``max_crash_retries`` more (at least one): a loop past this has a cause no unit owns.
    """
    return 2 * max_crash_retries + 3


def born(stage: str, journal: Journal, actor: str, max_crash_retries: int) -> int:
    """A life of pool actor ``actor`` begins in ``stage``: how many lives before it ended nothing.

    Called once per process start; the life is one journal attempt, ended by the first report of
    finished work. Raises :class:`WorkerCrashedError` past :func:`barren_limit` such lives in a row.
    """
    key = f"life of actor {actor}"
    barren = int(journal.attempt(stage, key, ())[0])
    if barren > barren_limit(max_crash_retries):
        raise WorkerCrashedError(
            f"stage {stage!r}: an actor died {barren} times in a row before it finished a block, "
            "and isolating its inputs did not stop it (a crash outside any one input)"
        )
    _LIVES[stage] = (key, barren)
    return barren


class _Gate:
    """User calls of the process's operators run together; an isolated unit runs alone.

    A readers-writer lock that prefers the writer: once a unit waits to run alone, no new call starts.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._shared = 0
        self._alone = False
        self._waiting = 0

    @contextlib.contextmanager
    def shared(self) -> Iterator[None]:
        with self._cond:
            while self._alone or self._waiting:
                self._cond.wait()
            self._shared += 1
        try:
            yield
        finally:
            with self._cond:
                self._shared -= 1
                self._cond.notify_all()

    @contextlib.contextmanager
    def alone(self) -> Iterator[None]:
        with self._cond:
            self._waiting += 1
            while self._alone or self._shared:
                self._cond.wait()
            self._waiting -= 1
            self._alone = True
        try:
            yield
        finally:
            with self._cond:
                self._alone = False
                self._cond.notify_all()


_GATE = _Gate()


def unit_key(root: str, path: Sequence[int] | None) -> str:
    """The journal's name for one unit (a row, a parent, a group): its root and path."""
    return root + "\x1f" + ",".join(map(str, path or ()))


def block_key(n: int, first: str, last: str) -> str:
    """The journal's name for a block of ``n`` units: the same on every retry of the block."""
    return f"#{n}\x1d{first}\x1d{last}"


class Guard:
    """The crash journal and the watchdog of one stage's operator, in one worker process.

    Per block: ``whole = guard.block(n, first_key, last_key)``; if ``whole``, run its units with
    ``guard.call``; else for each unit (the :meth:`suspects` first), inside ``with guard.alone():``,
    ``status = guard.unit(key)``: a FAILED status (do not run it), or None: run it with
    ``guard.call``, then ``guard.done(key)``. ``guard.done_block()`` when the block is through.
    """

    def __init__(
        self,
        stage: str,
        journal: Journal | None,
        *,
        max_crash_retries: int = DEFAULT_MAX_CRASH_RETRIES,
        timeout_s: float | None = None,
        watchdog: Watchdog | None = None,
    ) -> None:
        self._stage = stage
        # Without a journal (None, or a stand-in that keeps none) nothing is isolated, and no timeout
        # is enforced: its retry could then never end. A flat plan journals on each node (TypeStore).
        # The journal is read only once block() isolates, or under a timeout: both need it.
        self._active = isinstance(journal, Journal)
        self._journal = cast(Journal, journal)
        self._max = max_crash_retries
        self._watchdog = watchdog if self._active else None
        self._timeout = timeout_s if self._watchdog is not None else None
        self._limit = timeout_s
        self._ended: list[str] = []  # finished keys, reported with the next attempt
        self._block: str | None = None
        self._current: str | None = None  # the key a user call runs under (for the watchdog)
        self._rest: str | None = None  # the rows of an isolated block run together (see batch)
        self._alone = False  # inside alone(): this guard's thread runs alone in the process
        self._isolated = False  # the current block's units run one by one
        self._doomed = 0  # deaths of the current block past doom_limit: its units are failed
        self._block_crashes = 0  # deaths of the current block before this attempt

    @classmethod
    def of(cls, stage: Any, journal: Journal | None, *, watchdog: Watchdog | None) -> Guard:
        """The guard of ``stage`` (any :class:`~lineage_data._core.stages.Stage`)."""
        return cls(
            stage.name,
            journal,
            max_crash_retries=stage.max_crash_retries,
            timeout_s=stage.timeout_s,
            watchdog=watchdog,
        )

    @property
    def active(self) -> bool:
        """Whether blocks are journaled (False for a client that keeps no journal)."""
        return self._active

    def _attempt(self, key: str | None) -> tuple[int, int]:
        ended, self._ended = self._ended, []
        if ended and (life := _LIVES.pop(self._stage, None)) is not None:
            life_key, barren = life  # finished work reached the journal: forget the barren lives
            ended += [life_key] * (barren + 1)
        crashes, timeouts = self._journal.attempt(self._stage, key, ended)
        return int(crashes), int(timeouts)

    def _barren(self) -> bool:
        """This actor's earlier lives died more than ``max_crash_retries`` times in a row idle."""
        life = _LIVES.get(self._stage)
        return life is not None and life[1] > self._max

    def block(self, n: int, first: str, last: str) -> bool:
        """Begin a block of ``n`` units: True to run it whole, False to isolate its units."""
        if not self._active:
            return True
        key = block_key(n, first, last)
        crashes, timeouts = self._attempt(key)
        self._block = self._current = key
        self._block_crashes = crashes
        self._isolated = crashes > 0 or bool(timeouts) or self._barren()
        self._doomed = crashes if crashes > doom_limit(self._max, n) else 0
        return not self._isolated

    def batch(self, n: int, first: str, last: str) -> bool:
        """Begin the rows of an isolated block that are not suspects, as one call: False to not."""
        if self._doomed:
            return False
        key = "rest" + block_key(n, first, last)
        crashes, timeouts = self._attempt(key)
        self._current = self._rest = key
        return not (crashes or timeouts)

    def done_batch(self) -> None:
        """The rows begun with :meth:`batch` are through."""
        if self._rest is not None:
            self._ended.append(self._rest)
            self._rest = None
        self._current = self._block

    def unit(self, key: str) -> Status | None:
        """Begin one unit of an isolated block: its FAILED status, or None to run it."""
        if self._doomed:
            cause = (
                f"stage {self._stage!r}: the worker died {self._doomed} times on the block holding "
                "this input, and no one input of it was seen dying alone (a crash that comes after "
                "its input's call returned, or outside any call)"
            )
            return outcomes.from_exception(WorkerCrashedError(cause), self._stage)
        crashes, timeouts = self._attempt(key)
        self._current = key
        if timeouts:
            self._ended.append(key)
            cause = f"stage {self._stage!r}: no result in {self._limit:g} s"
            return outcomes.from_exception(TimeoutError(cause), self._stage)
        # The block's first death counts for each of its units (later ones are the units' own):
        # a unit fails after max_crash_retries + 1 deaths in all, at least one alone.
        whole = 1 if self._block_crashes else 0
        if crashes >= max(1, self._max + 1 - whole):
            self._ended.append(key)
            total = crashes + whole
            why = self._journal.why_crashed(self._stage, key) or (
                "a native crash or abort, os._exit, or an out-of-memory kill"
            )
            cause = f"stage {self._stage!r}: the worker died {total} times on this input ({why})"
            return outcomes.from_exception(WorkerCrashedError(cause), self._stage)
        return None

    def suspects(self, keys: Sequence[str]) -> set[str]:
        """Units of an isolated block that an earlier attempt crashed or hung on (run them first)."""
        return set(self._journal.suspects(self._stage, list(keys))) if keys else set()

    def done(self, key: str) -> None:
        """A unit of an isolated block is through."""
        self._ended.append(key)
        self._current = self._block

    @contextlib.contextmanager
    def alone(self) -> Iterator[None]:
        """Run one unit of an isolated block alone in this process (see the module's docstring)."""
        if not self._active:
            yield
            return
        with _GATE.alone():
            self._alone = True
            try:
                yield
            finally:
                self._alone = False
                if _concurrent and self._ended:
                    self._attempt(None)

    def done_block(self) -> None:
        """The block is through (its end goes with the next attempt of this process).

        An isolated block's unit ends are told at once (a unit left pending would read as its crash)
        and its own end never: a death before Ray has its output still counts toward :func:`doom_limit`.
        """
        if self._block is not None and not self._isolated:
            self._ended.append(self._block)
        if self._isolated and self._ended:
            self._attempt(None)
        self._block = self._current = None
        self._isolated = False
        self._doomed = 0

    def call(self, fn: Callable[..., R], *args: Any) -> R:
        """``fn(*args)`` under the stage's timeout (none in-process or without ``timeout_s``)."""
        with contextlib.nullcontext() if self._alone else _GATE.shared():
            if self._timeout is None:
                return fn(*args)
            self.tick()
            try:
                return fn(*args)
            finally:
                self.pause()

    def tick(self) -> None:
        """Start the clock (again): a call, or an expansion's wait for its next child, from here."""
        if self._timeout is not None and self._watchdog is not None:
            key = self._current or ""
            self._watchdog.arm(self._timeout, lambda: self._journal.hung(self._stage, key))

    def pause(self) -> None:
        """Stop the clock (an expansion hands a block downstream, where it may wait for room)."""
        if self._timeout is not None and self._watchdog is not None:
            self._watchdog.disarm()


class Watchdog:
    """One thread per process: ends the process when a deadline armed by any thread passes.

    ``end()`` ends the process now; ``backstop(s)`` sets a timer below Python that ends it in ``s``
    seconds (``None`` cancels it), for a hang that holds the GIL. Both are the worker's.
    """

    def __init__(
        self, *, end: Callable[[], object], backstop: Callable[[float | None], object]
    ) -> None:
        self._end = end
        self._set_backstop = backstop
        self._cond = threading.Condition()
        self._armed: dict[int, tuple[float, Callable[[], Any]]] = {}  # by thread id
        self._thread: threading.Thread | None = None
        self._backstop_at: float | None = None  # when faulthandler's timer fires (monotonic)

    def arm(self, seconds: float, on_expire: Callable[[], Any]) -> None:
        """This thread's deadline: in ``seconds``, ``on_expire()`` then the end of the process."""
        with self._cond:
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="lineage-watchdog", daemon=True
                )
                self._thread.start()
            self._armed[threading.get_ident()] = (time.monotonic() + seconds, on_expire)
            self._backstop()
            self._cond.notify()

    def disarm(self) -> None:
        """This thread has no deadline."""
        with self._cond:
            self._armed.pop(threading.get_ident(), None)
            self._backstop()

    def _backstop(self) -> None:
        """The process's one backstop timer, after the latest deadline.

        Set ``_BACKSTOP_S`` beyond what is needed and moved only when a deadline passes that: setting
        it may start a thread, and an expansion ticks once per child.
        """
        if not self._armed:
            if self._backstop_at is not None:
                self._set_backstop(None)
                self._backstop_at = None
            return
        latest = max(deadline for deadline, _ in self._armed.values())
        if self._backstop_at is not None and latest + _BACKSTOP_S <= self._backstop_at:
            return  # the timer already fires late enough
        now = time.monotonic()
        self._backstop_at = latest + 2 * _BACKSTOP_S
        self._set_backstop(self._backstop_at - now)

    def _run(self) -> None:
        while True:
            with self._cond:
                while True:
                    now = time.monotonic()
                    first = min(self._armed.values(), default=None, key=lambda a: a[0])
                    if first is not None and now >= first[0]:
                        break
                    self._cond.wait(None if first is None else first[0] - now)
                on_expire = first[1]
            try:
                on_expire()  # journal the timeout, so the retry fails the unit
            finally:
                self._end()
