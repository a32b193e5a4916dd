"""The lineage plan: an immutable list of typed stages over one typed source, checked as it is built."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, ClassVar

import pyarrow as pa
import pyarrow.compute as pc

from lineage_data._core.errors import PlanError
from lineage_data._core.stages import AnyStage, Expand, Filter, MapBatches, MapRows, Reduce


@dataclass(frozen=True, slots=True, kw_only=True)
class Source:
    """Where level-0 rows come from (root ids, user columns: where known); what workers get."""

    kind: ClassVar[str] = "stripped"

    id_column: str | None = None
    roots: tuple[str, ...] | None = None
    columns: frozenset[str] | None = None

    def stripped(self) -> Source:
        """This source without its rows or root ids: what stage workers need (small)."""
        return Source(id_column=self.id_column, columns=self.columns)


@dataclass(frozen=True, slots=True, kw_only=True)
class ItemsSource(Source):
    """``from_items``: the rows, converted to Arrow once (a snapshot, smaller than copied dicts)."""

    kind: ClassVar[str] = "items"

    table: pa.Table
    roots: tuple[str, ...]

    def rows(self, keep: Sequence[int]) -> pa.Table:
        """The rows at positions ``keep`` (the table itself when that is every row)."""
        if len(keep) == self.table.num_rows:
            return self.table
        return self.table.take(pa.array(keep, pa.int64()))


@dataclass(frozen=True, slots=True, kw_only=True)
class RaySource(Source):
    """``from_ray``: a Ray Dataset; its roots are learned block by block as it is read."""

    kind: ClassVar[str] = "ray"

    dataset: Any


@dataclass(frozen=True, slots=True, kw_only=True)
class FilesSource(Source):
    """``read_files``: files listed on the driver (``(uri, size)`` each), read by Ray tasks."""

    kind: ClassVar[str] = "files"

    reader: Any  # lineage_data._ray.datasource.FileSource
    files: tuple[tuple[str, int], ...]
    files_per_task: int = 1


@dataclass(frozen=True, slots=True, kw_only=True)
class MaterializedSource(Source):
    """The output blocks of an earlier run, kept in the Ray object store with their lineage columns.

    At level 0: its terminal rows, which start a new plan. At an open level: its rows *before*
    accounting (entities and group headers with their parents), so the plan goes on after its first
    ``done`` stages; ``counts`` are what that run counted and ``established`` the columns each stage
    showed (an empty group reduces to ``[]`` for each).
    """

    kind: ClassVar[str] = "materialized"

    refs: tuple[Any, ...]
    level: int = 0
    done: int = 0
    counts: tuple[tuple[str, tuple[tuple[str, int], ...]], ...] = ()
    established: tuple[tuple[str, tuple[str, ...]], ...] = ()  # stage -> the columns it showed


@dataclass(frozen=True, slots=True)
class Plan:
    """A source and the stages after it."""

    source: Source
    stages: tuple[AnyStage, ...] = ()
    exclude: frozenset[str] = frozenset()
    only: frozenset[str] | None = None  # a repair pass: run just these roots
    max_repair_attempts: int = 2
    limit: int | None = None  # run only the first ``limit`` source roots

    @property
    def level(self) -> int:
        """The level of the rows at the end of the plan (0 when every expansion is reduced)."""
        return self.stages[-1].level_out if self.stages else 0

    @property
    def done(self) -> int:
        """How many of the stages the source's rows have been through already (a materialized run)."""
        return self.source.done if isinstance(self.source, MaterializedSource) else 0

    @property
    def columns(self) -> frozenset[str] | None:
        """The user columns at the end of the plan, when known before the run (filters keep them)."""
        return self.source.columns if all(isinstance(s, Filter) for s in self.stages) else None

    def derived_stages(self) -> tuple[str, ...]:
        """Source-level 1:1 stages: they report nothing; their counts come from the terminal rows."""
        return tuple(
            s.name
            for s in self.stages[self.done :]
            if s.level == 0 and isinstance(s, MapBatches | MapRows | Filter)
        )

    @property
    def flat(self) -> bool:
        """True when every stage is a source-level 1:1 stage: no barrier, no coordinator needed."""
        return not self.done and len(self.derived_stages()) == len(self.stages)

    def for_workers(self) -> Plan:
        """This plan without its source rows and root sets: what stage workers need (small)."""
        return replace(self, source=self.source.stripped(), exclude=frozenset(), only=None)

    def keeps(self, root: str) -> bool:
        """True when this plan runs ``root`` (not excluded, and in ``only`` if that is set)."""
        return root not in self.exclude and (self.only is None or root in self.only)

    def kept(self, roots: pa.Array) -> pa.Array:
        """A mask over ``roots``: True where this plan runs the root (:meth:`keeps`, vectorized)."""
        mask = pc.invert(pc.is_in(roots, pa.array(sorted(self.exclude), pa.string())))
        if self.only is not None:
            mask = pc.and_(mask, pc.is_in(roots, pa.array(sorted(self.only), pa.string())))
        return mask

    def select(self, roots: Sequence[str]) -> list[int]:
        """The positions of the ``roots`` it runs: not excluded, the first ``limit``, in ``only``."""
        if not self.exclude and self.only is None:  # the usual run: every root, in order
            return list(range(len(roots) if self.limit is None else min(self.limit, len(roots))))
        chosen = [i for i, r in enumerate(roots) if r not in self.exclude]
        if self.limit is not None:
            chosen = chosen[: self.limit]
        if self.only is not None:
            chosen = [i for i in chosen if roots[i] in self.only]
        return chosen

    def restricted(self, roots: frozenset[str]) -> Plan:
        """This plan run for ``roots`` only (a repair pass)."""
        return replace(self, only=roots)

    def then(self, stage: AnyStage) -> Plan:
        """This plan with one more stage (its own options were checked when it was built)."""
        if stage.level != self.level:
            raise PlanError(
                f"stage {stage.name!r} reads level {stage.level}, the plan is at {self.level}"
            )
        if isinstance(stage, Reduce) and self.level == 0:
            raise PlanError(
                f"reduce_lineage {stage.name!r}: no open level to reduce (call expand_lineage first)"
            )
        if any(s.name == stage.name for s in self.stages):
            raise PlanError(f"stage name {stage.name!r} is used twice; names must be unique")
        known = self.columns
        if isinstance(stage, Expand) and known is not None:
            missing = [c for c in stage.carry if c not in known]
            if missing:
                raise PlanError(
                    f"expand_lineage {stage.name!r}: carry column(s) {missing} are not in the rows "
                    f"it reads (columns: {sorted(known)})"
                )
        return replace(self, stages=(*self.stages, stage))

    def unique_name(self, fn: Any, kind: str) -> str:
        """A default stage name from the function's (a lambda's: the kind), unique in this plan."""
        kind = str(kind)  # a Kind's value
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
        if self.done:  # a run kept at an open level: the plan goes on from its rows
            last = self.done - 1
            head += f" (the rows after stage [{last}]) -> level {self.stages[last].level_out}"
        else:
            head += f" (id_column={src.id_column!r})" if src.id_column else ""
            head += " -> level 0"
        lines = [head]
        if self.exclude:
            lines.append(f"  skip {len(self.exclude)} root(s) already committed")
        if self.limit is not None:
            lines.append(f"  limit: the first {self.limit} root(s)")
        for i, stage in enumerate(self.stages):
            indent = "  " * (min(stage.level, stage.level_out) + 1)
            kept = " (materialized)" if i < self.done else ""
            lines.append(
                f"{indent}[{i}] {stage.kind.value} {stage.name!r}: {stage.describe()}{kept}"
            )
        if self.level:
            lines.append(
                f"open levels at the end: {self.level} (rows are level-{self.level} entities)"
            )
        return "\n".join(lines)
