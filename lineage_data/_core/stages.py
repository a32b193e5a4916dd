"""The stage types: one per verb, each with its own typed options, checked when it is built.

Every stage has a :class:`UserFn` (the user's callable and its arguments) and a :class:`Compute`
(where it runs). A new kind is a class here and a case in every ``match`` over :data:`AnyStage`.
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, TypedDict, get_args

from lineage_data._core.errors import PlanError
from lineage_data._core.guard import DEFAULT_MAX_CRASH_RETRIES


class Kind(enum.StrEnum):
    """Stage kinds (the text ``explain()`` shows and default names use)."""

    EXPAND = "expand"
    MAP = "map"  # map_batches: 1:1 over batches
    MAP_ROWS = "map_rows"  # map: 1:1 row by row
    FILTER = "filter"
    REDUCE = "reduce"


OnError = Literal["isolate", "raise"]
OnChildFailure = Literal["fail", "skip"]
# Ray Data's batch formats; None: the block as it is (an Arrow table here).
BatchFormat = Literal["default", "numpy", "pandas", "pyarrow"] | None

BATCH_FORMATS: tuple[str | None, ...] = (*get_args(get_args(BatchFormat)[0]), None)
DEFAULT_BATCH_FORMAT: BatchFormat = "default"


class RayOptions(TypedDict, total=False):
    """Ray Data 2.60's arguments that every stage verb takes, with Ray's meaning and defaults."""

    compute: Any
    concurrency: int | tuple[int, ...] | None
    fn_args: Iterable[Any] | None
    fn_kwargs: Mapping[str, Any] | None
    fn_constructor_args: Iterable[Any] | None
    fn_constructor_kwargs: Mapping[str, Any] | None
    num_cpus: float | None
    num_gpus: float | None
    memory: float | None
    resources: Mapping[str, float] | None
    accelerator_type: str | None
    runtime_env: Mapping[str, Any] | None
    label_selector: Mapping[str, str] | None
    fallback_strategy: Any
    max_calls: int | None
    ray_remote_args_fn: Callable[[], dict[str, Any]] | None
    scheduling_strategy: Any


def from_options(fn: Any, options: Mapping[str, Any]) -> tuple[UserFn, Compute]:
    """Ray Data's verb arguments (:class:`RayOptions`) split into the call and where it runs."""
    rest = dict(options)
    call = UserFn(
        fn,
        args=tuple(rest.pop("fn_args", None) or ()),
        kwargs=dict(rest.pop("fn_kwargs", None) or {}),
        constructor_args=tuple(rest.pop("fn_constructor_args", None) or ()),
        constructor_kwargs=dict(rest.pop("fn_constructor_kwargs", None) or {}),
    )
    return call, Compute(
        strategy=rest.pop("compute", None),
        concurrency=rest.pop("concurrency", None),
        num_cpus=rest.pop("num_cpus", None),
        num_gpus=rest.pop("num_gpus", None),
        memory=rest.pop("memory", None),
        ray_remote_args={k: v for k, v in rest.items() if v is not None},  # after the pops above
    )


def _one_of(where: str, option: str, value: Any, allowed: tuple[Any, ...]) -> None:
    if value not in allowed:
        raise PlanError(f"{where}: {option} must be one of {allowed}, got {value!r}")


@dataclass(frozen=True, slots=True)
class UserFn:
    """The user's callable and the arguments it gets after the stage's own, as in Ray Data."""

    fn: Any
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    constructor_args: tuple[Any, ...] = ()
    constructor_kwargs: Mapping[str, Any] = field(default_factory=dict)

    @property
    def is_class(self) -> bool:
        """True when ``fn`` is a callable class, built once per worker."""
        return isinstance(self.fn, type)

    def bind(self) -> Callable[..., Any]:
        """The user callable, ready to call (a class is built here)."""
        fn = self.fn
        if isinstance(fn, type):
            fn = fn(*self.constructor_args, **self.constructor_kwargs)
        if not self.args and not self.kwargs:
            return fn
        return functools.partial(_call_with, fn, tuple(self.args), dict(self.kwargs))

    def check(self, where: str) -> None:
        """Raise :class:`PlanError` when ``fn`` is not callable or the arguments do not fit it."""
        if self.fn is not None and not callable(self.fn):
            raise PlanError(f"{where}: fn must be callable, got {type(self.fn).__name__}")
        if not self.is_class and (self.constructor_args or self.constructor_kwargs):
            raise PlanError(f"{where}: fn_constructor_args/kwargs need a callable class as fn")


