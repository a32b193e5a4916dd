"""The ``ray::`` processes of this driver's Ray instance, and how to kill one (fault injection).

Shared by ``python -m bench faults`` and ``tests/faults``: only processes below this driver's own
raylet(s) are ever listed, so other Ray instances on the machine are never touched.
"""

from __future__ import annotations

import os
import signal

import psutil

# Ray's own processes and actors (Ray core, Ray Data), never the library's helpers or user work. Killing
# an agent takes its whole node down, which no library can survive.
RAY_INTERNAL = (
    "IDLE",
    "DashboardAgent",
    "RuntimeEnvAgent",
    "_StatsActor",
    "StatsActor",
    "_StatsSummaryActor",
    "_MemActor",
    "AutoscalingRequester",
    "_AutoscalingCoordinatorActor",
    "AutoscalingCoordinator",
    "SplitCoordinator",
    "ActorLocationTracker",
    "ShuffleFileServer",
    "HashShuffleAggregator",
    "HashShuffleActor",
    "GPUShuffleActor",
    "GPUHashAggregateActor",
    "_BlockPretcher",
    "_RandomAccessWorker",
)


def title(proc: psutil.Process) -> str:
    """The process title (Ray sets it to ``ray::<what it runs>``)."""
    return " ".join(proc.cmdline()).strip()


def raylets(root: psutil.Process | None = None) -> list[psutil.Process]:
    """The raylet processes started below ``root`` (default: this driver)."""
    root = root or psutil.Process()
    found = []
    for proc in root.children(recursive=True):
        try:
            if proc.name() == "raylet":
                found.append(proc)
        except psutil.Error:
            pass
    return found


def ray_workers(raylet_procs: list[psutil.Process] | None = None) -> dict[int, str]:
    """``pid -> title`` of every ``ray::`` process below the given raylets (default: ours)."""
    out: dict[int, str] = {}
    for raylet in raylet_procs if raylet_procs is not None else raylets():
        try:
            children = raylet.children(recursive=True)
        except psutil.Error:
            continue
        for proc in children:
            try:
                name = title(proc)
            except psutil.Error:
                continue
            if name.startswith("ray::"):
                out[proc.pid] = name
    return out


def is_internal(name: str) -> bool:
    """A Ray-internal or idle process title (never a target of the random kills)."""
    name = name.removeprefix("ray::")
    return any(name == n or name.startswith((n + ".", n + " ")) for n in RAY_INTERNAL)


def sigkill(pid: int, timeout: float = 10.0) -> bool:
    """SIGKILL ``pid`` and wait until it is gone; True when it was alive and is now dead."""
    try:
        proc = psutil.Process(pid)
        os.kill(pid, signal.SIGKILL)
    except (psutil.NoSuchProcess, ProcessLookupError):
        return False
    try:
        proc.wait(timeout=timeout)
    except psutil.TimeoutExpired:
        return False
    except psutil.NoSuchProcess:
        pass
    return True
