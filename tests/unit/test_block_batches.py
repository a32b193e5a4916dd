"""A block of several batches (a CPU function's): one hand-off and one commit, batches of batch_size."""

import pyarrow as pa
import pytest

import lineage_data as ld
from lineage_data._core import columns as C
from lineage_data._core import outcomes
from lineage_data._core.expand import ExpandOp
from lineage_data._core.rowwise import RowStageOp
from lineage_data._core.source import with_lineage
from lineage_data._core.state import LineageState
from lineage_data._core.udf import BatchResult, failed_rows, merge, merge_all


class Counting(LineageState):
    """The lineage state, counting the calls an operator makes."""

    def __init__(self):
        super().__init__()
        self.calls = []

    def handoff(self, *args, **kwargs):
        self.calls.append("handoff")
        return super().handoff(*args, **kwargs)

    def commit(self, *args, **kwargs):
        self.calls.append("commit")
        return super().commit(*args, **kwargs)


def pages(row):
    return ({"page": i} for i in range(row["n"]))


def test_a_block_of_batches_is_one_hand_off_and_a_group_failure_bars_later_siblings():
    seen = []

    def ocr(batch):
        seen.append(len(batch["page"]))
        # doc "a", page 2 fails its whole group; later pages of "a" must not run
        return {
            "text": [
                ld.GroupFailure("blank") if (d, p) == ("a", 2) else f"{d}{p}"
                for d, p in zip(batch["d"], batch["page"], strict=True)
            ]
        }

    plan = (
        ld.from_items([{"d": "a", "n": 7}, {"d": "b", "n": 3}], id_column="d")
        .expand_lineage(pages, carry=["d"])
        .map_batches(ocr, batch_size=2)
        .plan
    )
    state = Counting()
    rows = [{"d": "a", "n": 7}, {"d": "b", "n": 3}]
    source = with_lineage(pa.Table.from_pylist(rows), ["a", "b"])
    block = C.concat(list(ExpandOp(plan.stages[0], state, rows_per_block=64)(source)))
    out = RowStageOp(plan.stages[1], 1, state)(block)
    assert state.calls == ["handoff", "commit"]
    # calls of 2 rows: a0 a1 | a2 a3 | (a4 a5 a6 barred) b0 | b1 b2
    assert seen == [2, 2, 1, 2]
    children = out.filter(pa.compute.is_null(out[C.SIZE])).to_pylist()
    by_child = {(r[C.ROOT], r[C.PATH][-1]): (r[C.OUTCOME], r[C.CAUSE]) for r in children}
    # as with one commit per call: a0 a1 finished before the failure, a3 ran beside it
    assert [by_child[("a", p)] for p in (0, 1)] == [("PRESENT", None)] * 2
    assert by_child[("a", 2)] == ("FAILED", "blank")
    assert {by_child[("a", p)] for p in range(3, 7)} == {("SUPPRESSED", "blank")}
    assert {by_child[("b", p)][0] for p in range(3)} == {"PRESENT"}


