"""Parquet shards on local Ray: read-back equals the lineage output, dead letters, kill + resume."""

import json
import os
import pathlib
import signal
import subprocess
import sys
import textwrap
import time

import pyarrow.parquet as pq
import pytest

import lineage_data as ld
from lineage_data.connectors.shards import (
    committed_roots,
    read_dead_letter,
    read_manifest,
    read_shards,
    remove_orphans,
    write_shards,
)

ROOT = pathlib.Path(__file__).resolve().parents[2]
FAIL_DOC = "d05"  # its expansion raises: FAILED
POISON_DOC = "d08"  # one of its pages fails in the map stage: the parent is SUPPRESSED


def pages(row):
    if row["doc"] == FAIL_DOC:
        raise ValueError(f"cannot open {row['doc']}")
    for i in range(row["n"]):
        yield {"page": i, "text": f"{row['doc']}-p{i}"}


class Ocr:
    """A slow 1:1 stage (``delay`` seconds per batch); page 1 of the poison document fails."""

    def __init__(self, delay=0.0):
        self.delay = delay

    def __call__(self, batch):
        time.sleep(self.delay)
        return {
            "text": [
                ld.RecordFailure("unreadable page") if t == f"{POISON_DOC}-p1" else t.upper()
                for t in batch["text"].to_pylist()
            ]
        }


def assemble(parent, children):
    return {"doc": parent["doc"], "texts": [c["text"] for c in children], "n": len(children)}


def build(delay=0.0, docs=12, reduce=assemble, pages_per_doc=lambda i: 1 + i % 3):
    items = [{"doc": f"d{i:02d}", "n": pages_per_doc(i)} for i in range(docs)]
    return (
        ld.from_items(items, id_column="doc")
        .expand_lineage(pages, carry=["doc"], name="render")
        .map_batches(
            Ocr,
            name="ocr",
            batch_size=1,
            batch_format="pyarrow",
            concurrency=1,
            num_cpus=0.5,
            fn_constructor_kwargs={"delay": delay},
        )
        .reduce_lineage(reduce, name="assemble")
    )


def by_root(rows, key=ld.ROOT):
    return sorted(rows, key=lambda r: r[key])


def user_rows(rows):
    """Lineage output rows as a shard holds them: the root and the user columns of PRESENT rows."""
    keep = ("doc", "texts", "n", ld.ROOT)
    return by_root([{k: r[k] for k in keep} for r in rows if r[ld.OUTCOME] == "PRESENT"])


def assert_no_duplicate_roots(path):
    roots = [r for e in read_manifest(str(path)).shards for r in e.roots]
    assert len(roots) == len(set(roots))


def test_write_read_back_equals_lineage_output(tmp_path):
    ds = build()
    expected = ds.take_all()
    result = write_shards(ds, str(tmp_path), rows_per_shard=3)

    assert by_root(read_shards(str(tmp_path)).to_pylist()) == user_rows(expected)
    assert (result.rows, result.dead_letter_rows, result.skipped_roots) == (10, 2, 0)
    assert result.report.parents.height == 12
    assert sorted(result.report.failures["root"].to_list()) == [FAIL_DOC, POISON_DOC]
    # a strict streaming split before the write: each write task gets 3 terminal rows (the last
    # one fewer), its dead rows go to the dead letter: 4 shards at most, no small remainders
    sizes = sorted(e.rows for e in read_manifest(str(tmp_path)).shards)
    assert len(sizes) <= 4 and max(sizes) <= 3 and sum(sizes) == 10
    for name in result.shards:
        assert pq.read_metadata(tmp_path / name).num_rows <= 3
    assert_no_duplicate_roots(tmp_path)
    assert remove_orphans(str(tmp_path)) == []

    dead = by_root(read_dead_letter(str(tmp_path)).to_pylist(), "root")
    want = by_root([r for r in expected if r[ld.OUTCOME] != "PRESENT"])
    stages = dict(result.report.failures.select("root", "stage").iter_rows())
    assert [(d["root"], d["outcome"], d["cause"], d["stage"]) for d in dead] == [
        (r[ld.ROOT], r[ld.OUTCOME], r[ld.CAUSE], stages[r[ld.ROOT]]) for r in want
    ]
    assert [d["stage"] for d in dead] == ["render", "ocr"]
    assert [d["outcome"] for d in dead] == ["FAILED", "SUPPRESSED"]
    assert all(d["run_id"] == result.run_id for d in dead)

    again = write_shards(build(), str(tmp_path), rows_per_shard=3)  # nothing left to do
    assert (again.rows, again.dead_letter_rows, again.skipped_roots) == (0, 0, 12)
    assert again.report.parents.height == 0


def _stamped(parent, children):
    return {**assemble(parent, children), "done_at": time.time()}


