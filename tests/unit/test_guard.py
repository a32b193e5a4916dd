"""The crash journal and the guard, in-process (the Ray cases are in tests/faults/test_fault_crashes.py)."""

from __future__ import annotations

import pytest

import lineage_data as ld
from lineage_data._core.guard import Guard, block_key, unit_key
from lineage_data._core.state import LineageState


def test_an_attempt_that_never_ends_is_a_crash_and_ended_ones_are_forgotten():
    state = LineageState()
    assert state.attempt("s", "k") == (0, 0)
    assert state.attempt("s", "k") == (1, 0)  # the first never ended: its process died
    assert state.attempt("s", "other", ["k"]) == (0, 0)
    assert state.attempt("s", "k") == (1, 0)  # one of the two earlier attempts ended
    state.attempt("s", None, ["k", "k", "other"])
    assert state._attempts == {}  # every attempt ended: nothing kept
    assert state.attempt("t", "k") == (0, 0)  # keys are per stage


def test_a_hung_attempt_is_counted_apart():
    state = LineageState()
    state.attempt("s", "k")
    state.hung("s", "k")
    assert state.attempt("s", "k") == (1, 1)


def test_a_block_is_isolated_after_max_crash_retries_and_its_crashing_unit_fails():
    state = LineageState()
    guard = Guard("ocr", state, max_crash_retries=1)
    first, last = unit_key("doc", (0,)), unit_key("doc", (3,))
    assert guard.block(4, first, last)  # attempt 1 (its process dies)
    guard = Guard("ocr", state, max_crash_retries=1)  # the retry, in a new process
    assert guard.block(4, first, last)  # one crash: still whole
    guard = Guard("ocr", state, max_crash_retries=1)
    assert not guard.block(4, first, last)  # two crashes: isolate
    assert guard.unit(first) is None
    guard.done(first)
    bad = unit_key("doc", (1,))
    assert guard.unit(bad) is None  # the row that kills the process, first time alone
    guard = Guard("ocr", state, max_crash_retries=1)
    assert not guard.block(4, first, last)
    assert guard.suspects([first, bad, last]) == {bad}  # run first: it fails before the others
    status = guard.unit(bad)  # alone it died max_crash_retries (1) times: it fails
    assert status is not None and status.outcome.value == "FAILED"
    assert status.cause.startswith("WorkerCrashedError: stage 'ocr': the worker died 3 times")
    assert guard.batch(2, unit_key("doc", (2,)), last)  # the others together, journaled apart
    guard.done_batch()
    guard = Guard("ocr", state, max_crash_retries=2)
    fresh = unit_key("doc", (7,))
    assert guard.unit(fresh) is None
    guard = Guard("ocr", state, max_crash_retries=2)
    assert guard.unit(fresh) is None  # with the default 2, one death alone is not enough


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
    for who in ("w1", "w2"):  # two processes begin the unit and die
        journal.who = who
        assert Guard("ocr", journal, max_crash_retries=2).unit(key) is None
    journal.who = "w3"
    status = Guard("ocr", journal, max_crash_retries=2).unit(key)
    assert status is not None
    assert status.cause == (
        "WorkerCrashedError: stage 'ocr': the worker died 5 times on this input "
        "(Segmentation fault in w1,w2)"
    )
    journal.attempt("ocr", None, [key, key, key])
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
    for _ in range(2):  # the block's process dies twice, not by its input
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
