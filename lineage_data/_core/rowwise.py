"""The 1:1 stages (``map_batches``, ``map``, ``filter``) as a Ray-free batch operator."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from itertools import compress
from typing import Any, cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lineage_data._core import columns as C
from lineage_data._core import outcomes
from lineage_data._core.guard import Guard, Watchdog, unit_key
from lineage_data._core.outcomes import Outcome, Status
from lineage_data._core.policy import CallPolicy
from lineage_data._core.stages import Filter, MapBatches, MapRows
from lineage_data._core.state import CommitResult, OperatorClient, StageClient, Verdict
from lineage_data._core.udf import BatchCaller, BatchResult, RowCaller, failed_rows, merge_all


class RowStageOp:
    """Applies one 1:1 stage to a batch of lineage rows.

    Only PRESENT entities of the stage's level reach the user function; other rows pass through or
    keep their status (:func:`outcomes.entering`). Below the source level, two coordinator calls per
    block: ``handoff`` before the function (barriers, generation), ``commit`` after it (fencing, counts).
    """

    def __init__(
        self,
        stage: MapBatches | MapRows | Filter,
        index: int,
        coordinator: StageClient | OperatorClient,
        *,
        watchdog: Watchdog | None = None,
        fn: Callable[..., Any] | None = None,
    ) -> None:
        self._stage = stage
        self._index = index
        # Source rows have no siblings, so no barrier or partial group depends on them: a source-level
        # stage makes no coordinator call (counts come from the terminal rows). Below it a stage always
        # runs under an OperatorClient (a flat plan has only source-level stages: Plan.flat).
        self._fences = cast(OperatorClient, coordinator) if stage.level > 0 else None
        self._types = C.EstablishedTypes(coordinator, stage.name)
        self._guard = Guard.of(stage, coordinator, watchdog=watchdog)
        self._isolate: Callable[[int], str] | None = None  # a block's unit keys, while isolated
        fn = fn if fn is not None else stage.call.bind()
        # batch_size is honoured on whatever block Ray Data hands over (_core.physical.batches): one
        # hand-off and one commit per block, the function still gets ``batch_size`` rows at a time.
        self._batch_rows = stage.batch_size if isinstance(stage, MapBatches) else None
        if isinstance(stage, MapBatches):
            policy = CallPolicy(stage.name, stage.on_error, stage.max_retries, self._guard.call)
            self._call: BatchCaller | RowCaller = BatchCaller(fn, policy, stage.batch_format)
        else:
            policy = CallPolicy(stage.name, stage.on_error, invoke=self._guard.call)
            self._call = RowCaller(fn, policy, predicate=isinstance(stage, Filter))

    def __call__(self, table: pa.Table) -> pa.Table:
        table = C.conform(table)
        masks = self._masks(table)
        parts: list[pa.Table] = []
        counts: Counter[str] = Counter()
        if masks is None:  # every row runs, nothing to pass through
            live = table
        else:
            passing, stopped, running = masks
            lineage = C.lineage_only(table)
            parts.append(_rows(lineage, passing))
            tomb = _rows(lineage, stopped)
            if tomb.num_rows:
                entered, counts = _entering(tomb[C.OUTCOME])
                tomb = tomb.set_column(tomb.column_names.index(C.OUTCOME), C.OUTCOME, entered)
                parts.append(tomb)
            live = _rows(table, running)
        if live.num_rows:
            parts.extend(self._run(live, counts))
        elif counts and self._fences is not None:
            self._fences.count(self._stage.name, dict(counts))
        return C.concat([p for p in parts if p.num_rows])

    def _masks(self, table: pa.Table) -> tuple[Any, Any, Any] | None:
        """Masks of the rows passed through, stopped (not PRESENT) and run; None when every row runs.

        A table with a row without a path or an outcome takes the Arrow way (such a row is in none).
        """
        level = self._stage.level
        if level == 0 and C.all_source_rows(table) and C.all_present(table[C.OUTCOME]):
            return None  # the usual source-level batch: O(1) checks and one scan
        found = C.shape(table)
        if found is None or table[C.OUTCOME].null_count:
            entity = C.depth_mask(table, level, header=False)
            live = pc.and_(entity, pc.equal(table[C.OUTCOME], Outcome.PRESENT.value))
            return pc.invert(entity), pc.and_(entity, pc.invert(live)), live
        depth, header = found
        entity = ~header & (depth == level)
        present = pc.equal(table[C.OUTCOME], Outcome.PRESENT.value)  # no Python string per row
        live = entity & np.asarray(present.to_numpy(zero_copy_only=False), dtype=bool)
        if live.all():
            return None
        return ~entity, entity & ~live, live

    def _run(self, live: pa.Table, counts: Counter[str]) -> list[pa.Table]:
        """The live rows of one block, journaled as one block (see :mod:`guard`)."""
        level = self._stage.level
        if self._fences is not None:
            # ids and paths as Python values, for the coordinator (one hand-off and one commit)
            roots: list[str] = live[C.ROOT].to_pylist()
            paths: list[tuple[int, ...]] = C.paths(live[C.PATH], level)
            key_of: Callable[[int], str] = lambda i: unit_key(roots[i], paths[i])  # noqa: E731
        else:
            key_of = _lazy_keys(live, level)
        n = live.num_rows
        whole = not self._guard.active or self._guard.block(n, key_of(0), key_of(n - 1))
        self._isolate = None if whole else key_of
        try:
            if self._fences is None:
                return self._run_unfenced(live)
            return self._run_fenced(self._fences, live, counts, roots, paths)
        finally:
            self._isolate = None
            self._guard.done_block()

    def _invoke(self, table: pa.Table, rows: Sequence[int] | range) -> BatchResult:
        """The stage's function over ``table`` (rows ``rows`` of the block); row by row if isolated."""
        key_of = self._isolate
        if key_of is None:
            return self._call(table)
        keys = [key_of(i) for i in rows]
        suspects = self._guard.suspects(keys)
        alone = [j for j, key in enumerate(keys) if key in suspects]
        rest = [j for j, key in enumerate(keys) if key not in suspects]
        # suspects first: each retry then dies on them at once, not after their neighbours
        results = {j: self._alone(table, j, keys[j]) for j in alone}
        together = self._together(table, rest, keys) if alone and len(rest) > 1 else None
        for k, j in enumerate(rest):
            results[j] = self._alone(table, j, keys[j]) if together is None else _slice(together, k)
        return merge_all([results[j] for j in range(len(keys))], self._stage.name)

    def _alone(self, table: pa.Table, j: int, key: str) -> BatchResult:
        """Row ``j`` of an isolated block, alone and journaled (or its FAILED status)."""
        with self._guard.alone():
            status = self._guard.unit(key)
            if status is not None:
                return failed_rows(1, status)
            result = self._call(table.slice(j, 1))
            self._guard.done(key)
            return result

    def _together(self, table: pa.Table, rest: list[int], keys: list[str]) -> BatchResult | None:
        """The rows of an isolated block that never crashed, as one call (None: run them alone)."""
        with self._guard.alone():
            if not self._guard.batch(len(rest), keys[rest[0]], keys[rest[-1]]):
                return None
            together = self._call(table.take(rest))
            self._guard.done_batch()
        return together

    def _run_fenced(
        self,
        fences: OperatorClient,
        live: pa.Table,
        counts: Counter[str],
        roots: list[str],
        paths: list[tuple[int, ...]],
    ) -> list[pa.Table]:
        """:meth:`_run` of a fenced stage: hand off, run the rows not barred, commit, keep the rest.

        Barred, suppressed and not PRESENT rows become tombstones; STALE rows (a newer dispatch owns
        them) are dropped.
        """
        name = self._stage.name
        n = live.num_rows
        handoff = fences.handoff(self._index, roots, paths)
        barred = handoff.barred
        tombs: list[tuple[int, Status]] = [(i, outcomes.barred(c, name)) for i, c in barred.items()]
        run_idx = [i for i in range(n) if i not in barred] if barred else list(range(n))
        result, run_idx, batches = self._run_unbarred(live, run_idx, roots, paths, tombs)
        if result is None:  # every row was barred: nothing ran, nothing to commit
            return [self._tombstones(live, tombs, roots, paths)] if tombs else []
        partial = len(run_idx) < n  # some rows were barred: the lists below are the rows run
        statuses = result.statuses
        # The usual batch: every row came back PRESENT (one C-level scan instead of a Python loop).
        all_present = statuses.count(outcomes.PRESENT) == len(statuses)
        commit = fences.commit(
            self._index,
            handoff.generation,
            [roots[i] for i in run_idx] if partial else roots,
            [paths[i] for i in run_idx] if partial else paths,
            [Outcome.PRESENT.value] * len(statuses)
            if all_present
            else [s.outcome.value for s in statuses],
            [None] * len(statuses) if all_present else [s.cause for s in statuses],
            group=result.group,
            stage=name,
            batches=batches,
            counts=dict(counts + Counter(t.outcome.value for _, t in tombs)),
        )
        keep = _kept(commit, run_idx, statuses, all_present, tombs, name)
        out = [self._tombstones(live, tombs, roots, paths)] if tombs else []
        if keep:
            whole = len(keep) == len(run_idx)
            values = result.table if whole else result.table.take(keep)
            rows = run_idx if whole else [run_idx[j] for j in keep]
            lineage = C.lineage_only(live if len(rows) == n else live.take(rows))
            out.append(_joined(values, lineage))
        return out

    def _run_unbarred(
        self,
        live: pa.Table,
        run_idx: list[int],
        roots: list[str],
        paths: list[tuple[int, ...]],
        tombs: list[tuple[int, Status]],
    ) -> tuple[BatchResult | None, list[int], list[int] | None]:
        """The function over the rows ``run_idx`` of ``live``, conformed to the established types.

        Returns the result (None: nothing ran), the rows run and, for a block cut into calls of
        ``batch_size``, the number of the call that ran each. A GroupFailure bars its parent's siblings
        in the later calls of the block, as the coordinator's barrier would (they become barred tombs).
        """
        if not run_idx:
            return None, run_idx, None
        user = live.select(C.user_columns(live.column_names))
        step = self._batch_rows
        if not step or len(run_idx) <= step:
            barred = len(run_idx) < live.num_rows
            result = self._invoke(user.take(run_idx) if barred else user, run_idx)
            return self._conform(result), run_idx, None
        stopped: dict[tuple, str] = {}
        results: list[BatchResult] = []
        ran: list[int] = []
        calls: list[int] = []
        for start in range(0, len(run_idx), step):
            chunk = []
            for i in run_idx[start : start + step]:
                cause = stopped.get((roots[i], paths[i][:-1])) if stopped else None
                if cause is None:
                    chunk.append(i)
                else:
                    tombs.append((i, outcomes.barred(cause, self._stage.name)))
            if not chunk:
                continue
            result = self._invoke(user.take(chunk), chunk)
            for j in compress(range(len(chunk)), result.group):  # a GroupFailure: a FAILED row
                key = (roots[chunk[j]], paths[chunk[j]][:-1])
                stopped.setdefault(key, result.statuses[j].cause or "")
            calls.extend([len(results)] * len(chunk))
            results.append(result)
            ran.extend(chunk)
        # the first chunk is never barred (nothing has run yet): results is not empty
        return self._conform(merge_all(results, self._stage.name)), ran, calls

    def _run_unfenced(self, live: pa.Table) -> list[pa.Table]:
        """:meth:`_run` of a source-level stage: no coordinator, no barrier; no Python work per row."""
        user = live.select(C.user_columns(live.column_names))
        step = self._batch_rows or user.num_rows
        calls = [
            self._invoke(user.slice(start, step), range(start, min(start + step, user.num_rows)))
            for start in range(0, user.num_rows, step)
        ]
        result = self._conform(merge_all(calls, self._stage.name))
        statuses = result.statuses
        lineage = C.lineage_only(live)
        if statuses.count(outcomes.PRESENT) == len(statuses):
            return [_joined(result.table, lineage)]
        present = np.fromiter((s.present for s in statuses), dtype=bool, count=len(statuses))
        tombs = [(i, statuses[i]) for i in np.flatnonzero(~present).tolist()]
        out = [self._tombstones(live, tombs)]
        if present.any():
            mask = pa.array(present)
            out.append(_joined(result.table.filter(mask), lineage.filter(mask)))
        return out

    def _tombstones(
        self,
        live: pa.Table,
        tombs: list[tuple[int, Status]],
        roots: list[str] | None = None,
        paths: list[tuple[int, ...]] | None = None,
    ) -> pa.Table:
        """The rows of ``live`` at the ``tombs`` indexes, ended with their statuses (lineage only)."""
        if roots is None or paths is None:
            roots = live[C.ROOT].to_pylist()
            paths = C.paths(live[C.PATH], self._stage.level)
        tags = live[C.BLOCK].to_pylist() if C.BLOCK in live.column_names else None
        return C.rows_to_table(
            [tombstone(roots[i], paths[i], st, tags[i] if tags else None) for i, st in tombs]
        )

    def _conform(self, result: BatchResult) -> BatchResult:
        """Values whose types conflict with the stage's established ones (other batches) fail."""
        table, failed = self._types.conform_table(result.table)
        statuses = list(result.statuses) if failed else result.statuses
        for i, cause in failed.items():
            if statuses[i].present:
                statuses[i] = outcomes.rejected(cause, self._stage.name)
        return BatchResult(table, statuses, result.group)


