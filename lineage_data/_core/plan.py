"""The lineage plan: an immutable list of stages over one source, checked as it is built."""

from __future__ import annotations

import enum
import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from lineage_data._core.errors import PlanError


class Kind(enum.StrEnum):
    """Stage kinds."""

    EXPAND = "expand"
    MAP = "map"  # map_batches: 1:1 over batches
    MAP_ROWS = "map_rows"  # map: 1:1 row by row
    FILTER = "filter"
    REDUCE = "reduce"


ON_ERROR = ("isolate", "raise")
ON_CHILD_FAILURE = ("fail", "skip")
# Ray Data's batch formats: "default" (a dict of numpy arrays, Ray's default), "numpy", "pandas",
# "pyarrow", and None (the block as it is: an Arrow table here).
BATCH_FORMATS = ("default", "numpy", "pandas", "pyarrow", None)
DEFAULT_BATCH_FORMAT = "default"


@dataclass(frozen=True, slots=True)
class Stage:
    """One configured operator. ``level`` is the level of the rows it reads."""

    kind: Kind
    name: str
    fn: Any
    level: int
    batch_size: int | None = None
    batch_format: str | None = DEFAULT_BATCH_FORMAT
    compute: Any = (
        None  # a Ray Data ComputeStrategy (ActorPoolStrategy / TaskPoolStrategy), or None
    )
    concurrency: int | tuple[int, ...] | None = None  # Ray's deprecated spelling of ``compute``
    num_cpus: float | None = None
    num_gpus: float | None = None
    memory: float | None = None
    fn_args: tuple[Any, ...] = ()
    fn_kwargs: Mapping[str, Any] = field(default_factory=dict)
    fn_constructor_args: tuple[Any, ...] = ()
    fn_constructor_kwargs: Mapping[str, Any] = field(default_factory=dict)
    ray_remote_args: Mapping[str, Any] = field(default_factory=dict)
    on_error: str = "isolate"
    max_retries: int = 1
    carry: tuple[str, ...] = ()
    on_child_failure: str = "fail"

    @property
    def level_out(self) -> int:
        """The level of the rows this stage emits."""
        return self.level + {Kind.EXPAND: 1, Kind.REDUCE: -1}.get(self.kind, 0)

    @property
    def is_class(self) -> bool:
        """True when ``fn`` is a callable class, built once per worker."""
        return isinstance(self.fn, type)

    def bind(self) -> Callable[..., Any]:
        """The user callable, ready to call.

        A class is built here (once per worker, with ``fn_constructor_args``/
        ``fn_constructor_kwargs``); ``fn_args``/``fn_kwargs`` follow the arguments the stage passes
        (a batch, a row, or a parent and its children), as in Ray Data.
        """
        fn = self.fn
        if isinstance(fn, type):
            fn = fn(*self.fn_constructor_args, **self.fn_constructor_kwargs)
        if not self.fn_args and not self.fn_kwargs:
            return fn
        return functools.partial(_call_with, fn, tuple(self.fn_args), dict(self.fn_kwargs))


def _call_with(fn: Callable[..., Any], args: tuple, kwargs: dict, *first: Any) -> Any:
    return fn(*first, *args, **kwargs)


@dataclass(frozen=True, slots=True)
class Source:
    """Where level-0 rows come from.

    ``items`` (a list), ``ray`` (a Dataset), ``files`` (paths) or ``materialized`` (the output blocks of
    an earlier run, kept in the Ray object store, with their lineage columns).
    """

    kind: str
    payload: Any
    id_column: str | None = None
    options: Mapping[str, Any] = field(default_factory=dict)
    roots: tuple[str, ...] | None = None  # root ids, when known before the run (items, files)
    columns: frozenset[str] | None = None  # user columns of the source rows (None: not known)


