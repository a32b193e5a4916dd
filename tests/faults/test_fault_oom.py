"""An input that makes Ray's memory monitor kill its worker, on every attempt: that input fails.

The monitor acts on the whole node's memory, so the case runs in a Ray instance of its own
(``oom_run.py`` in a subprocess) whose threshold sits just above what the machine uses when it
starts; the bad page allocates well past it.
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from children import child_env

pytestmark = [pytest.mark.faults, pytest.mark.timeout(300)]

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]


@pytest.mark.parametrize("lowering", ["tasks", "actors"])
def test_a_row_killed_by_the_memory_monitor_fails_with_an_out_of_memory_cause(lowering):
    env = child_env(LINEAGE_DATA_PROGRESS="0")
    proc = subprocess.run(
        [sys.executable, str(HERE / "oom_run.py"), lowering],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    assert proc.returncode == 0 and lines, f"rc {proc.returncode}:\n{proc.stderr[-4000:]}"
    rows = json.loads(lines[-1])["rows"]
    assert sorted(rows) == [f"d{i}" for i in range(5)]
    outcome, cause, _ = rows["d2"]
    assert outcome == "SUPPRESSED", rows["d2"]
    assert cause.startswith("WorkerCrashedError: stage 'score': the worker died"), cause
    assert cause.endswith("(killed by Ray's memory monitor: the node ran out of memory)"), cause
    for doc in ("d0", "d1", "d3", "d4"):
        assert rows[doc] == ["PRESENT", None, [0, 10, 20]], (doc, rows[doc])
