"""SIGKILL of the source tasks of an ``ld.from_ray`` plan after they registered their roots.

Ray re-runs a killed source task, which registers the same block of root ids again: that must not be
taken for duplicate ids (a false ``DuplicateRootError`` killed the run before), and the output must
equal the clean run's. The expansion is task-based, fused into the source task, slow (0.2 s per
parent, 3 parents per block) and logs its process id when it starts: a process is killed only after
that line, i.e. after its source task registered its block.
"""

import pathlib
import re
import threading
import time

import faultkit
import pytest
import ray

import lineage_data as ld

pytestmark = [pytest.mark.faults, pytest.mark.timeout(240)]

SOURCE_STEP = re.compile(r"inject_roots")


class LateKiller(threading.Thread):
    """Kills ``count`` source-task workers, each right after its expansion logged that it started."""

    def __init__(self, count: int, log_dir: pathlib.Path) -> None:
        super().__init__(daemon=True)
        self.count = count
        self.log_dir = log_dir
        self.killed: list[tuple[int, str, bool]] = []
        self.stop_event = threading.Event()

    def run(self) -> None:
        done: set[int] = set()
        while len(self.killed) < self.count and not self.stop_event.wait(0.01):
            started = {int(p.stem.split("-")[1]) for p in self.log_dir.glob("expand-*.log")}
            busy = faultkit.busy_workers(pattern=SOURCE_STEP)
            for pid in sorted(started - done):
                if pid in busy:
                    done.add(pid)
                    self.killed.append((pid, busy[pid], faultkit.sigkill(pid)))
                    break


def consume_killing_two(ds, log_dir):
    """Consume ``ds`` while two source-task workers are killed; both kills and no error checked."""
    killer = LateKiller(2, log_dir)
    killer.start()
    try:
        run = faultkit.consume(ds)
    finally:
        killer.stop_event.set()
        killer.join(timeout=10)
    assert len(killer.killed) == 2 and all(ok for *_, ok in killer.killed), killer.killed
    assert run.error is None, f"{faultkit.describe_error(run.error)} | {killer.killed}"
    return run, killer


def test_killing_from_ray_source_tasks_after_registration_gives_the_clean_output(
    tmp_path, clean_reference
):
    source = ld.from_ray(
        ray.data.from_items(faultkit.corpus(), override_num_blocks=16), id_column="doc"
    )
    ds = faultkit.pipeline(tmp_path, source=source, expand=faultkit.make_slow_expand(str(tmp_path)))
    run, killer = consume_killing_two(ds, tmp_path)
    got, duplicated = faultkit.comparable(run.rows)
    problem = faultkit.diff(clean_reference, got, duplicated)
    assert not problem, f"{problem} | {killer.killed}"


def test_killing_the_tasks_of_a_flat_from_ray_plan_loses_and_repeats_nothing(tmp_path):
    """A flat plan registers nothing: its rows carry their block's tag. A killed task that Ray runs
    again tags the same block the same way, so nothing it delivered twice is taken for a duplicate id.
    """
    log_dir = str(tmp_path)
    items = [{"doc": f"d{i:03d}", "v": i} for i in range(48)]

    def slow_double(row):
        faultkit._log_line(log_dir, "expand", row["doc"])  # the killer's cue: the source ran
        time.sleep(0.1)
        return {"doc": row["doc"], "v2": row["v"] * 2}

    source = ld.from_ray(ray.data.from_items(items, override_num_blocks=12), id_column="doc")
    ds = source.map(slow_double, name="double")
    assert ds._plan.flat
    run, killer = consume_killing_two(ds, tmp_path)
    got = sorted((r["doc"], r["_lineage_outcome"], r["v2"]) for r in run.rows)
    assert got == [(f"d{i:03d}", "PRESENT", 2 * i) for i in range(48)], killer.killed
