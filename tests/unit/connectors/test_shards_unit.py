"""Shard writer, manifest, readers and resume logic on a local temp dir: no Ray.

``write_shards`` is exercised with its Ray write swapped for the in-process executor
(``run_local``), so the resume/exclude logic is the real one.
"""

from __future__ import annotations

import json

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import lineage_data as ld
from lineage_data._core import columns as C
from lineage_data._core.local import run_local
from lineage_data.connectors import shards
from lineage_data.connectors.shards import (
    DEAD_LETTER_SCHEMA,
    ManifestEntry,
    ShardError,
    ShardWriter,
    committed_roots,
    read_dead_letter,
    read_manifest,
    read_shards,
    remove_orphans,
    write_shards,
)
from lineage_data.report import RunReport

FS = fsspec.filesystem("file")


def batch(roots, outcomes=None, **user):
    """Terminal rows as a lineage run emits them (public columns + stage + user columns)."""
    n = len(roots)
    outcomes = outcomes or ["PRESENT"] * n
    cols = {
        C.ROOT: pa.array(roots, pa.string()),
        C.OUTCOME: pa.array(outcomes, pa.string()),
        C.CAUSE: pa.array(
            [
                None if o == "PRESENT" else f"cause-{r}"
                for r, o in zip(roots, outcomes, strict=True)
            ],
            pa.string(),
        ),
        C.STAGE: pa.array([None if o == "PRESENT" else "pages" for o in outcomes], pa.string()),
    }
    cols.update(user)
    return pa.table(cols)


def writer(path, run_id="run-1", **kwargs):
    (path / "_manifest").mkdir(parents=True, exist_ok=True)
    (path / "_dead_letter").mkdir(parents=True, exist_ok=True)
    return ShardWriter(FS, str(path), run_id=run_id, **kwargs)


def shard_sizes(path):
    return [e.rows for e in read_manifest(str(path)).shards]


def test_present_rows_to_shards_others_to_dead_letter(tmp_path):
    w = writer(tmp_path, rows_per_shard=10)
    w.add(batch(["a", "b", "c"], ["PRESENT", "FAILED", "PRESENT"], text=pa.array(["x", None, "z"])))
    w.add(batch(["d", "e"], ["SUPPRESSED", "PRESENT"], text=pa.array([None, "e!"])))
    entries = w.close()
    assert sorted(e.kind for e in entries) == ["dead_letter", "shard"]

    rows = read_shards(str(tmp_path))
    assert rows.column_names == [C.ROOT, "text"]  # bookkeeping columns dropped
    assert sorted(rows.to_pylist(), key=lambda r: r[C.ROOT]) == [
        {C.ROOT: "a", "text": "x"},
        {C.ROOT: "c", "text": "z"},
        {C.ROOT: "e", "text": "e!"},
    ]
    dead = read_dead_letter(str(tmp_path))
    assert dead.schema == DEAD_LETTER_SCHEMA
    assert [
        (r["root"], r["outcome"], r["cause"], r["stage"], r["run_id"]) for r in dead.to_pylist()
    ] == [
        ("b", "FAILED", "cause-b", "pages", "run-1"),
        ("d", "SUPPRESSED", "cause-d", "pages", "run-1"),
    ]
    assert committed_roots(str(tmp_path)) == {"a", "b", "c", "d", "e"}


def test_manifest_entry_is_complete_json(tmp_path):
    w = writer(tmp_path, rows_per_shard=10, clock=lambda: 1234.5)
    w.add(batch(["r1", "r2"], x=pa.array([1, 2])))
    (entry,) = w.close()
    raw = json.loads((tmp_path / "_manifest" / f"{entry.entry}.json").read_text())
    assert raw == {
        "entry": entry.entry,
        "kind": "shard",
        "file": entry.file,
        "rows": 2,
        "bytes": (tmp_path / entry.file).stat().st_size,
        "roots": ["r1", "r2"],
        "run_id": "run-1",
        "committed_at": 1234.5,
        "version": 1,
    }
    assert entry.file.startswith("part-") and entry.file.endswith(".parquet")
    assert ManifestEntry.from_json(entry.to_json()) == entry
    assert not list((tmp_path / "_manifest").glob(".tmp-*"))


