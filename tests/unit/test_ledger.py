"""The consumer's ledger and the holders' idempotent hand-off: pure Python, no Ray."""

import pyarrow as pa
import pytest

import lineage_data as ld
from lineage_data._core import columns as C
from lineage_data._core.errors import DuplicateRootError
from lineage_data._core.ledger import Ledger, as_root_headers, view
from lineage_data._core.local import run_local
from lineage_data._core.reduce import GroupBuffer, ReduceOp


def closed(roots, outcome="PRESENT"):
    return C.conform(
        pa.table({C.ROOT: roots, C.OUTCOME: [outcome] * len(roots), "v": range(len(roots))})
    )


def test_closed_plan_drops_second_copies_and_names_the_missing():
    ledger = Ledger(0, ["a", "b", "c"], started_at=10.0)
    out = ledger.take(closed(["a", "b", "a"]), now=11.0)
    assert out[C.ROOT].to_pylist() == ["a", "b"]
    assert ledger.take(closed(["b"]), now=12.0).num_rows == 0
    assert (ledger.duplicates, ledger.missing(), ledger.progress()["committed"]) == (2, ["c"], 2)
    assert ledger.terminal()["a"] == ("PRESENT", None, None, 1.0)


def test_lost_roots_become_failed_rows_with_a_lost_cause():
    ledger = Ledger(0, ["a", "b"], started_at=0.0)
    ledger.take(closed(["a"]))
    lost = ledger.lost(ledger.missing(), attempts=2)
    assert lost[C.ROOT].to_pylist() == ["b"]
    assert lost[C.OUTCOME].to_pylist() == ["FAILED"]
    assert lost[C.CAUSE][0].as_py().startswith("LostError: ")
    assert ledger.missing() == [] and ledger.progress()["failed"] == 1
    assert set(lost.column_names) == {C.ROOT, C.OUTCOME, C.CAUSE, C.STAGE}


def open_rows(plan):
    """Rows of an open-level plan with their headers, as the terminal step hands them over."""
    from lineage_data._core.ops import build_op
    from lineage_data._core.state import LineageState

    state = LineageState()
    table = plan.source.table
    tables = [table]
    for index in range(len(plan.stages)):
        op = build_op(plan, index, state, rows_per_block=3, holders=GroupBuffer())
        out = []
        for t in tables:
            res = op(t)
            out.extend([res] if isinstance(res, pa.Table) else list(res))
        tables = out
    return [C.conform(t).drop_columns([C.PARENT]) for t in tables]


def test_open_level_root_completes_when_every_announced_node_arrived_in_any_order():
    docs = [{"d": "x", "n": 4}, {"d": "y", "n": 0}, {"d": "z", "n": 2}]
    plan = (
        ld.from_items(docs, id_column="d")
        .expand_lineage(lambda r: ({"p": i} for i in range(r["n"])))
        .expand_lineage(lambda r: ({"q": j} for j in range(r["p"])))
    ).plan
    rows = C.concat(open_rows(plan)).to_pylist()
    for seed in range(5):
        import random

        order = rows[:]
        random.Random(seed).shuffle(order)
        ledger = Ledger(2, ["x", "y", "z"], started_at=0.0)
        delivered = []
        for i, row in enumerate(order):
            out = ledger.take(C.rows_to_table([row]).drop_columns([C.PARENT]))
            delivered.extend(out.to_pylist())
            if i < len(order) - 1 and row[C.ROOT] == "x":
                assert not ledger.delivered("x") or all(r[C.ROOT] != "x" for r in order[i + 1 :])
        assert ledger.missing() == []
        assert sorted(r[C.ROOT] for r in delivered) == ["x"] * 6 + ["z"]  # 0+1+2+3 and 0+1
        assert all(C.SIZE not in r for r in delivered)
        again = ledger.take(C.rows_to_table(order).drop_columns([C.PARENT]))
        assert again.num_rows == 0


def test_open_level_root_with_a_lost_row_is_missing_and_a_repair_drops_what_arrived():
    plan = (
        ld.from_items([{"d": "x", "n": 5}], id_column="d").expand_lineage(
            lambda r: ({"p": i} for i in range(r["n"]))
        )
    ).plan
    rows = C.concat(open_rows(plan)).to_pylist()
    ledger = Ledger(1, ["x"], started_at=0.0)
    first = ledger.take(C.rows_to_table(rows[1:]).drop_columns([C.PARENT]))  # child 0 lost
    assert ledger.missing() == ["x"] and first.num_rows == 4
    repair = ledger.take(C.rows_to_table(rows).drop_columns([C.PARENT]))
    assert repair[C.PATH].to_pylist() == [[0]] and ledger.missing() == []


