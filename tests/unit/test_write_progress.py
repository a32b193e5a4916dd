"""Write tasks report what they wrote, so the driver's progress bar moves during a write."""

from __future__ import annotations

import re

import pyarrow as pa
import pytest
from ray.data.datasource import Datasink

from lineage_data._core import columns as C
from lineage_data._core.state import LineageState
from lineage_data._ray.sinks import WRITTEN, AccountedSink


class KeepRows(Datasink):
    """A datasink that keeps the rows it is given, in this process."""

    def __init__(self) -> None:
        self.rows: list[dict] = []

    def write(self, blocks, ctx):
        for block in blocks:
            self.rows.extend(block.to_pylist())
        return len(self.rows)


def _rows(outcomes: list[str]) -> pa.Table:
    return pa.table(
        {
            "text": [f"t{i}" for i in range(len(outcomes))],
            C.ROOT: [f"r{i}" for i in range(len(outcomes))],
            C.OUTCOME: outcomes,
            C.CAUSE: [None if o == "PRESENT" else "ValueError: bad" for o in outcomes],
        }
    )


def test_each_write_task_reports_committed_failed_and_one_shard():
    state = LineageState()
    inner = KeepRows()
    sink = AccountedSink(inner, 0, progress=state)
    sink.write([_rows(["PRESENT", "FAILED", "PRESENT"])], None)
    sink.write([_rows(["SUPPRESSED"])], None)
    assert state.snapshot()["counts"][WRITTEN] == {"committed": 2, "failed": 2, "shards": 2}
    assert len(inner.rows) == 4


def test_an_open_level_or_no_client_reports_nothing():
    state = LineageState()
    AccountedSink(KeepRows(), 1, progress=state).write([_rows(["PRESENT"])], None)
    AccountedSink(KeepRows(), 0).write([_rows(["PRESENT"])], None)
    assert WRITTEN not in state.snapshot()["counts"]


def test_ray_log_lines_go_above_the_bars_while_the_lineage_bar_is_drawn(monkeypatch):
    import io
    import logging
    import sys

    import tqdm
    from ray.data import DataContext

    from lineage_data._ray.progress import _log_lines_above_bars

    terminal = io.StringIO()
    monkeypatch.setattr(sys, "stderr", terminal)
    monkeypatch.setattr(DataContext.get_current(), "use_ray_tqdm", False)
    handler = logging.StreamHandler(sys.stderr)
    logger = logging.getLogger("ray.data")
    logger.addHandler(handler)
    bar = tqdm.tqdm(total=10, file=sys.stderr, desc="lineage: parents", mininterval=0)
    try:
        bar.update(1)
        logger.warning("before")  # as Ray wrote it: glued to the bar's line
        undo = _log_lines_above_bars()
        logger.warning("while drawn")
        undo()
        assert "emit" not in vars(handler)  # the handler's own emit again
        logger.warning("after")
    finally:
        bar.close()
        logger.removeHandler(handler)
    out = terminal.getvalue()
    assert "it/s]before" in out.replace(" ", "") or "?it/s]before" in out.replace(" ", "")
    drawn = out.index("while drawn")
    assert out[drawn - 1] == "\r"  # the bar was cleared first, the line starts on its own


def test_without_a_terminal_progress_is_whole_lines_while_counts_move_and_one_at_the_end(
    monkeypatch,
):
    import io
    import sys
    import threading

    from lineage_data._ray.progress import _Progress

    stream = io.StringIO()  # no terminal: isatty() is False
    monkeypatch.setattr(sys, "stderr", stream)
    monkeypatch.setenv("LINEAGE_DATA_PROGRESS_INTERVAL_S", "0.01")
    counts = {"done": 0, "failed": 0, "in_flight_parents": 3, "total": 5, "written": 0, "shards": 0}
    drawn = threading.Event()

    def now() -> dict[str, int]:
        drawn.set()
        return dict(counts)

    progress = _Progress(now)
    progress.start()
    assert drawn.wait(10)
    counts.update(done=5, failed=1, in_flight_parents=0, written=5, shards=2)
    progress.stop()
    progress.join(10)
    lines = stream.getvalue().splitlines()
    assert stream.getvalue().endswith("\n") and "\r" not in stream.getvalue()
    assert lines[0].startswith(
        "lineage: 0 of 5 documents done (0 failed), 0 written in 0 shards, 3 in flight ("
    )
    assert lines[-1].startswith(
        "lineage: 5 of 5 documents done (1 failed), 5 written in 2 shards, 0 in flight, "
    )
    assert re.search(r", [0-9.e+-]+/s \(\d+ s\)$", lines[-1]), lines[-1]  # no ETA: all done
    assert len(lines) == len(set(lines)) or len(lines) == 2  # a line only when the counts moved


@pytest.fixture
def terminal(monkeypatch):
    """Call it in the test (pytest's capture sets sys.stderr again between a fixture and its test):
    stderr becomes a terminal (isatty) with plain tqdm bars (no Ray); returns the stream."""
    import io
    import sys

    from ray.data import DataContext

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    def install() -> Terminal:
        stream = Terminal()
        monkeypatch.setattr(sys, "stderr", stream)
        monkeypatch.setattr(DataContext.get_current(), "use_ray_tqdm", False)
        return stream

    return install


def test_on_a_terminal_a_line_comes_once_a_parent_is_in_flight_and_when_counts_move(terminal):
    from lineage_data._ray.progress import _Progress

    terminal = terminal()
    counts = {"done": 0, "failed": 0, "in_flight_parents": 0, "total": 4}
    progress = _Progress(lambda: dict(counts))
    assert progress._interval == 5  # a terminal's default period
    progress._draw()
    assert terminal.getvalue() == ""  # Ray Data's operators are still starting: nothing yet
    counts.update(in_flight_parents=2)
    progress._draw()
    progress._draw()  # the same counts: no second line
    counts.update(done=1, in_flight_parents=2)
    progress._draw()
    counts.update(done=4, in_flight_parents=0)
    progress.stop()
    lines = terminal.getvalue().splitlines()
    assert [line.split(" in flight")[0] for line in lines] == [
        "lineage: 0 of 4 documents done (0 failed), 2",
        "lineage: 1 of 4 documents done (0 failed), 2",
        "lineage: 4 of 4 documents done (0 failed), 0",
    ]
    assert ", ETA " in lines[1] and "/s" in lines[1]  # a rate once one is done, the time left


def test_on_a_narrow_terminal_a_line_never_wraps(terminal, monkeypatch):
    import os
    import shutil

    from lineage_data._ray.progress import _Progress

    terminal = terminal()
    monkeypatch.setattr(shutil, "get_terminal_size", lambda *a, **k: os.terminal_size((60, 30)))
    counts = {
        "done": 7,
        "failed": 1,
        "total": 3000,
        "in_flight_parents": 40,
        "written": 5,
        "shards": 2,
    }
    progress = _Progress(lambda: dict(counts))
    progress.stop()
    (line,) = terminal.getvalue().splitlines()
    assert len(line) == 59 and line.startswith("lineage: 7 of 3000 documents done")