def test_newer_manifest_version_is_refused():
    with pytest.raises(ShardError, match="version"):
        ManifestEntry.from_json(json.dumps({"entry": "x", "version": 99, "roots": []}))


def test_rows_per_shard_splits_batches(tmp_path):
    w = writer(tmp_path, rows_per_shard=7)
    for start in range(0, 30, 10):
        w.add(
            batch(
                [f"r{i:02d}" for i in range(start, start + 10)],
                x=pa.array(range(start, start + 10)),
            )
        )
    w.close()
    assert sorted(shard_sizes(tmp_path)) == [2, 7, 7, 7, 7]
    for e in read_manifest(str(tmp_path)).shards:
        table = pq.read_table(tmp_path / e.file)
        assert table[C.ROOT].to_pylist() == list(e.roots)
        assert pq.ParquetFile(tmp_path / e.file).metadata.num_row_groups == 1
    assert sorted(read_shards(str(tmp_path))["x"].to_pylist()) == list(range(30))


def test_full_shards_are_committed_before_close(tmp_path):
    w = writer(tmp_path, rows_per_shard=4)
    w.add(batch([f"r{i}" for i in range(9)]))
    assert shard_sizes(tmp_path) == [4, 4]  # visible to readers while the writer is still open
    w.close()
    assert sorted(shard_sizes(tmp_path)) == [1, 4, 4]


def test_max_bytes_per_shard(tmp_path):
    payload = pa.array([b"x" * 100] * 10, pa.binary())
    one_row = batch(["q"], payload=payload.slice(0, 1)).drop_columns([C.OUTCOME, C.CAUSE, C.STAGE])
    bound = 3 * one_row.nbytes + 10
    w = writer(tmp_path, rows_per_shard=100, max_bytes_per_shard=bound)
    w.add(batch([f"r{i}" for i in range(10)], payload=payload))
    w.add(batch(["big"], payload=pa.array([b"y" * 1000], pa.binary())))  # above the bound alone
    w.close()
    manifest = read_manifest(str(tmp_path))
    sizes = sorted(e.rows for e in manifest.shards)
    assert sizes == [1, 1, 3, 3, 3]
    for e in manifest.shards:
        table = pq.read_table(tmp_path / e.file)
        assert table.nbytes <= bound or e.roots == ("big",)


def test_row_group_rows(tmp_path):
    w = writer(tmp_path, rows_per_shard=10, row_group_rows=4)
    for i in range(10):
        w.add(batch([f"r{i}"], x=pa.array([i])))
    (entry,) = w.close()
    meta = pq.ParquetFile(tmp_path / entry.file).metadata
    assert (meta.num_rows, meta.num_row_groups) == (10, 3)


def test_a_later_column_grows_the_schema_a_fixed_schema_refuses_it(tmp_path):
    w = writer(tmp_path, rows_per_shard=2)
    w.add(batch(["a", "b"], x=pa.array([1, 2])))
    w.add(batch(["c", "d"], y=pa.array(["c", "d"])))  # a key only later documents have
    w.close()
    recorded = json.loads((tmp_path / "_schema.json").read_text())["columns"]
    assert recorded == [[C.ROOT, "string"], ["x", "int64"], ["y", "string"]]
    rows = {r[C.ROOT]: r for r in read_shards(str(tmp_path)).to_pylist()}
    assert rows["c"] == {C.ROOT: "c", "x": None, "y": "c"}
    w = writer(tmp_path, rows_per_shard=10, run_id="run-2")
    w.add(batch(["g"], x=pa.array(["not a number"])))
    with pytest.raises(
        ShardError, match="column 'x' holds string where the dataset's schema has int64"
    ):
        w.close()
    fixed = pa.schema([(C.ROOT, pa.string()), ("x", pa.int64())])
    w = ShardWriter(fsspec.filesystem("file"), str(tmp_path / "new"), run_id="r", schema=fixed)
    (tmp_path / "new" / "_manifest").mkdir(parents=True)
    w.add(batch(["h"], x=pa.array([1])))
    w.add(batch(["i"], z=pa.array([1])))
    with pytest.raises(ShardError, match=r"the rows have columns \['z'\].*write_shards\(schema="):
        w.close()


