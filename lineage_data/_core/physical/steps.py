"""The physical plan: a :class:`Step` per Ray Data map step, with the facts the lowering needs.

The lineage :class:`~lineage_data._core.plan.Plan` says *what* runs; this says *how*. The rules of
:mod:`lineage_data._core.physical` fill it in, leaving the lowering nothing to decide.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from lineage_data._core.blocks import DEFAULT_ROWS_PER_BLOCK
from lineage_data._core.plan import Plan
from lineage_data._core.stages import Expand


class Runner(enum.StrEnum):
    """What runs a step's calls: Ray tasks, or the actors of a pool (a callable class)."""

    TASKS = "tasks"
    POOL = "actor pool"


class Batches(enum.StrEnum):
    """Who cuts a step's input into the stage's ``batch_size`` batches."""

    WHOLE = "whole blocks"  # no batch_size: the operator takes each block as it comes
    RAY = "Ray Data cuts"
    OPERATOR = "whole blocks, the operator cuts"


@dataclass(frozen=True, slots=True)
class Step:
    """One stage as the lowering runs it; ``index`` is its place in :attr:`Plan.stages`."""

    index: int
    runner: Runner = Runner.TASKS
    threads: int = 1  # batches one actor runs at once
    rows_per_block: int = DEFAULT_ROWS_PER_BLOCK  # of the children an expansion emits
    batches: Batches = Batches.WHOLE
    batch_size: int | None = None
    then: tuple[Step, ...] = ()  # reduces run in this step's actors right after it, never alone
    terminal: bool = False  # this step also reports the plan's terminal rows
    one_piece: bool = False  # its output blocks leave with each column in one chunk

    def describe(self, plan: Plan) -> str:
        """The step as one line of text (for ``explain()``)."""
        stage = plan.stages[self.index]
        runner = self.runner.value
        if self.threads > 1:
            runner += f" ({self.threads} batches in flight per actor)"
        parts = [runner, self.batches.value]
        if self.batches is not Batches.WHOLE:
            parts[-1] += f" batches of {self.batch_size}"
        if isinstance(stage, Expand):
            parts.append(f"children in blocks of {self.rows_per_block} rows")
        for folded in self.then:
            reduce = plan.stages[folded.index]
            parts.append(f"then [{folded.index}] {reduce.kind.value} {reduce.name!r} in its actors")
        if self.terminal or any(folded.terminal for folded in self.then):
            parts.append("reports the terminal rows")
        if self.one_piece:
            parts.append("output blocks in one piece")
        return f"[{self.index}] {stage.kind.value} {stage.name!r}: " + "; ".join(parts)


@dataclass(frozen=True, slots=True)
class PhysicalPlan:
    """The Ray Data steps of a plan, and the facts known before the run that the rules read."""

    plan: Plan
    steps: tuple[Step, ...] = ()  # the stages from Plan.done on (none: the terminal rows alone)
    source_block_rows: int = 0  # rows in the smallest source block (0: unknown)
    rows_per_block: int | None = None  # a fixed size for every expansion's blocks
    keep_parents: bool = False  # the terminal step keeps the headers' parent rows

    @classmethod
    def of(
        cls,
        plan: Plan,
        *,
        source_block_rows: int = 0,
        rows_per_block: int | None = None,
        keep_parents: bool = False,
    ) -> PhysicalPlan:
        """One step per stage still to run, each with the defaults (no rule applied yet)."""
        steps = tuple(Step(i) for i in range(plan.done, len(plan.stages)))
        return cls(plan, steps, source_block_rows, rows_per_block, keep_parents)

    def explain(self) -> str:
        """The steps as text, one line each."""
        lines = ["physical plan: the Ray Data steps after the source"]
        lines += [f"  {n}. {step.describe(self.plan)}" for n, step in enumerate(self.steps, 1)]
        if not self.steps:
            lines.append("  1. the terminal rows (no stage left to run)")
        return "\n".join(lines)