def _kept(
    commit: CommitResult,
    run_idx: list[int],
    statuses: list[Status],
    all_present: bool,
    tombs: list[tuple[int, Status]],
    stage: str,
) -> list[int] | range:
    """Positions in ``run_idx`` whose values the commit keeps; the tombstones of others go to ``tombs``.

    A STALE row is neither: a newer dispatch owns it.
    """
    verdicts, suppressed = commit.verdicts, commit.suppressed
    if all_present and not suppressed and Verdict.STALE not in verdicts:
        return range(len(run_idx))
    keep = []
    for j, i in enumerate(run_idx):
        if verdicts[j] is Verdict.STALE:
            continue  # a newer dispatch owns this row
        if j in suppressed:
            tombs.append((i, outcomes.barred(suppressed[j], stage)))
        elif statuses[j].present:
            keep.append(j)
        else:
            tombs.append((i, statuses[j]))
    return keep


def _slice(result: BatchResult, i: int) -> BatchResult:
    """Row ``i`` of ``result``."""
    return BatchResult(
        result.table.slice(i, 1), result.statuses[i : i + 1], result.group[i : i + 1]
    )


def _lazy_keys(live: pa.Table, level: int) -> Callable[[int], str]:
    """The unit key of row ``i`` of ``live``; the whole columns are read only past the ends."""
    n = live.num_rows
    cache: list[list[str]] = []

    def key_of(i: int) -> str:
        if i in (0, n - 1) and not cache:
            row = live.slice(i, 1)
            return unit_key(row[C.ROOT][0].as_py(), C.paths(row[C.PATH], level)[0])
        if not cache:
            roots, paths = live[C.ROOT].to_pylist(), C.paths(live[C.PATH], level)
            cache.append([unit_key(r, p) for r, p in zip(roots, paths, strict=True)])
        return cache[0][i]

    return key_of