def test_kept_rows_hold_every_first_copy_with_headers_and_view_as_take_would_deliver():
    def boom(r):
        if r["n"] < 0:
            raise ValueError("no pages")
        return ({"p": i} for i in range(r["n"]))

    docs = [{"d": "x", "n": 3}, {"d": "y", "n": 0}, {"d": "z", "n": -1}]
    plan = ld.from_items(docs, id_column="d").expand_lineage(boom, name="pages").plan
    table = C.concat(open_rows(plan))
    ledger, kept_ledger = (
        Ledger(1, ["x", "y", "z"], started_at=0.0),
        Ledger(1, ["x", "y", "z"], started_at=0.0),
    )
    delivered = ledger.take(table)
    rows, stand_ins = kept_ledger.take_kept(C.concat([table, table]))  # a copy of every row
    assert rows.num_rows == table.num_rows  # first copies only, three headers among them
    assert sorted(rows.filter(pa.compute.is_valid(rows[C.SIZE]))[C.ROOT].to_pylist()) == list("xyz")
    seen = C.concat([view(rows), stand_ins]).drop_columns([C.SIZE, C.PARENT])
    assert sorted(map(str, seen.to_pylist())) == sorted(map(str, delivered.to_pylist()))
    assert stand_ins[C.ROOT].to_pylist() == ["z"] and kept_ledger.missing() == []
    lost = as_root_headers(kept_ledger.lost(["w"], 1))
    assert lost.select([C.ROOT, C.PATH, C.SIZE, C.OUTCOME]).to_pylist() == [
        {C.ROOT: "w", C.PATH: [], C.SIZE: 0, C.OUTCOME: "FAILED"}
    ]


def test_a_source_that_names_no_roots_expects_every_root_that_arrived_whole_or_in_part():
    plan = (
        ld.from_items([{"d": "x", "n": 5}, {"d": "y", "n": 1}], id_column="d").expand_lineage(
            lambda r: ({"p": i} for i in range(r["n"]))
        )
    ).plan
    rows = C.concat(open_rows(plan)).to_pylist()
    ledger = Ledger(1, [], started_at=0.0)  # a Ray Dataset source: nothing announced up front
    x_child_0 = next(r for r in rows if r[C.ROOT] == "x" and r[C.PATH] == [0])
    ledger.take(C.rows_to_table([r for r in rows if r is not x_child_0]).drop_columns([C.PARENT]))
    assert ledger.missing() == [] and ledger.progress()["total"] == 0
    ledger.expect_arrived()
    assert ledger.missing() == ["x"] and ledger.progress()["total"] == 2
    ledger.take(C.rows_to_table([x_child_0]).drop_columns([C.PARENT]))
    assert ledger.missing() == [] and ledger.delivered("x") and ledger.delivered("y")


def test_holder_hands_a_completed_group_again_to_a_retried_piece_until_forgotten():
    plan = (
        ld.from_items([{"d": "x", "n": 3}], id_column="d").expand_lineage(
            lambda r: ({"p": i} for i in range(r["n"]))
        )
    ).plan
    rows = C.concat(open_rows(plan)).to_pylist()
    buffer = GroupBuffer()
    assert buffer.add(rows[:2]) == []
    done = buffer.add(rows[2:])
    assert [key for key, _ in done] == [("x", ())]
    assert [key for key, _ in buffer.add(rows[2:])] == [("x", ())]  # the task died and was re-run
    buffer.forget(["x"])
    assert buffer.add(rows[2:]) == []  # forgotten: a late copy starts a new partial group


def test_handed_groups_are_bounded():
    buffer = GroupBuffer(keep_handed=2)
    for root in "abc":
        header = {C.ROOT: root, C.PATH: [], C.SIZE: 0, C.OUTCOME: "PRESENT", C.CAUSE: None}
        assert len(buffer.add([header])) == 1
    header_a = {C.ROOT: "a", C.PATH: [], C.SIZE: 0, C.OUTCOME: "PRESENT", C.CAUSE: None}
    header_c = {**header_a, C.ROOT: "c"}
    assert len(buffer.add([header_c])) == 1  # kept
    assert len(buffer.add([header_a])) == 1  # evicted, but a header alone completes its group again


def test_run_local_uses_the_ledger_and_reduce_op_still_reduces():
    run = run_local(
        ld.from_items([{"d": "x", "n": 3}], id_column="d")
        .expand_lineage(lambda r: ({"p": i} for i in range(r["n"])))
        .reduce_lineage()
        .plan
    )
    assert run.rows[0]["p"] == [0, 1, 2]
    assert run.ledger.terminal()["x"][0] == "PRESENT"
    assert ReduceOp  # imported for the type of holders used above


