"""The example pipelines against the real S3 server: PDFs and videos in, shards and dead letters out."""

import gzip
import json
import math
import os
import re
import subprocess
import sys

import pytest

from lineage_data.connectors.jobs import pdf as pdf_to_shards
from lineage_data.connectors.jobs import video as video_to_shards
from lineage_data.connectors.shards import (
    read_dead_letter,
    read_manifest,
    read_shards,
    write_shards,
)
from lineage_data.connectors.testing.corpus import (
    BAD_FILE_ERRORS,
    bad_files,
    make_video,
    write_corpus,
)

pytestmark = pytest.mark.e2e


@pytest.fixture
def ray_up(ray_session):
    return ray_session


def test_30_pdfs_with_3_bad_files_to_shards_on_s3(ray_up, s3_bucket):
    fs, bucket = s3_bucket
    manifest = write_corpus(
        f"{bucket}/in", n_pdfs=27, n_bad=3, seed=5, fs=fs, max_pages=60, mean_pages=6
    )
    pages = {
        f["path"]: f["pages"]
        for f in manifest["files"]
        if f["kind"] == "pdf" and not f["expected_error"]
    }
    bad = {f["path"]: f["expected_error"] for f in manifest["files"] if f["expected_error"]}
    assert (len(pages), len(bad)) == (27, 3)
    docs = pdf_to_shards.build(
        [f"{bucket}/in/pdfs/", f"{bucket}/in/bad/"], filesystem=fs, batch_size=8
    )
    out = f"{bucket}/shards"
    result = write_shards(docs, out, rows_per_shard=5, filesystem=fs)
    assert (result.rows, result.dead_letter_rows) == (27, 3)
    table = read_shards(out, filesystem=fs)
    rows = table.to_pylist()
    assert sorted(r["path"].split("/in/")[-1] for r in rows) == sorted(
        p.split("/in/")[-1] for p in pages
    )
    assert len({r["_lineage_root"] for r in rows}) == 27  # every good PDF exactly once
    for row in rows:
        name = row["path"].split("/in/")[-1]
        expected = next(n for p, n in pages.items() if p.endswith(name))
        numbers = [int(m) for m in re.findall(r"<!-- page (\d+) -->", row["markdown"])]
        assert numbers == list(range(1, expected + 1))
        texts = [
            int(m) for m in re.findall(r"page (\d+)\b", re.sub(r"<!--.*?-->", "", row["markdown"]))
        ]
        assert texts == sorted(texts)  # the text layers come back in page order
    dead = read_dead_letter(out, filesystem=fs).to_pylist()
    assert sorted(d["cause"].split(":")[0] for d in dead) == sorted(bad.values())
    for d in dead:
        assert d["outcome"] == "FAILED"
        assert d["stage"] == "render_pages"
    entries = read_manifest(out, filesystem=fs).shards
    assert all(e.rows <= 5 for e in entries)
    assert sum(e.rows for e in entries) == 27


def test_6_videos_to_clips_frames_captions_and_rows(ray_up, s3_bucket):
    fs, bucket = s3_bucket
    seconds = [1.5, 2.0, 3.0, 4.5, 5.0, 2.5]
    for i, s in enumerate(seconds):
        fs.pipe(f"{bucket}/videos/v{i}.mp4", make_video(s, seed=i))
    bad = {n: b for n, b in bad_files().items() if n.endswith(".mp4")}
    for name, data in bad.items():
        fs.pipe(f"{bucket}/videos/bad-{name}", data)
    videos = video_to_shards.build(
        f"{bucket}/videos/", filesystem=fs, clip_seconds=1.0, frames_per_clip=2
    )
    out = f"{bucket}/shards"
    result = write_shards(videos, out, rows_per_shard=4, filesystem=fs)
    assert (result.rows, result.dead_letter_rows) == (6, len(bad))
    rows = {r["path"].rsplit("/", 1)[-1]: r for r in read_shards(out, filesystem=fs).to_pylist()}
    for i, s in enumerate(seconds):
        row = rows[f"v{i}.mp4"]
        assert row["clips"] >= math.floor(s)  # about one clip per second, keyframe-aligned
        assert row["clip_starts"] == sorted(row["clip_starts"])
        assert all(
            len(c) == 2 and all(t.startswith("echo [image 64x48]") for t in c)
            for c in row["captions"]
        )
    dead = {
        d["root"].rsplit("bad-", 1)[-1]: d["cause"]
        for d in read_dead_letter(out, filesystem=fs).to_pylist()
    }
    assert {n: c.split(":")[0] for n, c in dead.items()} == {
        n: BAD_FILE_ERRORS[n].__name__ for n in bad
    }