def test_a_source_level_batch_makes_no_call_and_only_its_failed_rows_become_tombstones():
    def halve(batch):
        return {"half": [ld.RecordFailure("odd") if n % 2 else n // 2 for n in batch["n"]]}

    plan = ld.from_items([{"n": n} for n in range(6)], id_column="n").map_batches(halve).plan
    state = Counting()
    ids = [str(n) for n in range(6)]
    block = with_lineage(pa.table({"n": list(range(6))}), ids)
    block = block.append_column(C.BLOCK, pa.array([7] * 6, pa.int64()))
    outcome = block.column_names.index(C.OUTCOME)  # row "5" arrives failed: it is not run
    block = block.set_column(outcome, C.OUTCOME, pa.array(["PRESENT"] * 5 + ["FAILED"]))
    out = RowStageOp(plan.stages[0], 0, state)(block).to_pylist()
    assert state.calls == []  # a source-level stage has no siblings: no coordinator call
    got = {r[C.ROOT]: (r[C.OUTCOME], r.get("half"), r[C.CAUSE], r[C.BLOCK]) for r in out}
    assert got == {
        "0": ("PRESENT", 0, None, 7),
        "1": ("FAILED", None, "odd", 7),
        "2": ("PRESENT", 1, None, 7),
        "3": ("FAILED", None, "odd", 7),
        "4": ("PRESENT", 2, None, 7),
        "5": ("SUPPRESSED", None, None, 7),
    }
    # the usual batch (every row PRESENT, every value back): values beside the lineage, in order
    whole = RowStageOp(plan.stages[0], 0, state)(
        block.slice(0, 5).filter(pa.array([True, False, True, False, True]))
    )
    assert [(r[C.ROOT], r["half"]) for r in whole.to_pylist()] == [("0", 0), ("2", 1), ("4", 2)]


def test_a_whole_source_block_is_cut_into_the_functions_batches_and_a_bad_row_fails_alone():
    seen = []

    def scale(batch):
        seen.append(len(batch["n"]))
        if 6 in batch["n"]:
            raise ValueError("six")  # isolated: the batch is halved until the row is alone
        return {"n10": [ld.RecordFailure("odd") if n == 3 else n * 10 for n in batch["n"]]}

    plan = ld.from_items([{"n": n} for n in range(10)], id_column="n")
    plan = plan.map_batches(scale, batch_size=4).plan
    block = with_lineage(pa.table({"n": list(range(10))}), [str(n) for n in range(10)])
    block = block.append_column(C.BLOCK, pa.array([5] * 10, pa.int64()))
    out = RowStageOp(plan.stages[0], 0, Counting())(block)
    assert seen[:2] == [4, 4] and seen[-1] == 2  # 0-3 | 4-7 (halved around 6) | 8-9
    assert max(seen) == 4
    got = {r[C.ROOT]: (r[C.OUTCOME], r["n10"], r[C.BLOCK]) for r in out.to_pylist()}
    assert got["3"] == ("FAILED", None, 5) and got["6"] == ("FAILED", None, 5)
    assert {k: v for k, v in got.items() if k not in ("3", "6")} == {
        str(n): ("PRESENT", n * 10, 5) for n in range(10) if n not in (3, 6)
    }


def _result(values, *, failed=()):
    statuses = [
        outcomes.rejected("ValueError: x", "s") if i in failed else outcomes.PRESENT
        for i in range(len(values))
    ]
    return BatchResult(pa.table({"v": values}), statuses, [False] * len(values))


def _one_by_one(results):
    merged = results[0]
    for result in results[1:]:
        merged = merge(merged, result, "s")
    return merged


@pytest.mark.parametrize(
    "results",
    [
        [_result([1])],
        [_result([i]) for i in range(9)],  # one concatenation
        [
            _result([1, 2]),
            failed_rows(3, outcomes.rejected("E: y", "s")),
            _result([4]),
        ],  # no values
        [
            _result([1]),
            _result(["a"]),
            _result([2.5]),
            _result(["b", "c"], failed={1}),
        ],  # conflicts
        [failed_rows(2, outcomes.rejected("E: y", "s")) for _ in range(5)],
    ],
)
def test_merging_many_calls_at_once_gives_what_merging_them_one_by_one_gives(results):
    at_once, one_by_one = merge_all(results, "s"), _one_by_one(results)
    assert at_once.table.to_pylist() == one_by_one.table.to_pylist()
    assert at_once.statuses == one_by_one.statuses and at_once.group == one_by_one.group


def test_a_source_block_in_batches_of_one_row_is_every_row_once_in_order():
    seen = []

    def tag(batch):
        seen.append(batch.num_rows)
        return batch.append_column("twice", pa.compute.multiply(batch["n"], 2))

    rows = [{"d": f"r{i:05d}", "n": i} for i in range(3000)]
    plan = ld.from_items(rows, id_column="d").map_batches(tag, batch_size=1, batch_format="pyarrow")
    op = RowStageOp(plan.plan.stages[0], 0, LineageState())
    out = op(with_lineage(pa.Table.from_pylist(rows), [r["d"] for r in rows]))
    out = C.concat(out) if isinstance(out, list) else out
    assert seen == [1] * 3000
    assert out["twice"].to_pylist() == [2 * i for i in range(3000)]
    assert out[C.ROOT].to_pylist() == [r["d"] for r in rows]
