"""Group holders: hash-partitioned actors that keep the partial groups of a plan's reduce stages.

A reduce task reduces the parents its batch completes and sends the rows of unfinished groups here,
one call per holder; a holder answers with the groups those rows complete. A plan's reduce stages
share its holders (a buffer per stage): each holder is a worker process whose Ray runtime costs CPU
all run long (bench/README, "The CPU, accounted"). A holder keeps each group it handed out until the
driver reports the parent delivered, so a retried reduce task gets it again. Holders are
:mod:`helpers <lineage_data._ray.actors>`; the groups a dead one held are re-run by the repair pass.
"""

from __future__ import annotations

import zlib
from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Any

import ray

from lineage_data._core.reduce import Group, GroupBuffer, GroupKey, group_key
from lineage_data._ray.actors import Helper, start_helper

# One holder per this many cluster CPUs (1..MAX_HOLDERS): on a small machine each one more worker
# process delays the first GPU batch; on a cluster they spread the load.
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
    """Start a plan's holders on the driver's node; per holder, ``(helper, re-create)``."""
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
