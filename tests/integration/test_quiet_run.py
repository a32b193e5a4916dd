"""A clean run prints no warning or error line that the library causes.

The same pipeline runs twice in fresh processes: through lineage_data (``ld.init``, expand -> actor-pool
map_batches -> reduce -> write_parquet) and as plain Ray Data (flat_map -> the same actor pool ->
write_parquet). Every warning/error line of the lineage run must be one plain Ray Data prints too
(Ray 2.60 itself logs, e.g., an error line for every restartable actor pool); none may name the library.
"""

import os
import re
import subprocess
import sys
import textwrap

import pytest

COMMON = """
import sys
import ray
from ray.data import ActorPoolStrategy

class Ocr:
    def __init__(self):
        self.prefix = "text-"

    def __call__(self, batch):
        return {"text": [self.prefix + str(p) for p in batch["page"]]}

def pages(row):
    return [{"page": i} for i in range(row["n"])]

ITEMS = [{"doc": f"d{i:02d}", "n": i % 5 + 1} for i in range(40)]
OCR = dict(batch_size=8, compute=ActorPoolStrategy(size=2), num_cpus=0.25)
"""

LINEAGE = (
    COMMON
    + """
import lineage_data as ld
ld.init(include_dashboard=False)
docs = (
    ld.from_items(ITEMS, id_column="doc")
    .expand_lineage(pages, name="pages")
    .map_batches(Ocr, name="ocr", **OCR)
    .reduce_lineage(lambda doc, kids: {"pages": len(kids)}, name="docs")
)
docs.write_parquet(sys.argv[1])
print("DONE", docs.report().summary().splitlines()[0])
"""
)

PLAIN = (
    COMMON
    + """
ray.init(num_cpus=8, include_dashboard=False)
ds = ray.data.from_items(ITEMS).flat_map(pages).map_batches(Ocr, **OCR)
ds.write_parquet(sys.argv[1])
print("DONE")
"""
)

PROGRESS = (
    r"lineage: \d+ of 40 documents done \(\d+ failed\)(, \d+ written in \d+ shards)?, "
    r"\d+ in flight(, [0-9.e+-]+/s(, ETA \d+ s)?)? \(\d+ s\)"
)
ANSI = re.compile(r"\x1b\[[0-9;]*m")
LOUD = re.compile(
    r"\bWARNING\b|\bERROR\b|\bTraceback\b|\] E |\sE \d+ \d+\]|core_worker\.cc|\berror\b", re.I
)


def run(script: str, out: str) -> list[str]:
    """The warning/error lines of ``script`` (progress on, drawn as lines: stderr is a pipe)."""
    env = dict(os.environ, LINEAGE_DATA_PROGRESS="1", LINEAGE_DATA_PROGRESS_INTERVAL_S="0.2")
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script), out],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    text = ANSI.sub("", proc.stdout + proc.stderr)
    assert proc.returncode == 0, text[-3000:]
    assert "DONE" in text
    progress = [line for line in text.splitlines() if "documents done" in line]
    if "import lineage_data" in script:  # whole lines, nothing written onto them (Ray's C++ logs)
        assert progress and all(re.fullmatch(PROGRESS, line) for line in progress), progress
        assert progress[-1].startswith("lineage: 40 of 40 documents done (0 failed)"), progress[-1]
        assert re.search(r", 40 written in [1-9]\d* shards", progress[-1]), progress[-1]
    return [line for line in text.splitlines() if LOUD.search(line)]


def shape(line: str) -> str:
    """A log line without what changes from run to run (times, pids, ids, operator names)."""
    line = re.sub(r"MapBatches\([^)]*\)", "MapBatches(*)", line)
    line = re.sub(r"\b[0-9a-f]{16,}\b", "ID", line)
    line = re.sub(r"\d+", "N", line)
    return line.split(" -- ")[-1] if " -- " in line else re.sub(r"^.*?\] ", "", line)


@pytest.mark.slow
def test_a_clean_run_prints_no_warning_or_error_line_of_its_own(tmp_path):
    ours = run(LINEAGE, str(tmp_path / "lineage"))
    plain = {shape(line) for line in run(PLAIN, str(tmp_path / "plain"))}
    assert [line for line in ours if "lineage" in line.lower()] == []
    assert [line for line in ours if "Token authentication" in line] == []
    assert [line for line in ours if shape(line) not in plain] == []
