"""The coordinator: one async actor on the driver node, a thin shell over :class:`LineageState`.

Workers talk to it once per batch through :class:`CoordinatorClient`; payloads never pass through it.
It is a :mod:`helper <lineage_data._ray.actors>`: restarted or re-created when it dies, with an empty
state of a new epoch (see :mod:`lineage_data._core.state`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import ray

from lineage_data._core.state import CommitResult, Handoff, LineageState, Path
from lineage_data._ray.actors import Helper, start_helper


@ray.remote(num_cpus=0)
class CoordinatorActor:
    """Holds one execution's lineage state. Methods run one at a time on the actor's event loop."""

    def __init__(self) -> None:
        self._state = LineageState()

    async def ping(self) -> int:
        """Liveness check; returns the state's epoch."""
        return self._state.epoch

    async def call(self, method: str, args: tuple, kwargs: dict) -> Any:
        """Apply one state method; exceptions travel back to the caller."""
        return getattr(self._state, method)(*args, **kwargs)


def start_coordinator(run_id: str) -> tuple[CoordinatorClient, Any]:
    """Start the coordinator of one run on this (the driver's) node; returns (client, re-create)."""
    helper, create = start_helper(
        CoordinatorActor, "coordinator", run_id=run_id, suffix="coordinator"
    )
    return CoordinatorClient(helper), create


class CoordinatorClient:
    """The coordinator as operators see it: the :class:`LineageState` methods, one round trip each.

    Picklable: it travels to every worker inside the stage wrappers. ``stage`` names the caller's stage
    in the error raised when the coordinator cannot be reached.
    """

    def __init__(self, helper: Helper, stage: str | None = None) -> None:
        self.helper = helper
        self._stage = stage

    def for_stage(self, stage: str) -> CoordinatorClient:
        """The same client, naming ``stage`` in its errors."""
        return CoordinatorClient(self.helper, stage)

    def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        return self.helper.call("call", method, args, kwargs, stage=self._stage)

    def register_roots(self, roots: Sequence[str], block: str | None = None) -> None:  # noqa: D102
        self._call("register_roots", list(roots), block)

    def roots_since(self, cursor: int) -> tuple[list[str], int]:  # noqa: D102
        return self._call("roots_since", cursor)

    def handoff(self, stage_index: int, roots: Sequence[str], paths: Sequence[Path]) -> Handoff:  # noqa: D102
        return self._call("handoff", stage_index, roots, paths)

    def commit(self, *args: Any, **kwargs: Any) -> CommitResult:  # noqa: D102
        return self._call("commit", *args, **kwargs)

    def count(self, stage: str, counts: dict[str, int]) -> None:  # noqa: D102
        self._call("count", stage, counts)

    def reduced(self, *args: Any) -> None:  # noqa: D102
        self._call("reduced", *args)

    def establish_types(self, stage: str, types: dict[str, str]) -> dict[str, str]:  # noqa: D102
        return self._call("establish_types", stage, types)

    def established(self, stage: str) -> list[str]:  # noqa: D102
        return self._call("established", stage)

    def snapshot(self) -> dict:  # noqa: D102
        return self._call("snapshot")