def _joined(values: pa.Table, lineage: pa.Table) -> pa.Table:
    """The function's values beside the rows' lineage columns (same rows, same order)."""
    return pa.Table.from_arrays(
        [*values.columns, *lineage.columns], names=[*values.column_names, *lineage.column_names]
    )


def _rows(table: pa.Table, mask: Any) -> pa.Table:
    return C.pick(table, mask) if isinstance(mask, np.ndarray) else table.filter(mask)


def _entering(column: pa.ChunkedArray) -> tuple[pa.Array, Counter[str]]:
    """:func:`outcomes.entering_outcomes` over an outcome column (per distinct value), and its counts.

    ``column`` has no null: a row without an outcome is in no mask (:meth:`RowStageOp._masks`).
    """
    encoded = column.combine_chunks().dictionary_encode()
    distinct = outcomes.entering_outcomes(encoded.dictionary.to_pylist())
    entered = pa.array(distinct, pa.string()).take(encoded.indices)
    counts = pc.value_counts(entered)
    values, numbers = counts.field("values").to_pylist(), counts.field("counts").to_pylist()
    return entered, Counter(dict(zip(values, numbers, strict=True)))


def tombstone(
    root: str, path: tuple[int, ...], status: Status, block: int | None = None
) -> dict[str, object]:
    """The lineage row of an entity that ended with ``status`` (``block``: its block tag, if any)."""
    row: dict[str, object] = {
        C.ROOT: root,
        C.PATH: list(path),
        C.OUTCOME: status.outcome.value,
        C.CAUSE: status.cause,
        C.STAGE: status.stage,
    }
    if block is not None:
        row[C.BLOCK] = block
    return row
