"""Helper actors the library starts (the coordinator, group holders) and how they survive faults.

Every helper is *named*, pinned to the driver's node, and restarted by Ray when its process dies
(``max_restarts=-1, max_task_retries=-1``). One killed for good is re-created under its name by the
driver's :class:`Supervisor`. A restarted helper starts empty: what it held is re-derived or re-run
by a repair pass. One unreachable for ``LINEAGE_DATA_HELPER_TIMEOUT_S`` (30 s) raises
:class:`HelperLostError`.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

import ray
from ray.exceptions import ActorDiedError, RayActorError, RayTaskError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from lineage_data._core.errors import HelperLostError, LineageError
from lineage_data._ray.compat import actor_ready


def helper_timeout_s() -> float:
    """Seconds a call may wait for an unreachable helper before the run fails."""
    return float(os.environ.get("LINEAGE_DATA_HELPER_TIMEOUT_S", "30"))


class Helper:
    """A picklable handle on one named helper actor; calls survive the actor's restart or re-creation.

    ``role`` names it in error messages (e.g. "coordinator"); ``handle`` is looked up by name when
    it fails.
    """

    # Set on the driver's handles by kill_all; never pickled (a worker's handle never stops a helper).
    stopped = False

    def __init__(self, name: str, namespace: str, role: str, handle: Any = None) -> None:
        self.name, self.namespace, self.role = name, namespace, role
        self._handle = handle

    def __getstate__(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k != "stopped"}

    def submit(self, method: str, *args: Any) -> Any:
        """Send a call; returns its ``ObjectRef`` (resolve it with :meth:`result`)."""
        if self._handle is None:
            try:
                self._handle = ray.get_actor(self.name, namespace=self.namespace)
            except ValueError:  # being replaced: let the caller's result() wait for it
                return None
        return getattr(self._handle, method).remote(*args)

    def result(self, ref: Any, method: str, *args: Any, stage: str | None = None) -> Any:
        """The value of ``ref`` (a call to ``method`` with ``args``), repeated on a live actor if needed."""
        if ref is not None:
            try:
                return ray.get(ref)
            except RayActorError:
                self._handle = None
        return self.call(method, *args, stage=stage)

    def call(self, method: str, *args: Any, stage: str | None = None) -> Any:
        """Call ``method`` and wait; re-resolve the actor by name while it is being replaced."""
        deadline = time.monotonic() + helper_timeout_s()
        delay = 0.05
        where = f"stage {stage!r}: " if stage else ""
        while True:
            if self.stopped:  # by its owner: waiting for it to come back would wait the timeout
                raise HelperLostError(f"{where}the lineage {self.role} ({self.name}) was stopped")
            try:
                if self._handle is None:
                    self._handle = ray.get_actor(self.name, namespace=self.namespace)
                return ray.get(getattr(self._handle, method).remote(*args))
            except RayTaskError as exc:
                if isinstance(exc.cause, LineageError):  # e.g. DuplicateRootError: as itself
                    raise exc.cause from None
                raise
            except (RayActorError, ValueError) as exc:  # ValueError: the replacement is not up yet
                if time.monotonic() > deadline:
                    raise HelperLostError(
                        f"{where}the lineage {self.role} ({self.name}) could not be reached for "
                        f"{helper_timeout_s():.0f}s: {type(exc).__name__}"
                    ) from None
                self._handle = None
                time.sleep(delay)
                delay = min(delay * 2, 1.0)


def start_helper(cls: Any, role: str, *args: Any, run_id: str, suffix: str) -> tuple[Helper, Any]:
    """Start one helper actor of class ``cls`` on the driver's node; returns (handle, restart)."""
    namespace = ray.get_runtime_context().namespace
    name = f"lineage-{run_id}-{suffix}"
    node_id = ray.get_runtime_context().get_node_id()

    def create() -> Any:
        return cls.options(
            name=name,
            namespace=namespace,
            max_restarts=-1,
            max_task_retries=-1,
            scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=node_id, soft=False),
        ).remote(*args)

    handle = create()
    return Helper(name, namespace, role, handle), create


def new_run_id() -> str:
    """A short id that makes one execution's actor names unique."""
    return uuid.uuid4().hex[:12]


