"""The coordinator: one async actor on the driver node, a thin shell over :class:`LineageState`.

Workers talk to it once per batch through :class:`CoordinatorClient`; payloads never pass through it.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from lineage_data._core.state import Accounting, CommitResult, Handoff, LineageState, Path


@ray.remote(num_cpus=0, max_restarts=0)
class CoordinatorActor:
    """Holds one execution's lineage state. Methods run one at a time on the actor's event loop."""

    def __init__(self, started_at: float, stages: list[str], derived: list[str]) -> None:
        self._state = LineageState(started_at, stages=stages, derived=derived)

    async def call(self, method: str, args: tuple, kwargs: dict) -> Any:
        """Apply one state method; exceptions travel back to the caller."""
        return getattr(self._state, method)(*args, **kwargs)


def start_coordinator(
    started_at: float, stages: Sequence[str] = (), derived: Sequence[str] = ()
) -> Any:
    """Start a coordinator pinned to this (the driver's) node."""
    node_id = ray.get_runtime_context().get_node_id()
    return CoordinatorActor.options(  # type: ignore[attr-defined]
        scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=node_id, soft=False),
    ).remote(started_at, list(stages), list(derived))


class CoordinatorClient:
    """The coordinator as operators see it: the :class:`LineageState` methods, one round trip each.

    Picklable: it travels to every worker inside the stage wrappers.
    """

    def __init__(self, actor: Any) -> None:
        self._actor = actor

    def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        return ray.get(self._actor.call.remote(method, args, kwargs))

    def register_roots(self, roots: Sequence[str], *, wait: bool = True) -> None:  # noqa: D102
        if wait:
            self._call("register_roots", list(roots))
        else:  # from the driver, before the run starts: ordered before every later call
            self._actor.call.remote("register_roots", (list(roots),), {})

    def exclude_roots(self, roots: Sequence[str]) -> None:  # noqa: D102 - from the driver, no wait
        self._actor.call.remote("exclude_roots", (list(roots),), {})

    def handoff(self, stage_index: int, roots: Sequence[str], paths: Sequence[Path]) -> Handoff:  # noqa: D102
        return self._call("handoff", stage_index, roots, paths)

    def commit(self, *args: Any, **kwargs: Any) -> CommitResult:  # noqa: D102
        return self._call("commit", *args, **kwargs)

    def count(self, stage: str, counts: dict[str, int]) -> None:  # noqa: D102
        self._call("count", stage, counts)

    def reduced(self, *args: Any) -> None:  # noqa: D102
        self._call("reduced", *args)

    def record_terminal(self, *args: Any) -> None:
        """Terminal rows, sent without waiting (the one call on the path of every output block).

        The driver waits for them with :meth:`settle` before it checks the run.
        """
        self._actor.call.remote("record_terminal", args, {})

    def settle(self, *, quiet_s: float = 2.0, poll_s: float = 0.05) -> dict[str, int]:
        """Wait until every expected root has its terminal record, or none arrived for ``quiet_s``."""
        last, since = -1, time.monotonic()
        while True:
            progress = self.progress()
            done = progress["committed"] + progress["failed"]
            if done >= progress["total"] or time.monotonic() - since > quiet_s:
                return progress
            if done != last:
                last, since = done, time.monotonic()
            time.sleep(poll_s)

    def progress(self) -> dict[str, int]:  # noqa: D102
        return self._call("progress")

    def accounting(self) -> Accounting:  # noqa: D102
        return self._call("accounting")

    def snapshot(self) -> dict:  # noqa: D102
        return self._call("snapshot")