def test_every_shard_of_a_directory_has_one_schema_whatever_its_rows_order(tmp_path):
    first = batch(["a"], x=pa.array([1]), tags=pa.array([[]], pa.list_(pa.null())))
    w = writer(tmp_path, rows_per_shard=1)
    w.add(first)
    last = pa.table({"tags": pa.array([["t"]]), "x": pa.array([2]), C.ROOT: pa.array(["b"])})
    w.add(last.append_column(C.OUTCOME, pa.array(["PRESENT"])))  # root last, tags typed now
    w.add(batch(["c"], x=pa.array([None], pa.int64())))  # no tags at all
    w.close()
    schemas = {pq.read_schema(tmp_path / e.file) for e in read_manifest(str(tmp_path)).shards}
    assert [s.names for s in schemas] == [[C.ROOT, "x", "tags"]] * len(schemas)
    assert {str(s.field("tags").type.value_type) for s in schemas} <= {"null", "string"}
    recorded = json.loads((tmp_path / "_schema.json").read_text())["columns"]
    assert recorded == [[C.ROOT, "string"], ["x", "int64"], ["tags", "list<item: string>"]]


def test_missing_columns_are_filled_within_a_shard(tmp_path):
    w = writer(tmp_path, rows_per_shard=10)
    w.add(batch(["a"], x=pa.array([1]), y=pa.array(["a"])))
    w.add(batch(["b"], x=pa.array([2])))
    (entry,) = w.close()
    assert pq.read_table(tmp_path / entry.file).to_pylist() == [
        {C.ROOT: "a", "x": 1, "y": "a"},
        {C.ROOT: "b", "x": 2, "y": None},
    ]


def test_lineage_missing_is_kept(tmp_path):
    w = writer(tmp_path)
    w.add(
        batch(["a"], x=pa.array([1])).append_column(
            C.MISSING, pa.array([[2]], pa.list_(pa.int32()))
        )
    )
    w.close()
    assert read_shards(str(tmp_path)).column_names == [C.ROOT, C.MISSING, "x"]


def test_empty_writer_commits_nothing(tmp_path):
    w = writer(tmp_path)
    w.add(batch([]))
    assert w.close() == []
    assert read_manifest(str(tmp_path)).entries == ()
    assert read_shards(str(tmp_path)).num_rows == 0


def test_readers_on_a_missing_directory(tmp_path):
    path = str(tmp_path / "nothing")
    assert read_shards(path).column_names == [C.ROOT]
    assert read_dead_letter(path).schema == DEAD_LETTER_SCHEMA
    assert committed_roots(path) == set()


def test_orphans_are_ignored_and_removed(tmp_path):
    w = writer(tmp_path, rows_per_shard=2)
    w.add(batch(["a", "b"]))
    w.close()
    orphan = batch(["zombie"]).select([C.ROOT])
    pq.write_table(orphan, tmp_path / "part-deadbeef.parquet")
    pq.write_table(orphan, tmp_path / "_dead_letter" / "part-deadbeef.parquet")
    (tmp_path / "_manifest" / ".tmp-123-x.json").write_text("{")
    assert sorted(read_shards(str(tmp_path))[C.ROOT].to_pylist()) == ["a", "b"]
    removed = remove_orphans(str(tmp_path))
    assert len(removed) == 3
    assert sorted(p.name for p in tmp_path.glob("part-*")) == [
        read_manifest(str(tmp_path)).shards[0].file
    ]
    assert remove_orphans(str(tmp_path)) == []


def test_retried_write_task_commits_nothing_twice(tmp_path):
    for _ in range(2):  # the same run, same rows: a Ray write task retried after its commit
        w = writer(tmp_path, run_id="same", rows_per_shard=2)
        w.add(batch(["a", "b", "c"], ["PRESENT", "PRESENT", "FAILED"]))
        w.close()
    manifest = read_manifest(str(tmp_path))
    assert [e.kind for e in manifest.entries].count("shard") == 1
    assert len(manifest.dead_letters) == 1
    assert remove_orphans(str(tmp_path)) == []  # the retry removed its own files