def test_a_slow_job_commits_shards_on_time_before_its_last_document_is_done(tmp_path):
    """Shards roll on time (max_shard_interval_s), not only at rows_per_shard."""
    ds = build(delay=0.4, docs=8, reduce=_stamped, pages_per_doc=lambda i: 2)
    result = write_shards(ds, str(tmp_path), rows_per_shard=1000, max_shard_interval_s=0.5)
    shards = read_manifest(str(tmp_path)).shards
    rows = read_shards(str(tmp_path)).to_pylist()
    assert (result.rows, result.dead_letter_rows) == (len(rows), 1) == (7, 1)  # d05 fails
    assert len(shards) >= 2
    assert min(e.committed_at for e in shards) < max(r["done_at"] for r in rows)
    assert_no_duplicate_roots(tmp_path)


def test_retry_failed_supersedes_dead_letter(tmp_path):
    write_shards(build(), str(tmp_path), rows_per_shard=4)
    items = [{"doc": f"d{i:02d}", "n": 1 + i % 3} for i in range(12)]
    fixed = (
        ld.from_items(items, id_column="doc")
        .expand_lineage(pages, carry=["doc"], name="render")
        .reduce_lineage(assemble, name="assemble")
    )  # no OCR stage: the poison page is fine now
    retry = write_shards(fixed, str(tmp_path), rows_per_shard=4, retry_failed=True)
    assert (retry.rows, retry.dead_letter_rows, retry.skipped_roots) == (1, 1, 10)
    assert read_dead_letter(str(tmp_path))["root"].to_pylist() == [FAIL_DOC]
    assert sorted(read_shards(str(tmp_path))[ld.ROOT].to_pylist()) == sorted(
        f"d{i:02d}" for i in range(12) if f"d{i:02d}" != FAIL_DOC
    )
    assert committed_roots(str(tmp_path)) == {f"d{i:02d}" for i in range(12)}
    assert_no_duplicate_roots(tmp_path)


SCRIPT = textwrap.dedent(
    """
    import json, sys
    import ray
    import lineage_data as ld
    ld.init(include_dashboard=False, log_to_driver=False)
    ray.data.DataContext.get_current().enable_progress_bars = False
    from test_shards import build
    from lineage_data.connectors.shards import write_shards
    # shards cut on time only (no run reaches 1000 rows): the killed run leaves time-cut shards
    ds = build(delay=float(sys.argv[2]))
    result = write_shards(
        ds, sys.argv[1], rows_per_shard=1000, max_shard_interval_s=0.5, format=sys.argv[3]
    )
    print("RESULT " + json.dumps([result.rows, result.dead_letter_rows, result.skipped_roots]))
    """
)


def run_script(tmp_path, out, delay, marker="", fmt="parquet", **popen):
    script = tmp_path / "run_shards.py"
    script.write_text(SCRIPT)
    paths = os.pathsep.join([str(ROOT), str(ROOT / "tests" / "integration")])
    env = dict(os.environ, PYTHONPATH=paths, LINEAGE_DATA_PROGRESS="0", SHARDS_TEST_RUN=marker)
    env.pop("RAY_ADDRESS", None)  # a fresh local Ray, not the session's
    return subprocess.Popen(
        [sys.executable, str(script), str(out), str(delay), fmt],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        **popen,
    )


def processes_with(marker):
    """Live processes whose environment holds ``SHARDS_TEST_RUN=marker`` (Ray workers inherit it)."""
    needle = f"SHARDS_TEST_RUN={marker}".encode()
    found = []
    for environ in pathlib.Path("/proc").glob("[0-9]*/environ"):
        try:
            if needle in environ.read_bytes().split(b"\0"):
                found.append(int(environ.parent.name))
        except OSError:
            continue
    return found


def read_back(out, fmt):
    """The roots of ``out``'s shard files, read by the format's own library (any file there)."""
    if fmt == "parquet":
        import pyarrow.dataset as pads

        return pads.dataset(str(out), format="parquet").to_table()[ld.ROOT].to_pylist()
    if fmt == "lance":
        import lance

        return lance.dataset(str(out)).to_table()[ld.ROOT].to_pylist()
    import webdataset as wds

    urls = sorted(str(f) for f in out.glob("*.tar"))
    return [json.loads(s["json"])["id"] for s in wds.WebDataset(urls, shardshuffle=False)]