def _call_with(fn: Callable[..., Any], args: tuple, kwargs: dict, *first: Any) -> Any:
    return fn(*first, *args, **kwargs)


@dataclass(frozen=True, slots=True)
class Compute:
    """Where a stage runs: Ray Data's ``compute`` strategy (or ``concurrency``) and resources."""

    strategy: Any = None
    concurrency: int | tuple[int, ...] | None = None
    num_cpus: float | None = None
    num_gpus: float | None = None
    memory: float | None = None
    ray_remote_args: Mapping[str, Any] = field(default_factory=dict)

    def resources(self) -> dict[str, Any]:
        """Ray's remote arguments for the stage's workers (the named resources when given)."""
        named = {"num_cpus": self.num_cpus, "num_gpus": self.num_gpus, "memory": self.memory}
        return dict(self.ray_remote_args) | {k: v for k, v in named.items() if v is not None}

    def describe(self) -> list[str]:
        """The options that were given, as ``key=value`` text."""
        given = (
            ("compute", None if self.strategy is None else _strategy(self.strategy)),
            ("concurrency", self.concurrency),
            ("num_cpus", self.num_cpus),
            ("num_gpus", self.num_gpus),
            ("memory", self.memory),
        )
        return [f"{key}={value}" for key, value in given if value is not None]

    def check(self, where: str, call: UserFn) -> None:
        """Ray Data's rules for ``compute``/``concurrency`` with this callable (no Ray needed)."""
        kind = type(self.strategy).__name__ if self.strategy is not None else None
        if kind not in (None, "ActorPoolStrategy", "TaskPoolStrategy"):
            raise PlanError(
                f"{where}: compute must be a ray.data.ActorPoolStrategy or TaskPoolStrategy, got "
                f"{self.strategy!r}"
            )
        if call.fn is None:
            return
        if call.is_class and kind == "TaskPoolStrategy":
            raise PlanError(
                f"{where}: a callable class cannot run with TaskPoolStrategy (as in Ray Data); pass "
                "compute=ray.data.ActorPoolStrategy(...) or no compute"
            )
        if not call.is_class and kind == "ActorPoolStrategy":
            raise PlanError(
                f"{where}: a function cannot run with ActorPoolStrategy (as in Ray Data); pass "
                "compute=ray.data.TaskPoolStrategy(...) or make fn a callable class"
            )
        c = self.concurrency
        if isinstance(c, tuple):
            if len(c) not in (2, 3) or not all(isinstance(v, int) for v in c):
                raise PlanError(
                    f"{where}: concurrency must be an int or a tuple of 2 or 3 ints, got {c}"
                )
            if not call.is_class:
                raise PlanError(
                    f"{where}: concurrency is a tuple but fn is not a callable class (use "
                    "concurrency=n for at most n tasks)"
                )
        elif c is not None and (not isinstance(c, int) or isinstance(c, bool) or c < 1):
            raise PlanError(f"{where}: concurrency must be a positive int or a tuple, got {c!r}")


def _strategy(compute: Any) -> str:
    """A compute strategy as text (Ray's strategies have no readable repr)."""
    fields = ("size", "min_size", "max_size", "initial_size")
    args = [f"{k}={getattr(compute, k)}" for k in fields if getattr(compute, k, None) is not None]
    return f"{type(compute).__name__}({', '.join(args)})"