@dataclass(frozen=True, slots=True)
class Plan:
    """A source and the stages after it."""

    source: Source
    stages: tuple[Stage, ...] = ()
    exclude: frozenset[str] = frozenset()
    only: frozenset[str] | None = None  # a repair pass: run just these roots
    max_repair_attempts: int = 2
    limit: int | None = None  # run only the first ``limit`` source roots

    @property
    def level(self) -> int:
        """The level of the rows at the end of the plan (0 when every expansion is reduced)."""
        return self.stages[-1].level_out if self.stages else 0

    @property
    def columns(self) -> frozenset[str] | None:
        """The user columns of the rows at the end of the plan, when known before the run.

        Known for the source (when it says) and kept through filters; a stage that computes rows (map,
        map_batches, expand, reduce) makes them unknown (None).
        """
        columns = self.source.columns
        for stage in self.stages:
            if stage.kind is not Kind.FILTER:
                columns = None
        return columns

    def derived_stages(self) -> tuple[str, ...]:
        """Source-level 1:1 stages: they report nothing; their counts come from the terminal rows."""
        return tuple(
            s.name
            for s in self.stages
            if s.level == 0 and s.kind in (Kind.MAP, Kind.MAP_ROWS, Kind.FILTER)
        )

    def for_workers(self) -> Plan:
        """This plan without its source payload and root sets: what stage workers need (small)."""
        return replace(
            self,
            source=replace(self.source, payload=None, roots=None),
            exclude=frozenset(),
            only=None,
        )

    def keeps(self, root: str) -> bool:
        """True when this plan runs ``root`` (not excluded, and in ``only`` if that is set)."""
        return root not in self.exclude and (self.only is None or root in self.only)

    def select(self, roots: Sequence[str]) -> list[int]:
        """The positions of the ``roots`` (in source order) this plan runs.

        Not excluded, among the first ``limit`` of those, and in ``only`` when that is set.
        """
        chosen = [i for i, r in enumerate(roots) if r not in self.exclude]
        if self.limit is not None:
            chosen = chosen[: self.limit]
        if self.only is not None:
            chosen = [i for i in chosen if roots[i] in self.only]
        return chosen

    def restricted(self, roots: frozenset[str]) -> Plan:
        """This plan run for ``roots`` only (a repair pass)."""
        return replace(self, only=roots)

    def then(self, stage: Stage) -> Plan:
        """This plan with one more stage, checked now."""
        if stage.level != self.level:
            raise PlanError(
                f"stage {stage.name!r} reads level {stage.level}, the plan is at {self.level}"
            )
        if stage.kind is Kind.REDUCE and self.level == 0:
            raise PlanError(
                f"reduce_lineage {stage.name!r}: no open level to reduce (call expand_lineage first)"
            )
        if any(s.name == stage.name for s in self.stages):
            raise PlanError(f"stage name {stage.name!r} is used twice; names must be unique")
        known = self.columns
        missing = [c for c in stage.carry if known is not None and c not in known]
        if missing:
            raise PlanError(
                f"expand_lineage {stage.name!r}: carry column(s) {missing} are not in the rows it "
                f"reads (columns: {sorted(known or ())})"
            )
        _check_options(stage)
        return replace(self, stages=(*self.stages, stage))

    def unique_name(self, fn: Any, kind: Kind | str) -> str:
        """A default stage name from the function's name, made unique in this plan.

        A ``functools.partial`` is named after the function it wraps; a lambda after the stage kind.
        """
        kind = kind.value if isinstance(kind, Kind) else kind
        while isinstance(fn, functools.partial):
            fn = fn.func
        base = kind if fn is None else getattr(fn, "__name__", None) or type(fn).__name__
        if base == "<lambda>":
            base = kind
        taken = {s.name for s in self.stages}
        name, n = base, 1
        while name in taken:
            n += 1
            name = f"{base}_{n}"
        return name

    def explain(self) -> str:
        """The plan as text: levels, stages, options and carried columns."""
        src = self.source
        head = f"source {src.kind}"
        if src.id_column:
            head += f" (id_column={src.id_column!r})"
        lines = [f"{head} -> level 0"]
        if self.exclude:
            lines.append(f"  skip {len(self.exclude)} root(s) already committed")
        if self.limit is not None:
            lines.append(f"  limit: the first {self.limit} root(s)")
        for i, stage in enumerate(self.stages):
            indent = "  " * (min(stage.level, stage.level_out) + 1)
            lines.append(f"{indent}[{i}] {stage.kind.value} {stage.name!r}: {_describe(stage)}")
        if self.level:
            lines.append(
                f"open levels at the end: {self.level} (rows are level-{self.level} entities)"
            )
        return "\n".join(lines)