@pytest.mark.slow
# webdataset and jsonl shards are staged and committed by the same ShardWriter code as parquet (only
# the file's writer differs, tested in tests/unit/connectors/test_formats.py); lance commits its own
# way. Two runs here instead of four keep CI's time (each run starts two Rays of its own).
@pytest.mark.parametrize("fmt", ["parquet", "lance"])
def test_resume_after_driver_killed_equals_clean_run(tmp_path, fmt):
    out = tmp_path / "shards"
    marker = f"killed-{os.getpid()}-{time.time()}"
    proc = run_script(tmp_path, out, 0.6, marker=marker, fmt=fmt, start_new_session=True)
    deadline = time.time() + 180
    try:
        while not list((out / "_manifest").glob("*.json")):
            assert proc.poll() is None, proc.communicate()[0][-3000:]
            assert time.time() < deadline, "no manifest entry appeared"
            time.sleep(0.05)
        assert proc.poll() is None  # shards are committed while the pipeline still runs
        assert len(processes_with(marker)) > 2  # the driver, its raylet, workers...
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the driver and its local Ray (GCS, raylet)
        proc.communicate()
    # Ray workers have process groups of their own and exit once their raylet is gone; a worker
    # still writing could commit late, so the rerun starts only when all of them are gone
    deadline = time.time() + 60
    while processes_with(marker):
        assert time.time() < deadline, f"killed run left processes {processes_with(marker)}"
        time.sleep(0.2)
    done = committed_roots(str(out))
    assert 0 < len(done) < 12

    proc = run_script(tmp_path, out, 0.0, fmt=fmt)
    log = proc.communicate(timeout=300)[0]
    assert proc.returncode == 0, log[-3000:]
    rows, dead, skipped = json.loads(log.split("RESULT ", 1)[1].splitlines()[0])
    assert skipped == len(done)
    assert rows + dead == 12 - len(done)

    clean = tmp_path / "clean"
    write_shards(build(), str(clean), rows_per_shard=2)
    # every root once, read by the format's own reader over whatever files the directory holds
    # (a file of the killed run that never got its entry was removed by the resumed run)
    assert sorted(read_back(out, fmt)) == sorted(read_shards(str(clean))[ld.ROOT].to_pylist())
    if fmt == "parquet":
        assert by_root(read_shards(str(out)).to_pylist()) == by_root(
            read_shards(str(clean)).to_pylist()
        )
    if fmt == "lance":
        import lance

        assert by_root(lance.dataset(str(out)).to_table().to_pylist()) == by_root(
            read_shards(str(clean)).to_pylist()
        )
        # every fragment data file is one committed shard: nothing uncommitted is left
        files = sorted(f"data/{p.name}" for p in (out / "data").glob("*.lance"))
        assert files == sorted(e.file for e in read_manifest(str(out)).shards)
    columns = ["root", "outcome", "cause", "stage"]
    assert by_root(read_dead_letter(str(out)).select(columns).to_pylist(), "root") == by_root(
        read_dead_letter(str(clean)).select(columns).to_pylist(), "root"
    )
    assert_no_duplicate_roots(out)
    assert remove_orphans(str(out)) == []  # the resumed run left nothing uncommitted


def test_webdataset_shards_read_back_with_ray_datas_reader(tmp_path):
    import ray

    write_shards(build(docs=6), str(tmp_path), rows_per_shard=2, format="webdataset")
    files = [str(tmp_path / e.file) for e in read_manifest(str(tmp_path)).shards]
    samples = ray.data.read_webdataset(files).take_all()
    ids = sorted(
        json.loads(s["json"])["id"] if isinstance(s["json"], bytes | str) else s["json"]["id"]
        for s in samples
    )
    assert ids == sorted(read_back(tmp_path, "webdataset"))
    assert len(ids) == 5  # d05 fails (dead letter, Parquet as in every format)


def test_a_shard_directory_is_one_dataset_for_every_reader(tmp_path):
    """Mixed outcomes, groups reduced in their own block and across blocks, many small shards:
    the directory reads as one dataset with pyarrow, Ray Data, polars, DuckDB and HF datasets."""
    import datasets
    import duckdb
    import polars as pl
    import pyarrow.dataset as pads
    import ray

    out = tmp_path / "shards"
    result = write_shards(build(docs=16), str(out), rows_per_shard=2)
    files = [str(out / e.file) for e in read_manifest(str(out)).shards]
    assert result.rows == 14 and len(files) >= 5
    schemas = {pq.read_schema(f).remove_metadata() for f in files}
    assert len(schemas) == 1, schemas
    (schema,) = schemas
    assert schema.names == [ld.ROOT, "doc", "texts", "n"]
    want = sorted(r[ld.ROOT] for r in read_shards(str(out)).to_pylist())

    assert sorted(pads.dataset(str(out), format="parquet").to_table()[ld.ROOT].to_pylist()) == want
    assert sorted(r[ld.ROOT] for r in ray.data.read_parquet(str(out)).take_all()) == want
    lazy = pl.scan_parquet(f"{out}/*.parquet").collect()
    assert sorted(lazy[ld.ROOT].to_list()) == want
    rows = duckdb.sql(f"select {ld.ROOT} from read_parquet('{out}/*.parquet')").fetchall()
    assert sorted(r[0] for r in rows) == want
    hf = datasets.load_dataset(
        "parquet", data_files=files, split="train", cache_dir=str(tmp_path / "hf")
    )
    assert sorted(hf[ld.ROOT]) == want and list(hf.features) == schema.names


def test_rows_that_do_not_fit_the_directorys_schema_fail_the_run_typed(tmp_path):
    from lineage_data.connectors.shards import ShardError

    write_shards(build(docs=3), str(tmp_path), rows_per_shard=2)
    other = (
        ld.from_items([{"doc": "z1", "n": 1}], id_column="doc")
        .expand_lineage(pages, carry=["doc"], name="render")
        .reduce_lineage(lambda doc, kids: {"n": "one"}, name="assemble")
    )
    with pytest.raises(ShardError, match="column 'n' holds string where the dataset's schema"):
        write_shards(other, str(tmp_path))
    assert committed_roots(str(tmp_path)) == {"d00", "d01", "d02"}
