"""The installed jobs, ``lineage-data pdf`` and ``lineage-data video``, run as a user runs them.

The console script of this environment, from a temporary directory outside the checkout, with no
``PYTHONPATH``: what ``pip install 'lineage-data[pdf,s3]'`` gives. Each job starts a local Ray of
its own (a fresh process), so the screen it leaves is the user's screen.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from lineage_data.connectors.jobs._common import require
from lineage_data.connectors.shards import read_dead_letter, read_manifest, read_shards
from lineage_data.connectors.testing.corpus import write_corpus

pytestmark = pytest.mark.slow

SCRIPT = Path(sys.executable).parent / "lineage-data"
REPO = Path(__file__).resolve().parents[2]
LOUD = re.compile(r"core_worker\.cc|logging\.cc|\] [EIW] |\bERROR\b|\bINFO\b|Traceback|progress UI")


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "PYTHONPATH")}
    env.update(LINEAGE_DATA_PROGRESS_INTERVAL_S="0.5", **extra)
    return env


def _job(cwd: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        [str(SCRIPT), *args],
        cwd=cwd,
        env=_env(**env),
        capture_output=True,
        text=True,
        timeout=400,
        check=False,
    )
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    assert not str(cwd).startswith(str(REPO))
    return proc


@pytest.fixture
def outside(tmp_path_factory):
    """A working directory outside the checkout (``examples`` is not importable from it)."""
    return tmp_path_factory.mktemp("user")


def test_help_lists_the_jobs_and_their_options(outside):
    top = _job(outside, "--help").stdout
    for command in ("pdf", "video", "run", "report", "inspect"):
        assert re.search(rf"^\s+{command}\s", top, re.M), top
    pdf = _job(outside, "pdf", "--help").stdout
    for option in (
        "--stage",
        "--shard-interval",
        "--rows-per-shard",
        "--retry-failed",
        "--verbose",
    ):
        assert option in pdf, pdf
    assert "{text,ocr,vlm,server}" in pdf
    assert "--frames-per-clip" in _job(outside, "video", "--help").stdout


def test_the_pdf_job_from_outside_the_checkout_is_quiet_streams_and_resumes(outside):
    corpus = write_corpus(outside / "in", n_pdfs=6, n_bad=2, seed=3, max_pages=8, mean_pages=3)
    pdfs = [f for f in corpus["files"] if f["path"].endswith(".pdf")]  # not its manifest.json
    bad = sum(1 for f in pdfs if f["expected_error"])
    out = outside / "shards"
    proc = _job(outside, "pdf", str(outside / "in"), str(out), "--rows-per-shard", "4")
    screen = proc.stdout + proc.stderr
    assert not [line for line in screen.splitlines() if LOUD.search(line)], screen[-4000:]
    progress = [line for line in screen.splitlines() if "documents done" in line]
    assert progress, screen[-3000:]
    for line in progress:  # never more in flight than documents not yet done
        done, total, in_flight = map(
            int, re.search(r"(\d+) of (\d+) documents done.* (\d+) in flight", line).groups()
        )
        assert in_flight <= total - done, line
    total = len(pdfs)
    assert f"done: {total - bad} documents written, {bad} failed" in screen, screen[-2000:]
    assert f"shards: {out}" in screen and f"dead letters: {out}/_dead_letter" in screen
    assert "resume or rerun: lineage-data pdf" in screen
    assert read_shards(str(out)).num_rows == total - bad
    assert read_dead_letter(str(out)).num_rows == bad
    assert max(e.rows for e in read_manifest(str(out)).shards) <= 4

    again = _job(outside, "pdf", str(outside / "in"), str(out))
    assert f"nothing to do: all {total} inputs are committed" in again.stderr, again.stderr


def test_the_video_job_from_outside_the_checkout(outside):
    write_corpus(outside / "in", n_pdfs=0, n_videos=2, seed=1, video_seconds=(2.0, 3.0))
    out = outside / "shards"
    proc = _job(outside, "video", str(outside / "in" / "videos"), str(out))
    assert "done: 2 documents written, 0 failed" in proc.stderr, proc.stderr[-2000:]
    rows = read_shards(str(out)).to_pylist()
    assert len(rows) == 2 and all(r["clips"] >= 1 and r["captions"] for r in rows)


def test_the_pdf_job_writes_each_format(outside):
    import gzip
    import json

    import lance
    import webdataset as wds

    write_corpus(outside / "in", n_pdfs=3, seed=4, max_pages=4, mean_pages=2)
    _job(outside, "pdf", str(outside / "in"), str(outside / "tar"), "--format", "webdataset")
    tars = sorted(str(f) for f in (outside / "tar").glob("*.tar"))
    samples = list(wds.WebDataset(tars, shardshuffle=False))
    assert len(samples) == 3 and all(s["txt"] and json.loads(s["json"])["id"] for s in samples)
    _job(outside, "pdf", str(outside / "in"), str(outside / "jsonl"), "--format", "jsonl")
    docs = []
    for name in (outside / "jsonl").glob("*.jsonl.gz"):
        with gzip.open(name, "rt") as f:
            docs += [json.loads(line) for line in f]
    assert len(docs) == 3 and all(d["text"] and d["source"] == str(outside / "in") for d in docs)
    _job(outside, "pdf", str(outside / "in"), str(outside / "lance"), "--format", "lance")
    table = lance.dataset(str(outside / "lance")).to_table()
    assert table.num_rows == 3 and all(table["markdown"].to_pylist())


def test_verbose_brings_rays_own_lines_back(outside):
    write_corpus(outside / "in", n_pdfs=2, seed=2, max_pages=3, mean_pages=2)
    proc = _job(outside, "pdf", str(outside / "in"), str(outside / "out"), "--verbose")
    assert re.search(r"\bINFO\b", proc.stdout + proc.stderr)


def test_a_missing_extra_is_one_line_before_anything_starts():
    with pytest.raises(SystemExit) as raised:
        require("ocr", ["rapidocr_onnxruntime", "no_such_module_here"])
    message = str(raised.value)
    assert message == (
        "lineage-data: this job needs no_such_module_here: pip install 'lineage-data[ocr]'"
    )