def test_readers_return_a_root_once_even_if_listed_twice(tmp_path):
    for run, value in (("one", 1), ("two", 2)):  # two writers on one path: not supported, but safe
        w = writer(tmp_path, run_id=run, clock=lambda v=value: float(v))
        w.add(batch(["a", f"only-{run}"], x=pa.array([value, value])))
        w.close()
    rows = sorted(read_shards(str(tmp_path)).to_pylist(), key=lambda r: r[C.ROOT])
    assert rows == [
        {C.ROOT: "a", "x": 1},
        {C.ROOT: "only-one", "x": 1},
        {C.ROOT: "only-two", "x": 2},
    ]


def test_dead_letter_newest_outcome_wins_and_shards_supersede(tmp_path):
    w = writer(tmp_path, run_id="one", clock=lambda: 1.0)
    w.add(batch(["a", "b", "c"], ["FAILED", "FAILED", "PRESENT"]))
    w.close()
    w = writer(tmp_path, run_id="two", clock=lambda: 2.0)
    w.add(batch(["a", "b"], ["PRESENT", "SUPPRESSED"]))
    w.close()
    dead = read_dead_letter(str(tmp_path)).to_pylist()
    assert [(r["root"], r["outcome"], r["run_id"]) for r in dead] == [("b", "SUPPRESSED", "two")]
    assert sorted(read_shards(str(tmp_path))[C.ROOT].to_pylist()) == ["a", "c"]
    assert committed_roots(str(tmp_path)) == {"a", "b", "c"}


def test_readers_accept_fsspec_and_pyarrow_filesystems(tmp_path):
    import pyarrow.fs as pafs

    w = writer(tmp_path)
    w.add(batch(["a", "b"], ["PRESENT", "FAILED"]))
    w.close()
    for fs in (FS, pafs.LocalFileSystem()):
        assert read_shards(str(tmp_path), filesystem=fs)[C.ROOT].to_pylist() == ["a"]
        assert read_dead_letter(str(tmp_path), filesystem=fs)["root"].to_pylist() == ["b"]
    assert committed_roots(f"file://{tmp_path}") == {"a", "b"}


def test_sizes_must_be_positive(tmp_path):
    with pytest.raises(ValueError):
        writer(tmp_path, rows_per_shard=0)
    with pytest.raises(ValueError):
        writer(tmp_path, row_group_rows=0)


# -- write_shards with the Ray write replaced by the in-process executor --------------------------------
class Crash(Exception):
    pass


class FakeSink:
    def __init__(self, fs, path, **kwargs):
        self.fs, self.path, self.kwargs = fs, path, kwargs


@pytest.fixture
def local_write(monkeypatch):
    """Swap the Ray write for run_local; ``crash_after`` rows stops the 'driver' mid-run."""
    calls = []

    def fake_write(run, sink, rows_per_shard):
        calls.append(sorted(run.plan.exclude))
        kinds = {s.name: s.kind.value for s in run.plan.stages}
        result = run_local(run.plan, batch_size=3, seed=len(calls))
        table = C.rows_to_table(result.rows)
        w = ShardWriter(sink.fs, sink.path, **sink.kwargs)
        limit = local_write.crash_after
        for start in range(0, table.num_rows, 2):  # write tasks of two rows each
            if limit is not None and start >= limit:
                raise Crash
            w.add(table.slice(start, 2))
            if start % 4 == 2:
                w.close()
                w = ShardWriter(sink.fs, sink.path, **sink.kwargs)
        w.close()
        run._set_report(RunReport.from_snapshot(result.snapshot(), kinds, 0.0))

    local_write.crash_after = None
    local_write.calls = calls
    monkeypatch.setattr(
        ld.LineageDataset,
        "write_datasink",
        lambda self, sink, rows_per_write=None, **rolling: fake_write(self, sink, rows_per_write),
    )
    monkeypatch.setattr(shards, "_datasink_class", lambda: FakeSink)
    return local_write


def pipeline(fail=("d3", "d7")):
    def expand(row):
        if row["doc"] in fail:
            raise ValueError(f"bad {row['doc']}")
        return [{"page": i} for i in range(row["n"])]

    items = [{"doc": f"d{i}", "n": i % 3} for i in range(12)]
    return (
        ld.from_items(items, id_column="doc")
        .expand_lineage(expand, name="pages")
        .reduce_lineage(name="docs")
    )


