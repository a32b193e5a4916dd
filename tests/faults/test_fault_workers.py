"""SIGKILL of Ray worker processes mid-run: the output must equal the clean run's (DESIGN §5a).

Each test checks that its faults really happened before it judges the output: the right number of
busy ``ray::`` processes were killed (and are gone), the first kill came while the slow pool stage
was still computing, and parents were still being reduced after the last kill.
"""

import re

import faultkit
import pytest

pytestmark = [pytest.mark.faults, pytest.mark.timeout(240)]

KILL_AT_ROWS = (1, 4, 8)
# A worker of the reduce step: Ray Data titles task steps ``MapBatches(<fn name>)`` and pool actors
# ``MapWorker(MapBatches(<class name>))``; the library names the reduce step after the stage
# (``assemble`` here), after its kind (``reduce``), or (older trees) ``stage_task``. A reduce run in
# the map's actors is named in theirs (``MapWorker(MapBatches(slow->assemble))``).
REDUCE_STEP = re.compile(
    rf"Map(Batches)?\(.*({re.escape(faultkit.REDUCE_STAGE)}|reduce|stage_task)", re.IGNORECASE
)


def _run_with_kills(tmp_path, seed, pattern=None, reduce_args=None):
    ds = faultkit.pipeline(tmp_path, reduce_args=reduce_args)
    killer = faultkit.Killer(KILL_AT_ROWS, seed=seed, pattern=pattern)
    killer.start()
    try:
        run = faultkit.consume(ds, killer.on_row)
    finally:
        killer.stop()
    return run, killer


def _check(run, killer, reference, tmp_path):
    # 1. a fault happened, on a live process, while the pool stage was still computing
    assert killer.kills and all(k.confirmed for k in killer.kills), (
        f"no process was killed: {killer.summary()}"
    )
    map_ends = faultkit.log_times(tmp_path, "map")
    assert map_ends and killer.kills[0].at < map_ends[-1], (
        f"the first kill came after the last map batch: {killer.summary()}"
    )
    # 2. no error escapes the consumer, a raw Ray error (UnserializableException ...) least of all
    assert not faultkit.is_raw_ray_error(run.error), (
        f"{faultkit.describe_error(run.error)} | {killer.summary()}"
    )
    assert run.error is None, f"{faultkit.describe_error(run.error)} | {killer.summary()}"
    # 3. every planned kill happened before the stream ended
    assert len(killer.kills) == len(KILL_AT_ROWS), f"not every kill happened: {killer.summary()}"
    # 4. the output equals the clean run: every root exactly once, same outcomes and values
    got, duplicated = faultkit.comparable(run.rows)
    problem = faultkit.diff(reference, got, duplicated)
    assert not problem, f"faulted output differs from the clean run: {problem} | {killer.summary()}"
    reduces = faultkit.log_times(tmp_path, "reduce")
    assert reduces and max(k.at for k in killer.kills) < reduces[-1], (
        f"no parent was reduced after the last kill: {killer.summary()}"
    )
    print(killer.summary())


@pytest.mark.parametrize("seed", [1])
def test_three_random_worker_sigkills_give_the_clean_output(tmp_path, clean_reference, seed):
    run, killer = _run_with_kills(tmp_path, seed)
    _check(run, killer, clean_reference, tmp_path)


@pytest.mark.parametrize(
    "reduce_args", [None, {"num_cpus": 1}], ids=["in_the_map_actors", "tasks_of_its_own"]
)
def test_reduce_step_worker_sigkills_give_the_clean_output(tmp_path, clean_reference, reduce_args):
    run, killer = _run_with_kills(tmp_path, seed=2, pattern=REDUCE_STEP, reduce_args=reduce_args)
    assert all(REDUCE_STEP.search(k.title) for k in killer.kills), killer.summary()
    _check(run, killer, clean_reference, tmp_path)