@dataclass(frozen=True, slots=True, kw_only=True)
class Stage:
    """What every stage has. ``level`` is the level of the rows it reads."""

    kind: ClassVar[Kind]
    opens: ClassVar[int] = 0  # +1: the stage opens a level, -1: it closes one

    name: str
    level: int
    call: UserFn
    compute: Compute = field(default_factory=Compute)
    on_error: OnError = "isolate"
    max_crash_retries: int = DEFAULT_MAX_CRASH_RETRIES
    timeout_s: float | None = None

    def __post_init__(self) -> None:
        self.check()

    @property
    def level_out(self) -> int:
        """The level of the rows this stage emits."""
        return self.level + self.opens

    @property
    def where(self) -> str:
        """How messages name this stage."""
        return f"stage {self.name!r}"

    def check(self) -> None:
        """Raise :class:`PlanError` for options that cannot work."""
        _one_of(self.where, "on_error", self.on_error, get_args(OnError))
        retries = self.max_crash_retries
        if not isinstance(retries, int) or isinstance(retries, bool) or retries < 0:
            raise PlanError(f"{self.where}: max_crash_retries must be an int >= 0, got {retries!r}")
        timeout = self.timeout_s
        if timeout is not None and (
            isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout > 0
        ):
            raise PlanError(
                f"{self.where}: timeout_s must be a number > 0 or None, got {timeout!r}"
            )
        self._check_fn()
        self.call.check(self.where)
        self.compute.check(self.where, self.call)

    def _check_fn(self) -> None:
        if self.call.fn is None:
            raise PlanError(f"{self.where}: fn is required")

    def describe(self) -> str:
        """The stage's options as one line of text (for ``explain()``)."""
        faults = [f"timeout_s={self.timeout_s:g}"] if self.timeout_s is not None else []
        if self.max_crash_retries != DEFAULT_MAX_CRASH_RETRIES:
            faults.append(f"max_crash_retries={self.max_crash_retries}")
        return ", ".join([f"level {self.level} -> {self.level_out}", *self._options(), *faults])

    def _options(self) -> list[str]:
        return self.compute.describe()


def _check_batch_size(stage: Expand | MapBatches) -> None:
    if stage.batch_size is not None and stage.batch_size < 1:
        raise PlanError(f"{stage.where}: batch_size must be >= 1, got {stage.batch_size}")


def _batch_size(stage: Expand | MapBatches) -> list[str]:
    return [f"batch_size={stage.batch_size}"] if stage.batch_size is not None else []


@dataclass(frozen=True, slots=True, kw_only=True)
class Expand(Stage):
    """``expand_lineage``: each PRESENT row becomes its ordered children (one level down).

    ``carry`` names parent columns copied to every child and given back at the reduce.
    """

    kind: ClassVar[Kind] = Kind.EXPAND
    opens: ClassVar[int] = 1

    carry: tuple[str, ...] = ()
    batch_size: int | None = None

    def check(self) -> None:  # noqa: D102 - see Stage.check
        Stage.check(self)
        _check_batch_size(self)

    def _options(self) -> list[str]:
        carry = [f"carry={list(self.carry)}"] if self.carry else []
        return [*_batch_size(self), *self.compute.describe(), *carry]


@dataclass(frozen=True, slots=True, kw_only=True)
class MapBatches(Stage):
    """``map_batches``: 1:1 over batches of PRESENT rows; a raising batch is retried, then halved."""

    kind: ClassVar[Kind] = Kind.MAP

    batch_size: int | None = None
    batch_format: BatchFormat = DEFAULT_BATCH_FORMAT
    max_retries: int = 1

    def check(self) -> None:  # noqa: D102 - see Stage.check
        Stage.check(self)
        _check_batch_size(self)
        _one_of(self.where, "batch_format", self.batch_format, BATCH_FORMATS)
        if self.max_retries < 0:
            raise PlanError(f"{self.where}: max_retries must be >= 0")

    def _options(self) -> list[str]:
        return [*_batch_size(self), *self.compute.describe(), f"on_error={self.on_error}"]


@dataclass(frozen=True, slots=True, kw_only=True)
class MapRows(Stage):
    """``map``: 1:1 row by row; a row that raises fails alone under ``on_error="isolate"``."""

    kind: ClassVar[Kind] = Kind.MAP_ROWS

    def _options(self) -> list[str]:
        return [*self.compute.describe(), f"on_error={self.on_error}"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Filter(Stage):
    """``filter``: a row the predicate rejects becomes a DROPPED row (its root is still accounted)."""

    kind: ClassVar[Kind] = Kind.FILTER


@dataclass(frozen=True, slots=True, kw_only=True)
class Reduce(Stage):
    """``reduce_lineage``: closes a level; each parent is emitted once its own children are in.

    ``call.fn`` may be None: every child column becomes an ordered list column.
    """

    kind: ClassVar[Kind] = Kind.REDUCE
    opens: ClassVar[int] = -1

    on_child_failure: OnChildFailure = "fail"

    def _check_fn(self) -> None:  # fn may be None (every child column becomes a list column)
        _one_of(self.where, "on_child_failure", self.on_child_failure, get_args(OnChildFailure))

    def _options(self) -> list[str]:
        return [*self.compute.describe(), f"on_child_failure={self.on_child_failure}"]


AnyStage = Expand | MapBatches | MapRows | Filter | Reduce
