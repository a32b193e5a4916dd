"""How every stage calls user code: one error policy for expand, map, map_batches, filter and reduce.

``on_error="isolate"``: a call that raises fails only what it was called on (a row, a parent, a
group); a batch call is first retried, then split in halves until the rows that raise fail alone.
``on_error="raise"``: the first error stops the run as a :class:`~lineage_data.UserCodeError`. A
:class:`~lineage_data.ContractError` (a bug in the stage, not bad input) or a
:class:`~lineage_data.StageFailedError` always stops the run.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from lineage_data._core import outcomes
from lineage_data._core.errors import ContractError, StageFailedError, UserCodeError, describe
from lineage_data._core.outcomes import Status

R = TypeVar("R")


@dataclass(frozen=True, slots=True)
class CallPolicy:
    """The error policy of one stage."""

    stage: str
    on_error: str = "isolate"
    retries: int = 0  # batch calls only: attempts after the first, before splitting
    # How each call is made: ``invoke(fn, *args)`` (the stage's guard, with its timeout), or plain.
    invoke: Callable[..., Any] | None = None

    def call(self, fn: Callable[..., Any], *args: Any, on: str) -> tuple[Any, Status | None]:
        """``fn(*args)`` once: ``(value, None)``, or ``(None, FAILED status)`` if it raised.

        ``on`` names what it was called on ("a row", "a parent") for ``on_error="raise"``.
        """
        try:
            return (self.invoke(fn, *args) if self.invoke else fn(*args)), None
        except ContractError:
            raise
        except StageFailedError as exc:
            raise self.stopped(exc) from exc
        except Exception as exc:  # noqa: BLE001 - user code may raise anything
            return None, self.failed(exc, on)

    def stopped(self, exc: StageFailedError) -> StageFailedError:
        """``exc`` with the stage's name in its message (the error that stops the run)."""
        prefix = f"stage {self.stage!r}: "
        message = str(exc)
        return exc if message.startswith(prefix) else StageFailedError(prefix + message)

    def failed(self, exc: Exception, on: str) -> Status:
        """The status of a call that raised ``exc`` (or the run stops, under ``on_error="raise"``)."""
        if self.on_error == "raise":
            raise UserCodeError(f"stage {self.stage!r} raised on {on}: {describe(exc)}") from exc
        return outcomes.from_exception(exc, self.stage)

    def batch(
        self,
        run: Callable[[Any], R],
        items: Any,
        *,
        size: Callable[[Any], int],
        halves: Callable[[Any], tuple[Any, Any]],
        merge: Callable[[R, R], R],
        fail: Callable[[Any, Status], R],
    ) -> R:
        """``run(items)`` with retries, then by halves until what raises fails alone (``fail``)."""
        n = size(items)
        for _ in range(self.retries + 1):
            result, status = self.call(run, items, on=f"a batch of {n} rows")
            if status is None:
                return result
        assert status is not None  # every attempt failed
        if n <= 1:
            return fail(items, status)
        once = replace(self, retries=0)  # a half is not retried
        left, right = (
            once.batch(run, half, size=size, halves=halves, merge=merge, fail=fail)
            for half in halves(items)
        )
        return merge(left, right)
