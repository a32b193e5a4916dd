"""Group holders: hash-partitioned actors that keep the partial groups of one reduce stage.

A reduce task reduces the parents its batch completes by itself and sends the rows of unfinished
groups here, one call per holder per batch; a holder answers with the groups those rows complete, and
the calling task reduces them. Parents never wait for one global reducer, and the holders scale out.
"""

from __future__ import annotations

import zlib
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import ray

from lineage_data._core.reduce import Group, GroupBuffer, GroupKey, group_key

# One holder per this many cluster CPUs (at least one, at most MAX_HOLDERS): each holder is one more worker
# process to start, which on a small machine delays the first GPU batch; on a cluster they spread the load.
CPUS_PER_HOLDER = 16
MAX_HOLDERS = 16


@ray.remote(num_cpus=0, max_restarts=0)
class GroupHolder:
    """One partition of the partial groups of a reduce stage."""

    def __init__(self) -> None:
        self._buffer = GroupBuffer()

    def add(self, rows: list[dict]) -> list[tuple[GroupKey, Group]]:
        """Take rows; return the groups they complete."""
        return self._buffer.add(rows)

    def pending(self) -> int:
        """Parents still partial here."""
        return self._buffer.pending


class HolderSet:
    """The holders of one reduce stage, as a reduce task sees them. Picklable."""

    def __init__(self, actors: Sequence[Any]) -> None:
        self.actors = list(actors)

    @classmethod
    def start(cls, count: int | None = None) -> HolderSet:
        """Start ``count`` holder actors (default: one per 16 cluster CPUs, 1..16)."""
        if count is None:
            cpus = int(ray.cluster_resources().get("CPU", 1))
            count = max(1, min(MAX_HOLDERS, cpus // CPUS_PER_HOLDER))
        return cls([GroupHolder.remote() for _ in range(count)])  # type: ignore[attr-defined]

    def add(self, rows: Sequence[dict]) -> list[tuple[GroupKey, Group]]:
        """Send each row to its parent's holder (one call per holder); return the completed groups."""
        parts: dict[int, list[dict]] = defaultdict(list)
        for row in rows:
            root, path = group_key(row)
            parts[zlib.crc32(f"{root}\x00{path}".encode()) % len(self.actors)].append(row)
        refs = [self.actors[i].add.remote(part) for i, part in parts.items()]
        return [group for done in ray.get(refs) for group in done]

    def pending(self) -> int:
        """Parents still partial in any holder."""
        return sum(ray.get([a.pending.remote() for a in self.actors]))

    def stop(self) -> None:
        """Kill the holder actors."""
        for actor in self.actors:
            ray.kill(actor, no_restart=True)