def _describe(stage: Stage) -> str:
    parts = [f"level {stage.level} -> {stage.level_out}"]
    for key in ("batch_size", "compute", "concurrency", "num_cpus", "num_gpus", "memory"):
        value = getattr(stage, key)
        if value is not None:
            parts.append(f"{key}={_strategy(value) if key == 'compute' else value}")
    if stage.kind in (Kind.MAP, Kind.MAP_ROWS):
        parts.append(f"on_error={stage.on_error}")
    if stage.carry:
        parts.append(f"carry={list(stage.carry)}")
    if stage.kind is Kind.REDUCE:
        parts.append(f"on_child_failure={stage.on_child_failure}")
    return ", ".join(parts)


def _strategy(compute: Any) -> str:
    """A compute strategy as text (Ray's strategies have no readable repr)."""
    fields = ("size", "min_size", "max_size", "initial_size")
    args = [f"{k}={getattr(compute, k)}" for k in fields if getattr(compute, k, None) is not None]
    return f"{type(compute).__name__}({', '.join(args)})"


def _check_compute(stage: Stage) -> None:
    """Ray Data's rules for ``compute``/``concurrency``, checked when the stage is added (no Ray)."""
    where = f"stage {stage.name!r}"
    kind = type(stage.compute).__name__ if stage.compute is not None else None
    if kind not in (None, "ActorPoolStrategy", "TaskPoolStrategy"):
        raise PlanError(
            f"{where}: compute must be a ray.data.ActorPoolStrategy or TaskPoolStrategy, got "
            f"{stage.compute!r}"
        )
    if stage.fn is None:
        return
    if stage.is_class and kind == "TaskPoolStrategy":
        raise PlanError(
            f"{where}: a callable class cannot run with TaskPoolStrategy (as in Ray Data); pass "
            "compute=ray.data.ActorPoolStrategy(...) or no compute"
        )
    if not stage.is_class and kind == "ActorPoolStrategy":
        raise PlanError(
            f"{where}: a function cannot run with ActorPoolStrategy (as in Ray Data); pass "
            "compute=ray.data.TaskPoolStrategy(...) or make fn a callable class"
        )
    if not stage.is_class and (stage.fn_constructor_args or stage.fn_constructor_kwargs):
        raise PlanError(f"{where}: fn_constructor_args/kwargs need a callable class as fn")
    c = stage.concurrency
    if c is None:
        return
    if isinstance(c, tuple):
        if len(c) not in (2, 3) or not all(isinstance(v, int) for v in c):
            raise PlanError(
                f"{where}: concurrency must be an int or a tuple of 2 or 3 ints, got {c}"
            )
        if not stage.is_class:
            raise PlanError(
                f"{where}: concurrency is a tuple but fn is not a callable class (use concurrency=n "
                "for at most n tasks)"
            )
    elif not isinstance(c, int) or isinstance(c, bool) or c < 1:
        raise PlanError(f"{where}: concurrency must be a positive int or a tuple, got {c!r}")


def _check_options(stage: Stage) -> None:
    if stage.on_error not in ON_ERROR:
        raise PlanError(
            f"stage {stage.name!r}: on_error must be one of {ON_ERROR}, got {stage.on_error!r}"
        )
    if stage.on_child_failure not in ON_CHILD_FAILURE:
        raise PlanError(
            f"stage {stage.name!r}: on_child_failure must be one of {ON_CHILD_FAILURE}, "
            f"got {stage.on_child_failure!r}"
        )
    if stage.batch_format not in BATCH_FORMATS:
        raise PlanError(
            f"stage {stage.name!r}: batch_format must be one of {BATCH_FORMATS}, got "
            f"{stage.batch_format!r}"
        )
    if stage.batch_size is not None and stage.batch_size < 1:
        raise PlanError(f"stage {stage.name!r}: batch_size must be >= 1, got {stage.batch_size}")
    if stage.max_retries < 0:
        raise PlanError(f"stage {stage.name!r}: max_retries must be >= 0")
    if stage.fn is None and stage.kind is not Kind.REDUCE:
        raise PlanError(f"stage {stage.name!r}: fn is required")
    if stage.fn is not None and not callable(stage.fn):
        raise PlanError(f"stage {stage.name!r}: fn must be callable, got {type(stage.fn).__name__}")
    _check_compute(stage)