def test_roots_delivered_before_they_are_expected_are_not_unexpected_once_announced():
    # a Ray Dataset source announces its roots while the run goes: rows may come first
    ledger = Ledger(0, started_at=0.0)
    ledger.take(closed(["a", "b"]), now=1.0)
    assert ledger.unexpected() == [] and ledger.progress()["total"] == 0
    ledger.expect(["a", "b", "c"])
    ledger.expect(["c"])  # announced twice: counted once
    assert (ledger.unexpected(), ledger.missing(), ledger.progress()["total"]) == ([], ["c"], 3)
    ledger.take(closed(["x"]), now=2.0)
    assert ledger.unexpected() == ["x"]


def test_terminal_rows_keep_causes_of_failed_roots_and_count_without_a_loop():
    from lineage_data._core.ledger import TerminalRows
    from lineage_data._core.state import derived_counts

    ledger = Ledger(0, ["a", "b", "c", "d"], started_at=0.0)
    rows = C.conform(
        pa.table(
            {
                C.ROOT: ["a", "b", "c", "d"],
                C.OUTCOME: ["PRESENT", "FAILED", "DROPPED", "PRESENT"],
                C.CAUSE: [None, "ValueError: x", None, None],
                C.STAGE: [None, "ocr", "keep", None],
            }
        )
    )
    ledger.take(rows, now=2.5)
    terminal = ledger.terminal()
    assert isinstance(terminal, TerminalRows)
    assert dict(terminal) == {
        "a": ("PRESENT", None, None, 2.5),
        "b": ("FAILED", "ValueError: x", "ocr", 2.5),
        "c": ("DROPPED", None, "keep", 2.5),
        "d": ("PRESENT", None, None, 2.5),
    }
    stages, derived = ["keep", "ocr"], ["keep", "ocr"]
    assert derived_counts(stages, derived, terminal) == derived_counts(
        stages, derived, dict(terminal)
    )
    # the report's columns (built without a Python row per root) say the same as the mapping
    columns = terminal.to_arrow().to_pylist()
    assert [
        (r["root"], r["outcome"], r["cause"], r["stage"], r["committed_s"]) for r in columns
    ] == [(root, *row) for root, row in terminal.items()]
    from lineage_data.report import RunReport

    snapshot = {"counts": {}, "progress": {"reports": 0}}
    report = RunReport.from_snapshot({**snapshot, "terminal": terminal}, {}, 1.0)
    same = RunReport.from_snapshot({**snapshot, "terminal": dict(terminal)}, {}, 1.0)
    assert report.parents.sort("root").equals(same.parents.sort("root"))


def test_the_report_builds_its_parents_table_when_asked_in_commit_order_and_pickles(monkeypatch):
    import pickle

    from lineage_data._core import ledger as L
    from lineage_data.report import RunReport

    ledger = Ledger(0, ["a", "b", "c"], started_at=0.0)
    ledger.take(closed(["b"]), now=3.0)
    ledger.take(closed(["c", "a"]), now=2.0)  # completed later, at an earlier clock (a clock step)
    asked = []
    monkeypatch.setattr(
        L.TerminalRows,
        "to_arrow",
        lambda self, f=L.TerminalRows.to_arrow: asked.append(1) or f(self),
    )
    snapshot = {"counts": {}, "progress": {"reports": 0}, "terminal": ledger.terminal()}
    report = RunReport.from_snapshot(snapshot, {}, 1.0)
    assert not asked  # a run nobody asks about does not pay for the table
    assert report.parents["root"].to_list() == ["c", "a", "b"]  # by commit time, ties in order
    assert report.parents["committed_s"].to_list() == [2.0, 2.0, 3.0] and len(asked) == 1
    again = pickle.loads(pickle.dumps(report))
    assert again.parents.equals(report.parents) and again.extra == report.extra


def test_terminal_rows_read_later_describe_the_roots_done_when_asked():
    ledger = Ledger(0, ["a", "b", "c", "d"], started_at=0.0)
    rows = C.conform(
        pa.table(
            {
                C.ROOT: ["a", "b"],
                C.OUTCOME: ["PRESENT", "FAILED"],
                C.CAUSE: [None, "ValueError: x"],
                C.STAGE: [None, "ocr"],
            }
        )
    )
    ledger.take(rows, now=1.0)
    terminal = ledger.terminal()  # codes, times and counts are read from the ledger on first use
    ledger.take(closed(["c"], outcome="DROPPED"), now=2.0)
    ledger.lost(["d"], attempts=1, now=3.0)
    assert len(terminal) == 2 and dict(terminal) == {
        "a": ("PRESENT", None, None, 1.0),
        "b": ("FAILED", "ValueError: x", "ocr", 1.0),
    }
    assert terminal.outcome_stage_counts() == {("PRESENT", None): 1, ("FAILED", "ocr"): 1}
    later = ledger.terminal()
    assert later.outcome_stage_counts() == {
        ("PRESENT", None): 1,
        ("FAILED", "ocr"): 1,
        ("DROPPED", None): 1,
        ("FAILED", None): 1,
    }
    assert ledger.progress() == {"committed": 1, "failed": 3, "total": 4, "in_flight_parents": 0}


