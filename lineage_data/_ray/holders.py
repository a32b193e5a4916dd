"""Group holders: hash-partitioned actors that keep the partial groups of one reduce stage.

A reduce task reduces the parents its batch completes by itself and sends the rows of unfinished
groups here, one call per holder per batch; a holder answers with the groups those rows complete, and
the calling task reduces them. Parents never wait for one global reducer, and the holders scale out.

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
    """One partition of the partial groups of a reduce stage."""

    def __init__(self) -> None:
        self._buffer = GroupBuffer()

    def ping(self) -> bool:
        """Liveness check."""
        return True

    def add(self, rows: list[dict]) -> list[tuple[GroupKey, Group]]:
        """Take rows; return the groups they complete (or completed before: a retried piece)."""
        return self._buffer.add(rows)

    def forget(self, roots: list[str]) -> None:
        """Roots the consumer received: their handed-out groups are no longer needed."""
        self._buffer.forget(roots)


class HolderSet:
    """The holders of one reduce stage, as a reduce task sees them. Picklable."""

    def __init__(self, helpers: Sequence[Helper], stage: str) -> None:
        self.helpers = list(helpers)
        self.stage = stage

    @classmethod
    def start(
        cls, run_id: str, stage: str, count: int | None = None
    ) -> tuple[HolderSet, list[tuple[Helper, Callable[[], Any]]]]:
        """Start ``count`` holders (default: one per 16 cluster CPUs, 1..16) on the driver's node.

        Returns the set and, per holder, ``(helper, re-create)`` for the supervisor.
        """
        if count is None:
            cpus = int(ray.cluster_resources().get("CPU", 1))
            count = max(1, min(MAX_HOLDERS, cpus // CPUS_PER_HOLDER))
        started = [
            start_helper(
                GroupHolder,
                f"group holder {i} of {stage!r}",
                run_id=run_id,
                suffix=f"holder-{zlib.crc32(stage.encode()):08x}-{i}",
            )
            for i in range(count)
        ]
        return cls([h for h, _ in started], stage), started

    def add(self, rows: Sequence[dict]) -> list[tuple[GroupKey, Group]]:
        """Send each row to its parent's holder (one call per holder); return the completed groups."""
        parts: dict[int, list[dict]] = defaultdict(list)
        for row in rows:
            root, path = group_key(row)
            parts[zlib.crc32(f"{root}\x00{path}".encode()) % len(self.helpers)].append(row)
        calls = [(i, part, self.helpers[i].submit("add", part)) for i, part in parts.items()]
        done = []
        for i, part, ref in calls:
            done.extend(self.helpers[i].result(ref, "add", part, stage=self.stage))
        return done

    def forget(self, roots: list[str]) -> None:
        """Tell every holder that ``roots`` reached the consumer (no wait)."""
        for helper in self.helpers:
            helper.submit("forget", roots)