class Supervisor(threading.Thread):
    """Driver-side thread: re-creates helpers killed for good and runs small periodic chores.

    An exception in a chore is kept in :attr:`error` for the driver to raise.
    """

    def __init__(self, tick_s: float = 0.5, check_every: int = 2) -> None:
        super().__init__(daemon=True, name="lineage-supervisor")
        self._helpers: list[tuple[Helper, Callable[[], Any]]] = []
        self._chores: list[Callable[[], None]] = []
        self._halt = threading.Event()
        self._stopping = threading.Lock()  # no helper is re-created once stop() returned
        self._tick = tick_s
        self._check_every = check_every
        self._pings: dict[str, Any] = {}  # helper name -> its ping in flight
        self.recreated = 0
        self.error: BaseException | None = None

    def watch(self, helper: Helper, create: Callable[[], Any]) -> None:
        """Re-create ``helper`` with ``create`` whenever it is found dead for good."""
        self._helpers.append((helper, create))

    def unwatch(self, helpers: Sequence[Helper]) -> None:
        """Stop re-creating ``helpers`` (their pass is over)."""
        names = {h.name for h in helpers}
        self._helpers = [(h, c) for h, c in self._helpers if h.name not in names]
        for name in names:
            self._pings.pop(name, None)

    def chore(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` every tick."""
        self._chores.append(fn)

    def run(self) -> None:
        ticks = 0
        while not self._halt.wait(self._tick):
            if not ray.is_initialized():
                return
            ticks += 1
            if ticks % self._check_every == 0:
                for helper, create in list(self._helpers):
                    self._check(helper, create)
            for fn in self._chores:
                try:
                    fn()
                except RayActorError:
                    pass  # the helper is being replaced: the next tick tries again
                except Exception as exc:  # noqa: BLE001 - handed to the driver
                    self.error = exc

    def _check(self, helper: Helper, create: Callable[[], Any]) -> None:
        """Re-create ``helper`` when it is dead for good.

        One ping per helper is in flight, never waited for (a waited ping cost ~2 CPU-s a run): a
        check reads the answer to the last one and sends the next.
        """
        ref = self._pings.pop(helper.name, None)
        if ref is not None:
            if not ray.wait([ref], timeout=0)[0]:  # restarting, or busy: look again next time
                self._pings[helper.name] = ref
                return
            try:
                ray.get(ref)
            except ActorDiedError:  # dead for good (a restart would have answered the ping)
                self._recreate(helper, create)
                return
            except Exception:  # noqa: BLE001 - unreachable for now: ping it again
                pass
        try:
            handle = helper._handle
            if handle is None:
                handle = ray.get_actor(helper.name, namespace=helper.namespace)
            self._pings[helper.name] = handle.ping.remote()
        except ValueError:  # no actor of that name: dead and gone
            self._recreate(helper, create)

    def _recreate(self, helper: Helper, create: Callable[[], Any]) -> None:
        with self._stopping:
            if self._halt.is_set():  # its owner is killing the helpers: a new one would outlive it
                return
            try:
                helper._handle = create()
                self.recreated += 1
            except ValueError:
                return  # the dead actor still holds the name; next tick

    def stop(self) -> None:
        """Stop the thread; returns once no helper can be re-created (the owner's kill finds all)."""
        with self._stopping:
            self._halt.set()


def kill_all(helpers: Sequence[Helper]) -> None:
    """Kill helpers for good, whatever handle is current.

    Each may finish starting first (5 s at most): killing a starting actor makes Ray log an error.
    """
    for helper in helpers:
        helper.stopped = True
    if not ray.is_initialized():  # a finalizer after ray.shutdown(): nothing left to stop
        return
    handles = []
    for helper in helpers:
        try:
            handles.append(ray.get_actor(helper.name, namespace=helper.namespace))
        except ValueError:
            continue
        except Exception:  # noqa: BLE001 - Ray is shutting down (a finalizer at exit): nothing to stop
            return
    if not handles:
        return
    ray.wait([actor_ready(h) for h in handles], num_returns=len(handles), timeout=5)
    for handle in handles:
        try:
            ray.kill(handle, no_restart=True)
        except (ValueError, RayActorError):
            continue
