import pytest

from lineage_data._core.errors import DuplicateRootError, FencingError
from lineage_data._core.state import LineageState, Verdict


def facts(state):
    snap = state.snapshot()
    snap.pop("reports")
    return snap


def commit(state, gen, ordinals, outcome="PRESENT", group=False, stage_index=0):
    n = len(ordinals)
    return state.commit(
        stage_index,
        gen,
        ["r"] * n,
        [(o,) for o in ordinals],
        [outcome] * n,
        [None] * n,
        group=[group] * n,
    )


def test_stale_generation_changes_nothing():
    state = LineageState()
    old = state.handoff(0, ["r"], [(0,)]).generation
    new = state.handoff(0, ["r"], [(0,)]).generation  # retried elsewhere
    before = facts(state)
    result = state.commit(0, old, ["r"], [(0,)], ["FAILED"], ["late"], group=[True])
    assert result.verdicts == [Verdict.STALE]
    assert facts(state) == before
    assert (
        state.handoff(0, ["r"], [(1,)]).barred == {}
    )  # the stale GroupFailure installed no barrier
    assert commit(state, new, [0]).verdicts == [Verdict.ACCEPTED]


def test_identical_replay_is_harmless_conflicting_replay_raises():
    state = LineageState()
    gen = state.handoff(0, ["r"], [(0,)]).generation
    assert commit(state, gen, [0]).verdicts == [Verdict.ACCEPTED]
    assert commit(state, gen, [0]).verdicts == [Verdict.REPLAY]
    with pytest.raises(FencingError):
        commit(state, gen, [0], outcome="FAILED")


def test_group_failure_bars_unstarted_and_suppresses_running_siblings():
    state = LineageState()
    first = state.handoff(0, ["r", "r"], [(0,), (1,)])
    running = state.handoff(0, ["r"], [(2,)])
    state.commit(
        0,
        first.generation,
        ["r", "r"],
        [(0,), (1,)],
        ["PRESENT", "FAILED"],
        [None, "enc"],
        group=[False, True],
    )
    late = state.handoff(0, ["r", "r"], [(3,), (4,)])
    assert late.barred == {0: "enc", 1: "enc"}
    result = commit(state, running.generation, [2])
    assert result.suppressed == {0: "enc"}
    # later stages of the same level are barred too; other parents are untouched
    assert state.handoff(1, ["r"], [(0,)]).barred == {0: "enc"}
    assert state.handoff(0, ["other"], [(0,)]).barred == {}


def test_group_failure_of_a_source_row_installs_no_barrier():
    state = LineageState()
    h = state.handoff(0, ["a"], [()])
    state.commit(0, h.generation, ["a"], [()], ["FAILED"], ["x"], group=[True])
    assert state.handoff(0, ["b"], [()]).barred == {}


def test_release_forgets_parent_and_late_report_is_stale():
    state = LineageState()
    gen = state.handoff(0, ["r"], [(0,)]).generation
    state.reduced("red", ["r"], [()], {"PRESENT": 1})
    assert state.snapshot()["in_flight_parents"] == 0
    assert commit(state, gen, [0]).verdicts == [Verdict.STALE]


def test_newer_dispatch_supersedes_an_older_commit():
    # A task committed, then died before its output left the worker; Ray re-ran it and the user
    # function answered differently this time: the new dispatch's fact wins, nothing raises.
    state = LineageState()
    old = state.handoff(0, ["r"], [(0,)]).generation
    assert commit(state, old, [0], outcome="FAILED").verdicts == [Verdict.ACCEPTED]
    new = state.handoff(0, ["r"], [(0,)]).generation
    assert commit(state, new, [0]).verdicts == [Verdict.ACCEPTED]
    assert commit(state, new, [0]).verdicts == [Verdict.REPLAY]


def test_a_restarted_state_accepts_reports_of_an_earlier_incarnation():
    before = LineageState()
    gen = before.handoff(0, ["r"], [(0,)]).generation
    after = LineageState()  # the coordinator died and came back empty
    assert after.epoch != before.epoch
    assert commit(after, gen, [0]).verdicts == [Verdict.ACCEPTED]
    # ...but its own generations still fence: a unit it never dispatched in its own epoch is stale
    own = after.handoff(0, ["q"], [(0,)]).generation
    after.reduced("red", ["q"], [()], {})
    assert after.commit(0, own, ["q"], [(0,)], ["PRESENT"], [None], group=[False]).verdicts == [
        Verdict.STALE
    ]


def test_root_registration_is_idempotent_per_source_block():
    state = LineageState()
    state.register_roots(["a", "b"], "block-1")
    state.register_roots(["a", "b"], "block-1")  # the same source task, retried
    assert _since(state, 0) == (["a", "b"], 2)
    with pytest.raises(DuplicateRootError, match="'a'"):
        state.register_roots(["c", "a"], "block-2")
    state.register_roots(["c"], "block-3")
    assert _since(state, 2) == (["c"], 3)


def _since(state, cursor):
    roots, size = state.root_ids_since(cursor)
    return roots.to_pylist(), size