def sorted_rows(table, key=C.ROOT):
    return sorted(table.to_pylist(), key=lambda r: r[key])


def test_write_shards_clean_run(tmp_path, local_write):
    result = write_shards(pipeline(), str(tmp_path), rows_per_shard=3)
    assert (result.rows, result.dead_letter_rows, result.skipped_roots) == (10, 2, 0)
    assert result.manifest_path == f"{tmp_path}/_manifest"
    assert set(result.shards) == {e.file for e in read_manifest(str(tmp_path)).shards}
    assert result.report.parents.height == 12
    assert sorted(read_dead_letter(str(tmp_path))["root"].to_pylist()) == ["d3", "d7"]
    assert "report" not in repr(result)


def test_resume_after_crash_equals_clean_run(tmp_path, local_write):
    clean = tmp_path / "clean"
    write_shards(pipeline(), str(clean), rows_per_shard=3)
    crashed = tmp_path / "crashed"
    local_write.crash_after = 6
    with pytest.raises(Crash):
        write_shards(pipeline(), str(crashed), rows_per_shard=3)
    done = committed_roots(str(crashed))
    assert 0 < len(done) < 12
    local_write.crash_after = None
    result = write_shards(pipeline(), str(crashed), rows_per_shard=3)
    assert local_write.calls[-1] == sorted(done)  # committed roots were excluded from the plan
    assert result.skipped_roots == len(done)
    assert result.report.parents.height == 12 - len(done)
    assert sorted_rows(read_shards(str(crashed))) == sorted_rows(read_shards(str(clean)))
    columns = ["root", "outcome", "cause", "stage"]
    assert sorted_rows(read_dead_letter(str(crashed)).select(columns), "root") == sorted_rows(
        read_dead_letter(str(clean)).select(columns), "root"
    )
    roots = [r for e in read_manifest(str(crashed)).shards for r in e.roots]
    assert len(roots) == len(set(roots))


def test_rerun_of_finished_path_does_nothing(tmp_path, local_write):
    write_shards(pipeline(), str(tmp_path))
    again = write_shards(pipeline(), str(tmp_path))
    assert (again.rows, again.dead_letter_rows, again.skipped_roots, again.shards) == (0, 0, 12, ())


def test_failed_roots_are_not_retried_unless_asked(tmp_path, local_write):
    write_shards(pipeline(fail=("d3", "d7")), str(tmp_path))
    again = write_shards(pipeline(fail=()), str(tmp_path))  # the cause is fixed
    assert again.rows == 0 and sorted(read_dead_letter(str(tmp_path))["root"].to_pylist()) == [
        "d3",
        "d7",
    ]
    retry = write_shards(pipeline(fail=("d7",)), str(tmp_path), retry_failed=True)
    assert local_write.calls[-1] == sorted(f"d{i}" for i in range(12) if i not in (3, 7))
    assert (retry.rows, retry.dead_letter_rows, retry.skipped_roots) == (1, 1, 10)
    dead = read_dead_letter(str(tmp_path))
    assert dead["root"].to_pylist() == ["d7"] and dead["run_id"].to_pylist() == [retry.run_id]
    assert sorted(read_shards(str(tmp_path))[C.ROOT].to_pylist()) == sorted(
        f"d{i}" for i in range(12) if i != 7
    )


def test_resume_false_refuses_a_used_path(tmp_path, local_write):
    write_shards(pipeline(), str(tmp_path))
    with pytest.raises(ShardError, match="resume=True"):
        write_shards(pipeline(), str(tmp_path), resume=False)
    fresh = write_shards(pipeline(), str(tmp_path / "fresh"), resume=False)
    assert fresh.rows == 10


def test_open_plan_is_refused(tmp_path):
    ds = ld.from_items([{"doc": "a"}], id_column="doc").expand_lineage(lambda row: [row])
    with pytest.raises(ld.PlanError, match="closed plan"):
        write_shards(ds, str(tmp_path))
    with pytest.raises(ValueError):
        write_shards(pipeline(), str(tmp_path), max_bytes_per_shard=0)
