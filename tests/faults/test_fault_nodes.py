"""Loss of a worker node mid-run (head + 2 workers, ``ray.cluster_utils.Cluster``).

A cluster of its own cannot share the session's Ray, so ``node_loss_run.py`` runs it in a subprocess
and prints one JSON line: a clean run, then one run per worker node in which that node is removed
(all its processes SIGKILLed) while it runs work of the pipeline, after the first row arrived. Each
faulted run must give the clean run's output. The test checks that the node really ran busy
``ray::`` workers of the pipeline when it was removed, and that the pool stage was still computing.
"""

import json
import subprocess
import sys
from pathlib import Path

import faultkit
import pytest
from children import child_env

pytestmark = [pytest.mark.faults, pytest.mark.timeout(420)]

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
TIMEOUT_S = 360


def test_losing_each_worker_node_mid_run_gives_the_clean_output(tmp_path):
    env = child_env(HERE, LINEAGE_DATA_PROGRESS="0")
    try:
        proc = subprocess.run(
            [sys.executable, str(HERE / "node_loss_run.py"), str(tmp_path)],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        tail = (exc.stderr or b"")[-3000:]
        pytest.fail(f"the node-loss script did not finish in {TIMEOUT_S}s: {tail!r}")
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    assert proc.returncode == 0 and lines, (
        f"node-loss script failed (rc {proc.returncode}):\n{proc.stderr[-4000:]}"
    )
    result = json.loads(lines[-1])

    clean = result["clean"]
    assert clean["error"] is None, f"clean run on the cluster failed: {clean['error']}"
    reference, duplicated = faultkit.comparable(clean["rows"])
    problem = faultkit.diff(faultkit.expected(), reference, duplicated)
    assert not problem, f"the clean run on the cluster is not what the pipeline computes: {problem}"

    assert len(result["runs"]) == 2
    failures = []
    for run in result["runs"]:
        what = f"worker node {run['node']} removed (busy there: {run['busy_on_node']})"
        # the fault happened: the node ran the pipeline's work and was removed mid-run
        assert run["removal_error"] is None, f"{what}: {run['removal_error']}"
        assert run["removed_at"] is not None, what
        assert run["busy_on_node"], f"{what}: the node ran no work of the pipeline when removed"
        assert run["map_ends"] and run["removed_at"] < run["map_ends"][-1], (
            f"{what}: removed after the last map batch"
        )
        if run["error"] is not None:
            failures.append(f"{what}: {run['error']}")
            continue
        got, duplicated = faultkit.comparable(run["rows"])
        problem = faultkit.diff(reference, got, duplicated)
        if problem:
            failures.append(f"{what}: output differs from the clean run: {problem}")
        else:
            print(f"{what}: output equals the clean run")
    assert not failures, " || ".join(failures)
