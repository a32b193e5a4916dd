"""The crash journal and the guard, in-process (the Ray cases are in tests/faults/test_fault_crashes.py)."""

from __future__ import annotations

import pytest

import lineage_data as ld
from lineage_data._core import guard as guard_module
from lineage_data._core.guard import Guard, block_key, unit_key
from lineage_data._core.state import LineageState


def test_an_attempt_that_never_ends_is_a_crash_and_ended_ones_are_forgotten():
    state = LineageState()
    assert state.attempt("s", "k") == (0, 0)
    assert state.attempt("s", "k") == (1, 0)  # the first never ended: its process died
    assert state.attempt("s", "other", ["k"]) == (0, 0)
    assert state.attempt("s", "k") == (1, 0)  # one of the two earlier attempts ended
    state.attempt("s", None, ["k", "k", "other"])
    assert state.journal._attempts == {}  # every attempt ended: nothing kept
    assert state.attempt("t", "k") == (0, 0)  # keys are per stage


def test_a_hung_attempt_is_counted_apart():
    state = LineageState()
    state.attempt("s", "k")
    state.hung("s", "k")
    assert state.attempt("s", "k") == (1, 1)


def test_a_crashed_block_is_isolated_and_its_crashing_unit_fails_after_max_crash_retries_plus_one():
    state = LineageState()
    first, last = unit_key("doc", (0,)), unit_key("doc", (3,))
    bad = unit_key("doc", (1,))
    guard = Guard("ocr", state, max_crash_retries=2)
    assert guard.block(4, first, last)  # attempt 1: whole (its process dies: death 1)
    guard = Guard("ocr", state, max_crash_retries=2)  # the retry, in a new process
    assert not guard.block(4, first, last)  # one crash: isolated at once
    assert guard.unit(first) is None
    guard.done(first)
    assert guard.unit(bad) is None  # the row that kills the process, alone (death 2)
    guard = Guard("ocr", state, max_crash_retries=2)
    assert not guard.block(4, first, last)
    assert guard.suspects([first, bad, last]) == {bad}  # run first: it fails before the others
    assert guard.unit(bad) is None  # two deaths in all: one more try (death 3)
    guard = Guard("ocr", state, max_crash_retries=2)
    assert not guard.block(4, first, last)
    status = guard.unit(bad)  # max_crash_retries + 1 = 3 deaths: it fails, not run again
    assert status is not None and status.outcome.value == "FAILED"
    assert status.cause.startswith("WorkerCrashedError: stage 'ocr': the worker died 3 times")
    assert guard.batch(2, unit_key("doc", (2,)), last)  # the others together, journaled apart
    guard.done_batch()
    fresh = unit_key("doc", (7,))  # a unit of a block isolated for other reasons (no deaths)
    for _ in range(2):
        assert Guard("ocr", state, max_crash_retries=1).unit(fresh) is None
    assert Guard("ocr", state, max_crash_retries=1).unit(fresh) is not None  # two deaths alone


def test_the_cause_names_why_the_processes_died_when_the_journal_can_tell():
    class Journal(LineageState):
        """The coordinator as a Ray worker sees it: each attempt says who makes it."""

        def __init__(self):
            super().__init__()
            self.who = "w0"

        def attempt(self, stage, key, ended=(), who=None):
            return super().attempt(stage, key, ended, self.who if key is not None else None)

        def why_crashed(self, stage, key):
            died = self.crashed_by(stage, key)
            return f"Segmentation fault in {','.join(died)}" if died else None

    journal = Journal()
    key = unit_key("doc", (1,))
    for who in ("w1", "w2", "w3"):  # three processes begin the unit and die
        journal.who = who
        assert Guard("ocr", journal, max_crash_retries=2).unit(key) is None
    journal.who = "w4"
    status = Guard("ocr", journal, max_crash_retries=2).unit(key)
    assert status is not None
    assert status.cause == (
        "WorkerCrashedError: stage 'ocr': the worker died 3 times on this input "
        "(Segmentation fault in w1,w2,w3)"
    )
    journal.attempt("ocr", None, [key] * 4)
    assert journal.crashed_by("ocr", key) == []  # forgotten with the key


def test_a_unit_that_hung_fails_with_a_timeout():
    state = LineageState()
    guard = Guard("pages", state, timeout_s=60)
    key = unit_key("a.pdf", ())
    state.attempt("pages", key)
    state.hung("pages", key)
    status = guard.unit(key)
    assert status is not None
    assert status.cause == "TimeoutError: stage 'pages': no result in 60 s"


def test_without_a_journal_the_guard_does_nothing():
    class TypesOnly:
        def establish_types(self, stage, types):
            return types

    guard = Guard("s", TypesOnly(), timeout_s=1, watchdog=True)
    assert not guard.active and guard.block(3, "a", "b")
    assert guard.call(lambda x: x + 1, 1) == 2  # no watchdog armed: nothing could journal it


def test_block_keys_name_size_and_ends():
    assert block_key(2, "a", "b") != block_key(3, "a", "b") != block_key(2, "a", "c")


@pytest.mark.parametrize(
    "options",
    [{"max_crash_retries": -1}, {"max_crash_retries": 1.5}, {"timeout_s": 0}, {"timeout_s": "9"}],
)
def test_bad_fault_options_are_plan_errors(options):
    with pytest.raises(ld.PlanError):
        ld.from_items([{"a": 1}]).map(lambda r: r, **options)


