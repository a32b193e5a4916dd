"""The progress line of a run: documents done, written, in flight, rate and ETA, as whole lines."""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import sys
import threading
import time
from collections.abc import Callable, Iterator

from lineage_data._ray.compat import ray_bars_hidden, wrap_ray_console_emit


def _progress_enabled() -> bool:
    """Progress is drawn where Ray Data draws its bars, unless ``LINEAGE_DATA_PROGRESS`` says."""
    flag = os.environ.get("LINEAGE_DATA_PROGRESS")
    if flag is not None:
        return flag not in ("0", "", "false")
    from ray.data import DataContext

    return sys.stdout.isatty() and DataContext.get_current().enable_progress_bars


class _Progress(threading.Thread):
    """Parents committed, failed and in flight, as whole lines: one whenever the counts moved.

    Every ``LINEAGE_DATA_PROGRESS_INTERVAL_S`` seconds (5 on a terminal, 30 elsewhere), and once at
    the end. A line, not a bar: other writers share the stream (Ray's core worker writes to fd 2),
    and a bar beside Ray Data's bars was drawn over. On a terminal each line goes above Ray's bars.
    """

    def __init__(self, progress: Callable[[], dict[str, int]]) -> None:
        super().__init__(daemon=True, name="lineage-progress")
        self._progress = progress
        self._halt = threading.Event()
        self._since = time.monotonic()
        self._terminal = sys.stderr.isatty()
        default = "5" if self._terminal else "30"
        self._interval = float(os.environ.get("LINEAGE_DATA_PROGRESS_INTERVAL_S", default))
        self._last = ""

    def run(self) -> None:
        undo = _log_lines_above_bars() if self._terminal else None
        try:
            while not self._halt.wait(self._interval):
                self._draw()
        finally:
            if undo is not None:
                undo()

    def _draw(self, last: bool = False) -> None:
        p = self._progress()
        if not (p["done"] or p["in_flight_parents"] or last):
            return  # Ray Data's executor is still starting its operators
        if self._halt.is_set() and not last:
            return  # a draw that was under way when the run ended: the last line is written
        text = progress_text(p)
        if text == self._last:
            return
        self._last = text
        elapsed = time.monotonic() - self._since
        line = f"{text}{_pace(p, elapsed)} ({elapsed:.0f} s)"
        if self._terminal:  # a wrapped line would leave its tail among Ray's bars (a narrow pane)
            line = line[: max(20, shutil.get_terminal_size().columns - 1)]
        with _bars_hidden() if self._terminal else contextlib.nullcontext():
            sys.stderr.write(line + "\n")  # one write of a whole line: no other writer can join it
            sys.stderr.flush()

    def stop(self) -> None:
        if not self._halt.is_set():
            self._halt.set()
            self._draw(last=True)


def progress_text(p: dict[str, int]) -> str:
    """The counts of a progress line: documents done (reduced) and written apart, in flight."""
    total = f" of {p['total']}" if p.get("total") else ""
    text = f"lineage: {p['done']}{total} documents done ({p['failed']} failed)"
    if "written" in p:
        text += f", {p['written']} written in {p.get('shards', 0)} shards"
    return f"{text}, {p['in_flight_parents']} in flight"


def _pace(p: dict[str, int], elapsed: float) -> str:
    """``", 1.5/s, ETA 19 s"``: documents done per second and, with a total, the time left."""
    if not p["done"] or elapsed <= 0:
        return ""
    rate = p["done"] / elapsed
    left = (p.get("total") or 0) - p["done"]
    eta = f", ETA {left / rate:.0f} s" if left > 0 else ""
    return f", {rate:.2g}/s{eta}"


def _log_lines_above_bars() -> Callable[[], None]:
    """Until the undo it returns, Ray's log lines on the terminal are printed above the bars.

    Ray's console handlers write straight to the stream, over the bars; each one's ``emit`` steps
    the bars aside (as Ray does for ``print`` only).
    """

    def aside(emit: Callable[[logging.LogRecord], None]) -> Callable[[logging.LogRecord], None]:
        def hidden(record: logging.LogRecord) -> None:
            with _bars_hidden():
                emit(record)

        return hidden

    return wrap_ray_console_emit(aside)


@contextlib.contextmanager
def _bars_hidden() -> Iterator[None]:
    """Every progress bar off the terminal for one write (Ray's tqdm or plain tqdm, as drawn)."""
    from ray.data import DataContext

    if DataContext.get_current().use_ray_tqdm:
        with ray_bars_hidden():
            yield
        return
    import tqdm

    with tqdm.tqdm.external_write_mode(file=sys.stderr):
        yield
