"""The rolling policy of streaming writes: rows, bytes or age, whichever first (no Ray)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lineage_data._core.rolling import Roller, RollingPolicy


def _rows(cut):
    return sum(p.rows for p in cut)


def test_files_are_cut_at_exactly_the_row_bound_splitting_blocks():
    roller = Roller(RollingPolicy(rows=4))
    cuts = roller.add("a", 3, 30, now=0) + roller.add("b", 7, 70, now=0)
    assert [_rows(c) for c in cuts] == [4, 4]
    assert [(p.block, p.start, p.rows) for p in cuts[1]] == [("b", 1, 4)]
    assert [(p.block, p.start, p.rows) for p in roller.flush()[0]] == [("b", 5, 2)]
    assert roller.flush() == []


def test_a_file_is_cut_at_the_byte_bound():
    roller = Roller(RollingPolicy(rows=100, nbytes=50))
    assert roller.add("a", 2, 40, now=0) == []
    (cut,) = roller.add("b", 2, 20, now=0)  # 60 bytes >= 50
    assert [p.block for p in cut] == ["a", "b"]


def test_a_file_is_cut_by_age_even_when_no_block_arrives():
    roller = Roller(RollingPolicy(rows=1000, interval_s=10))
    assert roller.time_left(now=0) is None  # nothing open
    assert roller.add("a", 1, 10, now=3) == []
    assert roller.time_left(now=5) == 8
    assert roller.due(now=12.9) == []
    (cut,) = roller.due(now=13)
    assert [p.block for p in cut] == ["a"]
    assert roller.time_left(now=14) is None
    assert roller.add("b", 1, 10, now=30) == []  # a new file: its own clock
    assert roller.time_left(now=30) == 10


def test_an_old_file_is_cut_before_the_block_that_arrives_late_joins_it():
    roller = Roller(RollingPolicy(rows=1000, interval_s=10))
    roller.add("a", 1, 10, now=0)
    cuts = roller.add("b", 1, 10, now=25)
    assert [[p.block for p in c] for c in cuts] == [["a"]]
    assert [p.block for p in roller.flush()[0]] == ["b"]


def test_empty_blocks_add_nothing():
    roller = Roller(RollingPolicy(rows=2, interval_s=1))
    assert roller.add("empty", 0, 0, now=0) == []
    assert roller.time_left(now=0) is None and roller.flush() == []


@pytest.mark.parametrize("bad", [{"rows": 0}, {"nbytes": 0}, {"interval_s": -1}])
def test_bad_bounds_are_refused(bad):
    with pytest.raises(ValueError, match="rolling policy"):
        RollingPolicy(**bad)


@given(
    blocks=st.lists(st.integers(min_value=0, max_value=50), max_size=30),
    rows=st.integers(min_value=1, max_value=20),
    gaps=st.lists(st.floats(min_value=0, max_value=20), min_size=30, max_size=30),
)
def test_every_row_lands_in_exactly_one_file_in_order(blocks, rows, gaps):
    roller = Roller(RollingPolicy(rows=rows, interval_s=10))
    now, cuts = 0.0, []
    for i, n in enumerate(blocks):
        now += gaps[i]
        cuts += roller.add(i, n, 8 * n, now)
    cuts += roller.flush()
    pieces = [(p.block, r) for c in cuts for p in c for r in range(p.start, p.start + p.rows)]
    assert pieces == [(i, r) for i, n in enumerate(blocks) for r in range(n)]
    assert all(0 < _rows(c) <= rows for c in cuts)
