"""Group holders: hash-partitioned actors that keep the partial groups of a plan's reduce stages.

A reduce task reduces the parents its batch completes by itself and sends the rows of unfinished
groups here, one call per holder per batch; a holder answers with the groups those rows complete, and
the calling task reduces them. Parents never wait for one global reducer, and the holders scale out.
The reduce stages of one plan share its holders (each holder keeps one buffer per stage): every holder
is a worker process, whose Ray runtime costs CPU the whole run even while it waits (measured in
bench/README, "The CPU, accounted"), so a two-reduce plan does not start twice as many.

Faults: a holder keeps each group it handed out until the driver reports the parent delivered, so a
reduce task that is retried after the hand-off gets the group again. Holders are helpers
(:mod:`lineage_data._ray.actors`): pinned to the driver's node, restarted or re-created when they die;
the partial groups a dead holder held are re-run by the driver's repair pass.
"""

from __future__ import annotations

import zlib
from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Any

import ray

from lineage_data._core.reduce import Group, GroupBuffer, GroupKey, group_key
from lineage_data._ray.actors import Helper, start_helper

# One holder per this many cluster CPUs (at least one, at most MAX_HOLDERS): each holder is one more worker
# process to start, which on a small machine delays the first GPU batch; on a cluster they spread the load.
CPUS_PER_HOLDER = 16
MAX_HOLDERS = 16


@ray.remote(num_cpus=0)
class GroupHolder:
    """One partition of the partial groups of every reduce stage of a plan (a buffer per stage)."""

    def __init__(self) -> None:
        self._buffers: dict[str, GroupBuffer] = defaultdict(GroupBuffer)

    def ping(self) -> bool:
        """Liveness check."""
        return True

    def add(self, stage: str, rows: list[dict]) -> list[tuple[GroupKey, Group]]:
        """Take rows of ``stage``; return the groups they complete (or completed before: a retry)."""
        return self._buffers[stage].add(rows)

    def forget(self, roots: list[str]) -> None:
        """Roots the consumer received: their handed-out groups are no longer needed."""
        for buffer in self._buffers.values():
            buffer.forget(roots)


def start_holders(run_id: str, count: int | None = None) -> list[tuple[Helper, Callable[[], Any]]]:
    """Start a plan's ``count`` holders (default: one per 16 cluster CPUs, 1..16) on the driver's node.

    Returns, per holder, ``(helper, re-create)`` for the supervisor.
    """
    if count is None:
        cpus = int(ray.cluster_resources().get("CPU", 1))
        count = max(1, min(MAX_HOLDERS, cpus // CPUS_PER_HOLDER))
    return [
        start_helper(GroupHolder, f"group holder {i}", run_id=run_id, suffix=f"holder-{i}")
        for i in range(count)
    ]


class HolderSet:
    """The plan's holders as one reduce stage's tasks see them. Picklable."""

    def __init__(self, helpers: Sequence[Helper], stage: str) -> None:
        self.helpers = list(helpers)
        self.stage = stage

    def add(self, rows: Sequence[dict]) -> list[tuple[GroupKey, Group]]:
        """Send each row to its parent's holder (one call per holder); return the completed groups."""
        parts: dict[int, list[dict]] = defaultdict(list)
        for row in rows:
            root, path = group_key(row)
            parts[zlib.crc32(f"{root}\x00{path}".encode()) % len(self.helpers)].append(row)
        stage = self.stage
        calls = [(i, part, self.helpers[i].submit("add", stage, part)) for i, part in parts.items()]
        done = []
        for i, part, ref in calls:
            done.extend(self.helpers[i].result(ref, "add", stage, part, stage=stage))
        return done
