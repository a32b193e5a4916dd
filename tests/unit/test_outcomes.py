import itertools

import pytest

from lineage_data._core import outcomes
from lineage_data._core.failures import GroupFailure, RecordFailure
from lineage_data._core.outcomes import PRESENT, Outcome, Status, reduce_group

ALL = [
    PRESENT,
    Status(Outcome.DROPPED, None, "f"),
    Status(Outcome.FAILED, "boom", "m"),
    Status(Outcome.SUPPRESSED, "gone", "m"),
]


@pytest.mark.parametrize("status", ALL)
def test_entering_every_outcome(status):
    result = outcomes.entering(status)
    match status.outcome:
        case Outcome.PRESENT:
            assert result is None
        case Outcome.DROPPED:
            assert result == status
        case Outcome.FAILED | Outcome.SUPPRESSED:
            assert result == Status(Outcome.SUPPRESSED, status.cause, status.stage)


def test_values_and_failures():
    assert outcomes.from_value(None, "s") == PRESENT
    assert outcomes.from_value([], "s") == PRESENT
    assert outcomes.from_value(RecordFailure("x"), "s") == Status(Outcome.FAILED, "x", "s")
    assert outcomes.from_value(GroupFailure("g"), "s") == Status(Outcome.FAILED, "g", "s")
    assert outcomes.from_exception(ValueError("v"), "s") == Status(
        Outcome.FAILED, "ValueError: v", "s"
    )


@pytest.mark.parametrize("combo", list(itertools.product(ALL, repeat=3)))
@pytest.mark.parametrize("mode", ["fail", "skip"])
def test_reduce_group_all_combinations(combo, mode):
    verdict = reduce_group(PRESENT, list(combo), mode)
    broken = [i for i, s in enumerate(combo) if s.outcome in (Outcome.FAILED, Outcome.SUPPRESSED)]
    present = tuple(i for i, s in enumerate(combo) if s.present)
    if broken and mode == "fail":
        assert verdict.status.outcome is Outcome.SUPPRESSED
        failed = [i for i in broken if combo[i].outcome is Outcome.FAILED]
        assert verdict.status.cause == combo[(failed or broken)[0]].cause
    else:
        assert verdict.status is None
        assert verdict.kept == present
        assert verdict.missing == (tuple(broken) if mode == "skip" else ())


@pytest.mark.parametrize("order", list(itertools.permutations(range(3))))
def test_failure_wins_over_drop_whatever_the_order(order):
    statuses = [Status(Outcome.DROPPED, None, "f"), Status(Outcome.FAILED, "bad", "m"), PRESENT]
    verdict = reduce_group(PRESENT, [statuses[i] for i in order], "fail")
    assert verdict.status == Status(Outcome.SUPPRESSED, "bad", "m")


@pytest.mark.parametrize("header", ALL[1:])
def test_header_status_wins(header):
    assert reduce_group(header, [PRESENT], "fail").status == header