def test_completed_since_names_roots_in_completion_order():
    ledger = Ledger(0, ["a", "b", "c"], started_at=0.0)
    ledger.take(closed(["b"]))
    names, cursor = ledger.completed_since(0)
    ledger.take(closed(["c", "a"]))
    assert (names, cursor) == (["b"], 1)
    assert ledger.completed_since(cursor) == (["c", "a"], 3)


def test_a_finished_root_costs_a_few_bytes():
    n = 50_000
    roots = [f"doc-{i:09d}" for i in range(n)]  # 13-byte ids
    ledger = Ledger(0, roots, started_at=0.0)
    for lo in range(0, n, 5_000):
        ledger.take(closed(roots[lo : lo + 5_000]))
    assert ledger.missing() == [] and ledger.progress()["committed"] == n
    assert ledger.nbytes / n < 64


def tagged(roots, blocks, outcome="PRESENT"):
    table = closed(roots, outcome)
    return table.append_column(C.BLOCK, pa.array(blocks, pa.int64()))


def test_a_root_again_from_its_own_block_is_a_copy_from_another_block_a_duplicate_id():
    ledger = Ledger(0, started_at=0.0)
    assert ledger.take(tagged(["a", "b"], [7, 7]))[C.ROOT].to_pylist() == ["a", "b"]
    assert ledger.take(tagged(["b", "c"], [7, 9]))[C.ROOT].to_pylist() == ["c"]  # b: a re-run
    assert ledger.duplicates == 1
    with pytest.raises(ld.DuplicateRootError, match="duplicate lineage root id 'c'"):
        ledger.take(tagged(["d", "c"], [9, 7]))


def test_a_duplicate_id_within_one_batch_and_in_a_failed_row_is_refused():
    ledger = Ledger(0, started_at=0.0)
    with pytest.raises(ld.DuplicateRootError, match="'a'"):
        ledger.take(tagged(["a", "b", "a"], [1, 1, 2]))
    ledger = Ledger(0, started_at=0.0)
    ledger.take(tagged(["a"], [1]))
    with pytest.raises(ld.DuplicateRootError, match="'a'"):
        ledger.take(tagged(["a"], [2], outcome="FAILED"))


def test_untagged_rows_keep_the_copy_rule():
    ledger = Ledger(0, started_at=0.0)
    ledger.take(tagged(["a"], [1]))
    assert ledger.take(closed(["a"])).num_rows == 0
    assert ledger.take(tagged(["a"], [None])).num_rows == 0
    assert ledger.duplicates == 2


def test_a_reserved_ledger_accounts_exactly_as_one_that_grows():
    batches = [
        C.conform(
            pa.table({C.ROOT: [f"r{i}" for i in range(lo, lo + 700)], C.OUTCOME: ["PRESENT"] * 700})
        )
        for lo in range(0, 3_500, 700)
    ]
    batches.append(batches[1])  # a copy: dropped by both
    reserved, grown = Ledger(0, started_at=0.0), Ledger(0, started_at=0.0)
    reserved.reserve(3_500)
    for batch in batches:
        assert reserved.take(batch, 1.0).equals(grown.take(batch, 1.0))
    assert reserved.duplicates == grown.duplicates == 700
    assert reserved.progress() == grown.progress()


def test_a_ledger_reserved_for_tagged_rows_accounts_exactly_as_one_that_grows():
    ids = [[f"r{i}" for i in range(lo, lo + 700)] for lo in range(0, 3_500, 700)]
    batches = [tagged(block, [n + 1] * 700) for n, block in enumerate(ids)]
    batches.append(batches[2])  # the same block again (a re-run source task): a copy, dropped
    reserved, grown = Ledger(0, started_at=0.0), Ledger(0, started_at=0.0)
    reserved.reserve(3_500, tagged=True)
    column = reserved._blocks.data  # the block tags' column, sized once
    for batch in batches:
        assert reserved.take(batch, 1.0).equals(grown.take(batch, 1.0))
    assert reserved.duplicates == grown.duplicates == 700
    assert reserved.progress() == grown.progress()
    assert reserved._blocks.data is column and len(column) == 3_500  # never grown, never copied
    for ledger in (reserved, grown):  # an id of block 1 in another block: refused by both
        with pytest.raises(DuplicateRootError, match="r5"):
            ledger.take(tagged(["x", "r5"], [9, 9]), 1.0)