def test_units_an_earlier_attempt_crashed_or_hung_on_are_the_suspects():
    state = LineageState()
    keys = [unit_key("doc", (i,)) for i in range(4)]
    state.attempt("ocr", keys[0], [])
    state.attempt("ocr", keys[1], [keys[0]])  # keys[0] ended; keys[1] never does
    state.attempt("ocr", keys[2])
    state.hung("ocr", keys[2])  # the watchdog ends its process: it never ends either
    state.attempt("ocr", keys[3])
    state.attempt("ocr", None, [keys[3]])
    guard = Guard("ocr", state)
    assert guard.suspects(keys) == {keys[1], keys[2]}
    assert Guard("other", state).suspects(keys) == set()  # per stage


def test_an_isolated_block_that_ran_through_leaves_no_unit_that_reads_as_crashed():
    """Its process dying after the block (a later stage, a node lost) fails none of its units."""
    state = LineageState()
    keys = [unit_key("doc", (i,)) for i in range(3)]
    # the block's process dies once, not by its input
    assert Guard("ocr", state, max_crash_retries=1).block(3, keys[0], keys[-1])
    guard = Guard("ocr", state, max_crash_retries=1)
    assert not guard.block(3, keys[0], keys[-1])  # isolated
    for key in keys:
        assert guard.unit(key) is None
        guard.done(key)
    guard.done_block()  # then this process dies too, before any other attempt
    guard = Guard("ocr", state, max_crash_retries=1)
    assert not guard.block(3, keys[0], keys[-1])
    assert guard.suspects(keys) == set()
    assert all(guard.unit(key) is None for key in keys)  # none of them ever crashed


def _new_life(state, stage="ocr", max_crash_retries=2):
    """A restarted actor's process: the module's lives forgotten, as in a new process."""
    guard_module._LIVES.clear()
    return guard_module.born(stage, state, "actor-1", max_crash_retries)


@pytest.fixture
def fresh_lives():
    guard_module._LIVES.clear()
    yield
    guard_module._LIVES.clear()


@pytest.mark.usefixtures("fresh_lives")
def test_an_actor_that_keeps_dying_isolates_its_blocks_even_when_their_keys_change():
    """The backstop: the block journal never sees a crash (a new key each retry), the lives do.

    Each isolated life runs a unit or two, reports them (the life was not barren) and dies on the
    bad unit; that unit's own crashes grow by one each such round, so the loop ends within
    ``max_crash_retries`` rounds of ``max_crash_retries + 2`` lives.
    """
    state = LineageState()
    bad = unit_key("doc", (1,))
    units = [unit_key("doc", (0,)), bad, unit_key("doc", (2,))]
    deaths = 0
    for retry in range(40):
        _new_life(state)
        guard = Guard("ocr", state, max_crash_retries=2)
        if guard.block(3, units[0], f"{units[-1]}#{retry}"):  # a key no retry repeats
            deaths += 1  # the block runs whole and dies on its bad unit
            continue
        suspects = guard.suspects(units)
        failed = []
        for key in sorted(units, key=lambda k: k not in suspects):
            status = guard.unit(key)
            if status is not None:
                failed.append((key, status))
            elif key == bad:
                break  # dies alone on it
            else:
                guard.done(key)
        else:
            guard.done_block()
            assert [k for k, _ in failed] == [bad]
            assert failed[0][1].cause.startswith("WorkerCrashedError: stage 'ocr': the worker died")
            break
        deaths += 1
    else:
        pytest.fail("the actor kept dying")
    assert deaths <= guard_module.barren_limit(2) + 2
    assert guard_module._LIVES == {}  # this life reported finished work: it ended


@pytest.mark.usefixtures("fresh_lives")
def test_a_life_that_finished_work_forgets_the_barren_ones_before_it():
    state = LineageState()
    for _ in range(3):
        _new_life(state)  # three lives die before finishing anything
    assert _new_life(state) == 3
    guard = Guard("ocr", state, max_crash_retries=2)
    assert not guard.block(1, "a", "a")  # barren lives past max_crash_retries: isolated
    assert guard.unit("a") is None
    guard.done("a")
    guard.done_block()  # the isolated block's ends are reported at once, with the life's
    assert _new_life(state) == 0  # the next death starts from a clean slate
    assert Guard("ocr", state, max_crash_retries=2).block(1, "b", "b")


@pytest.mark.usefixtures("fresh_lives")
def test_an_actor_that_dies_with_nothing_to_isolate_fails_its_stage_typed():
    state = LineageState()
    limit = guard_module.barren_limit(2)
    for _ in range(limit + 1):
        _new_life(state)
    with pytest.raises(ld.WorkerCrashedError, match="stage 'ocr': an actor died 8 times in a row"):
        _new_life(state)


def test_a_block_whose_deaths_no_unit_owns_fails_its_units_after_the_doom_limit():
    """Every unit runs and ends, yet the process dies before Ray has the block's output, each time
    (a crash that comes later than the input's own call): the block cannot loop for ever."""
    state = LineageState()
    units = [unit_key("doc", (i,)) for i in range(3)]
    limit = guard_module.doom_limit(2, 3)
    attempts = 0
    for _ in range(limit + 2):
        attempts += 1
        guard = Guard("ocr", state, max_crash_retries=2)
        whole = guard.block(3, units[0], units[-1])
        statuses = [] if whole else [guard.unit(key) for key in units]
        if any(s is not None for s in statuses):
            break
        for key in units if not whole else ():
            guard.done(key)
        guard.done_block()  # ... and the process dies before its next attempt
    else:
        pytest.fail("the block was run for ever")
    assert attempts == limit + 2  # the attempt after limit + 1 deaths fails the units
    assert all(s is not None and s.outcome.value == "FAILED" for s in statuses)
    assert f"the worker died {limit + 1} times on the block holding this input" in statuses[0].cause
