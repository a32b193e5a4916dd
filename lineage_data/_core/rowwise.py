"""The 1:1 stages (``map_batches``, ``map``, ``filter``) as a Ray-free batch operator."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from lineage_data._core import columns as C
from lineage_data._core import outcomes
from lineage_data._core.outcomes import Outcome, Status
from lineage_data._core.stages import Filter, MapBatches, MapRows
from lineage_data._core.state import Verdict
from lineage_data._core.udf import BatchCaller, BatchResult, RowCaller


class RowStageOp:
    """Applies one 1:1 stage to a batch of lineage rows.

    Only PRESENT entities of the stage's level reach the user function; headers and rows of other levels
    pass through; FAILED/SUPPRESSED inputs come out SUPPRESSED and DROPPED ones stay DROPPED. Two
    coordinator calls per batch: ``handoff`` before the function (barriers, generation) and ``commit``
    after it (new barriers, fencing, counts).
    """

    def __init__(self, stage: MapBatches | MapRows | Filter, index: int, coordinator: Any) -> None:
        self._stage = stage
        self._index = index
        self._coordinator = coordinator
        # Source rows have no siblings: no barrier can stop them and no partial group depends on them,
        # so a source-level stage makes no coordinator call at all. A duplicate is caught at the
        # terminal record; the stage's counts are derived from the terminal rows.
        self._fenced = stage.level > 0
        self._types = C.EstablishedTypes(coordinator, stage.name)
        fn = stage.call.bind()
        if isinstance(stage, MapBatches):
            self._call: BatchCaller | RowCaller = BatchCaller(
                fn,
                stage=stage.name,
                batch_format=stage.batch_format,
                on_error=stage.on_error,
                max_retries=stage.max_retries,
            )
        else:
            self._call = RowCaller(
                fn,
                stage=stage.name,
                on_error=stage.on_error,
                predicate=isinstance(stage, Filter),
            )

    def __call__(self, table: pa.Table) -> pa.Table:
        """Process one batch."""
        table = C.conform(table)
        entity = C.depth_mask(table, self._stage.level, header=False)
        live_mask = pc.and_(entity, pc.equal(table[C.OUTCOME], Outcome.PRESENT.value))
        parts = [C.lineage_only(table.filter(pc.invert(entity)))]
        tomb = C.lineage_only(table.filter(pc.and_(entity, pc.invert(live_mask))))
        tomb = tomb.set_column(
            tomb.column_names.index(C.OUTCOME),
            C.OUTCOME,
            pa.array(outcomes.entering_outcomes(tomb[C.OUTCOME].to_pylist()), pa.string()),
        )
        parts.append(tomb)
        counts = Counter(tomb[C.OUTCOME].to_pylist())
        live = table.filter(live_mask)
        if live.num_rows:
            parts.extend(self._run(live, counts))
        elif counts and self._fenced:
            self._coordinator.count(self._stage.name, dict(counts))
        return C.concat([p for p in parts if p.num_rows])

    def _run(self, live: pa.Table, counts: Counter[str]) -> list[pa.Table]:
        name = self._stage.name
        roots = live[C.ROOT].to_pylist()
        paths = [tuple(p) for p in live[C.PATH].to_pylist()]
        handoff = self._coordinator.handoff(self._index, roots, paths) if self._fenced else None
        barred = handoff.barred if handoff is not None else {}
        tombs: list[tuple[int, Status]] = [(i, outcomes.barred(c, name)) for i, c in barred.items()]
        run_idx = [i for i in range(live.num_rows) if i not in barred]
        result = (
            self._call(live.take(run_idx).select(C.user_columns(live.column_names)))
            if run_idx
            else None
        )
        if result is not None:
            result = self._conform(result)
        statuses = result.statuses if result is not None else []
        if handoff is not None and result is not None:
            commit = self._coordinator.commit(
                self._index,
                handoff.generation,
                [roots[i] for i in run_idx],
                [paths[i] for i in run_idx],
                [s.outcome.value for s in statuses],
                [s.cause for s in statuses],
                group=result.group,
                stage=name,
                counts=dict(counts + Counter(t.outcome.value for _, t in tombs)),
            )
            verdicts, suppressed = commit.verdicts, commit.suppressed
        else:
            verdicts, suppressed = [Verdict.ACCEPTED] * len(statuses), {}
        keep: list[int] = []
        for j, i in enumerate(run_idx):
            if verdicts[j] is Verdict.STALE:
                continue  # a newer dispatch owns this row
            if j in suppressed:
                tombs.append((i, outcomes.barred(suppressed[j], name)))
            elif statuses[j].present:
                keep.append(j)
            else:
                tombs.append((i, statuses[j]))
        out = []
        if tombs:
            out.append(C.rows_to_table([_tombstone(roots[i], paths[i], st) for i, st in tombs]))
        if keep and result is not None:
            values = result.table.take(keep)
            lineage = C.lineage_only(live.take([run_idx[j] for j in keep]))
            for column in lineage.column_names:
                values = values.append_column(column, lineage[column])
            out.append(values)
        return out

    def _conform(self, result: BatchResult) -> BatchResult:
        """Values whose types conflict with the stage's established ones (other batches) fail."""
        table, failed = self._types.conform_table(result.table)
        if not failed:
            return BatchResult(table, result.statuses, result.group)
        statuses = list(result.statuses)
        for i, cause in failed.items():
            if statuses[i].present:
                statuses[i] = outcomes.rejected(cause, self._stage.name)
        return BatchResult(table, statuses, result.group)


def _tombstone(root: str, path: tuple[int, ...], status: Status) -> dict:
    return {
        C.ROOT: root,
        C.PATH: list(path),
        C.OUTCOME: status.outcome.value,
        C.CAUSE: status.cause,
        C.STAGE: status.stage,
    }