@pytest.mark.slow
def test_make_demo_smoke(tmp_path):
    """The demo script on a tiny corpus, in its own process (its own S3 server and Ray)."""
    cmd = [
        sys.executable,
        "-m",
        "examples.demo",
        "--pdfs",
        "3",
        "--videos",
        "1",
        "--bad",
        "9",
        "--max-pages",
        "8",
        "--scans",
        "2",
        "--workdir",
        str(tmp_path),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=420, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    lines = proc.stdout.strip().splitlines()
    assert lines[-2] == "shards: s3://corpus/shards/"
    assert lines[-1] == "parents: 6 committed, 9 failed"  # 3 PDFs, 1 video, 2 scans (OCR)
    assert (tmp_path / "pdf-timeline.png").stat().st_size > 0
    assert (tmp_path / "ocr-timeline.png").stat().st_size > 0


@pytest.mark.slow
def test_make_demo_writes_jsonl(tmp_path):
    """The demo with ``--format jsonl``: both jobs' mirrored shards read back as Dolma documents.

    One format here: the PDF job writes each format in tests/integration/test_jobs.py, and each
    format's writer is unit-tested in tests/unit/connectors/test_formats.py.
    """
    cmd = [sys.executable, "-m", "examples.demo", "--pdfs", "2", "--videos", "1", "--bad", "0"]
    cmd += ["--max-pages", "4", "--scans", "0", "--format", "jsonl", "--workdir", str(tmp_path)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=420, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1] == "parents: 3 committed, 0 failed"
    ids = []
    for job in ("pdf", "video"):
        for part in sorted((tmp_path / "shards" / job).glob("*.jsonl.gz")):
            with gzip.open(part, "rt") as lines:
                docs = [json.loads(line) for line in lines]
            assert all(set(doc) >= {"id", "text", "source", "metadata"} for doc in docs)
            ids += [doc["id"] for doc in docs]
    assert len(ids) == len(set(ids)) == 3


@pytest.mark.parametrize("job", ["pdf", "video"])
def test_the_installed_job_reads_and_writes_s3_from_outside_the_checkout(
    s3_server, s3_bucket, tmp_path_factory, job
):
    """``lineage-data pdf|video s3://... s3://...`` as a user runs it: its own process and Ray."""
    from pathlib import Path

    fs, bucket = s3_bucket
    corpus = write_corpus(
        f"{bucket}/in",
        fs=fs,
        n_pdfs=4,
        n_videos=2 if job == "video" else 0,
        n_bad=3,
        seed=7,
        max_pages=5,
        mean_pages=2,
        video_seconds=(2.0, 3.0),
    )
    kind = {"pdf": ".pdf", "video": ".mp4"}[job]
    inputs = [f for f in corpus["files"] if f["path"].endswith(kind)]
    bad = sum(1 for f in inputs if f["expected_error"])
    user = tmp_path_factory.mktemp("user")
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "PYTHONPATH")}
    env.update(s3_server.env)
    out = f"{bucket}/{job}-shards"
    proc = subprocess.run(
        [str(Path(sys.executable).parent / "lineage-data"), job, f"{bucket}/in/", out],
        cwd=user,
        env=env,
        capture_output=True,
        text=True,
        timeout=400,
        check=False,
    )
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    assert f"done: {len(inputs) - bad} documents written, {bad} failed" in proc.stderr
    assert read_shards(out, filesystem=fs).num_rows == len(inputs) - bad
    assert read_dead_letter(out, filesystem=fs).num_rows == bad
