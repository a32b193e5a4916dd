"""Exactly-once training shards with a manifest, resume and a dead-letter table.

:func:`write_shards` streams the terminal rows of a closed lineage plan into a directory (local or
any fsspec URL) through a Ray Data ``Datasink`` while the pipeline runs; the layout is in
:mod:`lineage_data.connectors.manifest`, whose readers are re-exported here.

Commit point: a data file is written under a fresh unique name, then the manifest entry naming it
(an S3 PUT is atomic; on a local disk it is renamed into place). An entry's name hashes the run id,
the kind and the sorted roots of its file, so a Ray write task retried inside one run commits
nothing twice; a new run excludes the committed roots from its plan before it starts. One writer
per path at a time. Rolling, resume and formats: ``docs/guide/shards.md``.
"""

from __future__ import annotations

import bisect
import contextlib
import functools
import json
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from lineage_data import LineageError, PlanError
from lineage_data._core import columns as C
from lineage_data.connectors import formats, lance_format, schema
from lineage_data.connectors.manifest import (
    DEAD_LETTER,
    DEAD_LETTER_DIR,
    DEAD_LETTER_SCHEMA,
    MANIFEST_DIR,
    REPORTS_DIR,
    SHARD,
    STAGING_DIR,
    Manifest,
    ManifestEntry,
    ShardError,
    committed_roots,
    concat_tables,
    is_local,
    join_path,
    load_manifest,
    put_atomic,
    read_dead_letter,
    read_manifest,
    read_shards,
    remove_orphans,
)
from lineage_data.connectors.s3 import check_access, resolve_filesystem, s3_errors

MiB = 1 << 20
# A shard is committed this long after its first row at the latest (Flink's FileSink rolls on time
# too). Measured with the installed PDF job (bench/results/job-*.json): its first document is done
# ~11 s after the command starts (Ray's start, then the pipeline's), so 10 s put the first shard at
# 38 % of a 52 s job; 5 s keeps a job of a minute's first shard in its first third.
DEFAULT_SHARD_INTERVAL_S = 5.0

if TYPE_CHECKING:
    from lineage_data.dataset import LineageDataset
    from lineage_data.report import RunReport

__all__ = [
    "DEAD_LETTER_SCHEMA",
    "REPORTS_DIR",
    "Manifest",
    "ManifestEntry",
    "ShardError",
    "ShardResult",
    "ShardWriter",
    "committed_roots",
    "read_dead_letter",
    "read_manifest",
    "read_shards",
    "remove_orphans",
    "write_shards",
]

_KEEP_RESERVED = (C.ROOT, C.MISSING)


@dataclass(frozen=True)
class ShardResult:
    """What one :func:`write_shards` call did.

    Attributes:
        shards: Shard files (relative names) this call committed.
        rows: PRESENT rows this call committed to shards.
        dead_letter_rows: Rows this call committed to the dead-letter table.
        skipped_roots: Roots already committed when the call started, excluded from its plan.
        manifest_path: The manifest directory.
        report: The :class:`~lineage_data.RunReport` of the dataset actually executed.
        run_id: This call's id, in its manifest entries and dead-letter rows.
    """

    shards: tuple[str, ...]
    rows: int
    dead_letter_rows: int
    skipped_roots: int
    manifest_path: str
    report: RunReport | None = field(repr=False)
    run_id: str


def _check_options(rows: int, max_bytes: int, row_group_rows: int | None, fmt: str) -> None:
    if rows < 1 or max_bytes < 1 or (row_group_rows is not None and row_group_rows < 1):
        raise ValueError("rows_per_shard, max_bytes_per_shard and row_group_rows must be positive")
    if fmt not in formats.FORMATS:
        raise ValueError(f"format must be one of {list(formats.FORMATS)}, got {fmt!r}")


class ShardWriter:
    """Writes the terminal rows of one stream (one Ray write task) into shards and commits them.

    Ray-free: feed it Arrow tables with :meth:`add`, then call :meth:`close`. PRESENT rows are cut
    into shards of at most ``rows_per_shard`` rows and ``max_bytes_per_shard`` Arrow bytes (one row
    above the byte bound gets a shard of its own), each committed when full; other rows go to one
    dead-letter file, committed by :meth:`close`. Of the reserved columns, only ``_lineage_root``
    and ``_lineage_missing`` are written to shards.

    Args:
        fs: An fsspec filesystem.
        path: The shard directory inside ``fs``.
        run_id: Id of the :func:`write_shards` call; part of every entry name.
        rows_per_shard: Most rows per shard.
        max_bytes_per_shard: Most Arrow (uncompressed) bytes per shard; Parquet files are smaller.
        row_group_rows: Rows per Parquet row group; None buffers the whole shard as one row group.
        clock: Time source for ``committed_at`` and the dead-letter ``time``.
    """

    def __init__(
        self,
        fs: Any,
        path: str,
        *,
        run_id: str,
        rows_per_shard: int = 1000,
        max_bytes_per_shard: int = 256 * MiB,
        row_group_rows: int | None = None,
        clock: Any = time.time,
        format: str = "parquet",
        text_column: str | None = None,
        source: str | None = None,
        schema: pa.Schema | None = None,
    ) -> None:
        _check_options(rows_per_shard, max_bytes_per_shard, row_group_rows, format)
        self._fixed = schema  # write_shards(schema=...): no column beyond it
        self._format = format
        self._options = {"text_column": text_column, "source": source}
        self._fs, self._path, self._run_id, self._clock = fs, path.rstrip("/"), run_id, clock
        self._rows_per_shard = rows_per_shard
        self._max_bytes = max_bytes_per_shard
        self._row_group_rows = row_group_rows
        self._pending: list[pa.Table] = []  # rows of the next row group
        self._pending_rows = self._shard_rows = self._shard_bytes = 0  # shard: written + pending
        self._roots: list[str] = []  # roots written to the open shard's file so far
        self._file: Any = None
        self._writer: formats.ShardFile | None = None
        self._name = ""
        self._dead: list[pa.Table] = []
        self._schema: pa.Schema | None = None  # the directory's (lineage_data.connectors.schema)
        self.committed: list[ManifestEntry] = []

    def add(self, table: pa.Table) -> None:
        """Take one batch of terminal rows (public lineage columns + user columns)."""
        if not table.num_rows:
            return
        present = pc.fill_null(pc.equal(table[C.OUTCOME], "PRESENT"), False)
        dead = table.filter(pc.invert(present))
        if dead.num_rows:
            self._dead.append(self._dead_rows(dead))
        rows = table.filter(present)
        drop = [n for n in rows.column_names if C.is_reserved(n) and n not in _KEEP_RESERVED]
        self._add_present(rows.drop_columns(drop))

    def _dead_rows(self, dead: pa.Table) -> pa.Table:
        n = dead.num_rows
        stage = dead[C.STAGE] if C.STAGE in dead.column_names else pa.nulls(n, pa.string())
        cause = dead[C.CAUSE] if C.CAUSE in dead.column_names else pa.nulls(n, pa.string())
        now = pa.scalar(int(self._clock() * 1e6), pa.timestamp("us", tz="UTC"))
        return pa.Table.from_arrays(
            [
                dead[C.ROOT].cast(pa.string()),
                stage.cast(pa.string()),
                dead[C.OUTCOME].cast(pa.string()),
                cause.cast(pa.string()),
                pa.array([now.value] * n, now.type),
                pa.array([self._run_id] * n, pa.string()),
            ],
            schema=DEAD_LETTER_SCHEMA,
        )

    def _add_present(self, table: pa.Table) -> None:
        offset, n = 0, table.num_rows
        while offset < n:
            room_rows = min(self._rows_per_shard - self._shard_rows, n - offset)
            take = self._fitting(table, offset, room_rows, self._max_bytes - self._shard_bytes)
            if take == 0:
                if self._shard_rows:
                    self._finish_shard()
                    continue
                take = 1  # a single row above the byte bound: a shard of its own
            piece = table.slice(offset, take)
            offset += take
            self._pending.append(piece)
            self._pending_rows += take
            self._shard_rows += take
            self._shard_bytes += piece.nbytes
            if self._shard_rows >= self._rows_per_shard or self._shard_bytes >= self._max_bytes:
                self._finish_shard()
            elif self._row_group_rows is not None and self._pending_rows >= self._row_group_rows:
                self._flush_row_group()

    @staticmethod
    def _fitting(table: pa.Table, offset: int, most: int, room_bytes: int) -> int:
        """The most rows from ``offset`` (up to ``most``) whose Arrow size fits ``room_bytes``."""
        if table.slice(offset, most).nbytes <= room_bytes:
            return most
        # bytes grow with rows: the largest k in 1..most-1 that fits, else 0
        return bisect.bisect_right(
            range(1, most), room_bytes, key=lambda k: table.slice(offset, k).nbytes
        )

    def _dataset_schema(self, table: pa.Table) -> pa.Schema:
        """The directory's one schema (see :mod:`lineage_data.connectors.schema`), recorded by the first shard."""
        if self._schema is None:
            self._schema = schema.load(self._fs, self._path)
            if self._schema is None:
                self._schema = self._fixed or table.schema
                schema.record(self._fs, self._path, self._schema)
        if self._format == "lance":  # one schema per Lance dataset: the first shard's is final
            return self._schema
        grow = self._fixed is None
        if schema.merged(self._schema, table, grow=grow) is not None:  # typed at last, or new
            # another write task may have grown it meanwhile: grow the newest record
            latest = schema.load(self._fs, self._path) or self._schema
            for other in (self._schema.empty_table(), table):
                latest = schema.merged(latest, other, grow=grow) or latest
            self._schema = latest
            schema.record(self._fs, self._path, latest)
        return self._schema

    def _flush_row_group(self) -> None:
        if not self._pending:
            return
        table = schema.canonical(concat_tables(self._pending).replace_schema_metadata(None))
        table = schema.conform(table, self._dataset_schema(table), self._path)
        if self._writer is not None and self._writer.schema != table.schema:
            # the schema gained a type: close this shard, the rows open the next one
            self._commit_shard()
            self._shard_rows = self._pending_rows
            self._shard_bytes = sum(t.nbytes for t in self._pending)
        if self._writer is None:
            self._name = f"part-{uuid.uuid4().hex}.{formats.EXTENSIONS[self._format]}"
            self._file = self._fs.open(self._staged(self._name), "wb")
            self._writer = formats.open_shard(self._format, self._file, table.schema, self._options)
        self._writer.write(table, self._row_group_rows)
        self._roots.extend(table[C.ROOT].to_pylist())
        self._pending, self._pending_rows = [], 0

    def _finish_shard(self) -> None:
        self._flush_row_group()
        self._commit_shard()
        self._shard_rows = self._shard_bytes = 0

    def _staged(self, name: str) -> str:
        """Where a data file is written while incomplete (on S3: in place, visible when done)."""
        if not is_local(self._fs):
            return join_path(self._path, name)
        self._fs.makedirs(join_path(self._path, STAGING_DIR), exist_ok=True)
        return join_path(self._path, STAGING_DIR, name)

    def _commit_shard(self) -> None:
        if self._writer is None:
            return
        size = self._writer.close()
        roots, name = tuple(self._roots), self._name
        self._writer, self._file, self._roots = None, None, []
        staged, final = self._staged(name), join_path(self._path, name)
        if self._format == "lance":  # an uncommitted Lance fragment, rolled into Lance after
            name, size = lance_format.write_fragment(self._fs, self._path, staged)
        elif staged != final:
            self._fs.mv(staged, final)
        self._commit(SHARD, name, roots, size)

    def _commit(self, kind: str, file: str, roots: tuple[str, ...], size: int) -> None:
        entry = ManifestEntry(
            entry=ManifestEntry.name_for(self._run_id, kind, roots),
            kind=kind,
            file=file,
            rows=len(roots),
            bytes=size,
            roots=roots,
            run_id=self._run_id,
            committed_at=self._clock(),
        )
        target = join_path(self._path, MANIFEST_DIR, f"{entry.entry}.json")
        self._fs.invalidate_cache(target)
        if self._fs.exists(target):  # a retried write task: these rows are committed already
            self._fs.rm(join_path(self._path, file))
            return
        put_atomic(self._fs, target, entry.to_json())
        self.committed.append(entry)

    def close(self) -> list[ManifestEntry]:
        """Commit the open shard and the dead-letter rows; return the entries committed."""
        self._finish_shard()
        if self._dead:
            table = concat_tables(self._dead)
            name = join_path(DEAD_LETTER_DIR, f"part-{uuid.uuid4().hex}.parquet")
            with self._fs.open(join_path(self._path, name), "wb") as f:
                pq.write_table(table, f)
                size = f.tell()
            self._dead = []
            self._commit(DEAD_LETTER, name, tuple(table["root"].to_pylist()), size)
        return list(self.committed)


@functools.cache
def _datasink_class() -> type:
    """The Ray Data sink, built on first use so that this module loads without Ray."""
    from ray.data import Datasink
    from ray.data.block import BlockAccessor

    class ShardDatasink(Datasink):
        """Runs one :class:`ShardWriter` per Ray write task (one input bundle)."""

        lineage_stage_column = True  # the dead-letter table names the stage a root failed at

        def __init__(self, fs: Any, path: str, **writer_kwargs: Any) -> None:
            self._fs, self._path, self._kwargs = fs, path, writer_kwargs

        @property
        def min_rows_per_write(self) -> int:
            """Bundle about one shard's worth of rows per write task."""
            return int(self._kwargs["rows_per_shard"])

        def write(self, blocks: Iterable[Any], ctx: Any) -> list[str]:
            """Write one bundle; the entries committed (a failed task leaves an orphan)."""
            with s3_errors(self._path, self._fs):
                writer = ShardWriter(self._fs, self._path, **self._kwargs)
                for block in blocks:
                    writer.add(BlockAccessor.for_block(block).to_arrow())
                return [e.entry for e in writer.close()]

    return ShardDatasink


def _save_report(fs: Any, root: str, run: LineageDataset, run_id: str) -> None:
    """Keep the run report beside the shards (``_reports/<run_id>.json``) for ``lineage-data report``."""
    try:
        report = run.report()
    except LineageError:
        return  # the run failed before it produced a report
    fs.makedirs(join_path(root, REPORTS_DIR), exist_ok=True)
    put_atomic(
        fs, join_path(root, REPORTS_DIR, f"{run_id}.json"), json.dumps(report.to_dict()).encode()
    )


def write_shards(
    ds: LineageDataset,
    path: str,
    *,
    rows_per_shard: int = 1000,
    max_bytes_per_shard: int = 256 * MiB,
    max_shard_interval_s: float | None = DEFAULT_SHARD_INTERVAL_S,
    filesystem: Any = None,
    row_group_rows: int | None = None,
    resume: bool = True,
    retry_failed: bool = False,
    create_bucket: bool = False,
    format: str = "parquet",
    text_column: str | None = None,
    source: str | None = None,
    schema: pa.Schema | None = None,
) -> ShardResult:
    """Run ``ds`` and write its rows as training shards under ``path``, exactly once per root.

    Args:
        ds: A closed lineage plan (``ds.level == 0``).
        path: Directory (local path or fsspec URL, e.g. ``s3://bucket/shards``).
        rows_per_shard: Most rows per shard.
        max_bytes_per_shard: Most Arrow (uncompressed) bytes per shard.
        max_shard_interval_s: Most seconds from a shard's first row to its commit (None: none).
        filesystem: An fsspec (or pyarrow) filesystem; inferred from ``path`` when None.
        row_group_rows: Rows per Parquet row group; None writes each shard as one row group.
        resume: Skip roots already committed under ``path``. False refuses a path that holds any.
        retry_failed: Also run the roots in the dead-letter table again (only with ``resume``).
        create_bucket: On S3, create the bucket of ``path`` if missing (else that is an error).
        format: ``"parquet"``, ``"webdataset"``, ``"jsonl"`` (:mod:`~lineage_data.connectors.formats`)
            or ``"lance"`` (a local Lance dataset, one fragment per shard, the first shard's schema
            final; :mod:`~lineage_data.connectors.lance_format`). Dead letters are Parquet.
        text_column: The text of a document (default ``markdown``, else ``text``).
        source: The ``source`` field of JSONL documents.
        schema: Every shard's schema, fixed in advance (default: the first shard's, then grown).

    Raises:
        PlanError: ``ds`` is not a closed plan.
        ShardError: ``resume=False`` and ``path`` already holds committed entries.
        S3AccessError: S3 refused the credentials (raised before anything runs).
        S3BucketNotFoundError: The bucket does not exist and ``create_bucket`` is False.
        ValueError: A size argument is not positive.
    """
    if ds.level != 0:
        raise PlanError(f"write_shards needs a closed plan (level 0), got level {ds.level}")
    _check_options(rows_per_shard, max_bytes_per_shard, row_group_rows, format)
    fs, root, skip = _open_directory(path, filesystem, resume, retry_failed, create_bucket)
    run = ds.exclude_roots(skip) if skip else ds
    sink_options = {
        "rows_per_shard": rows_per_shard,
        "max_bytes_per_shard": max_bytes_per_shard,
        "row_group_rows": row_group_rows,
        "format": format,
        "text_column": text_column,
        "source": source,
        "schema": schema,
    }
    run_id = _run(run, fs, root, path, sink_options, max_shard_interval_s)
    return _result(fs, root, path, run, run_id, skipped=len(skip))


def _run(
    run: LineageDataset,
    fs: Any,
    root: str,
    path: str,
    sink_options: dict[str, Any],
    interval_s: float | None,
) -> str:
    """Run ``run`` into the shard directory, return its id; its report is saved even if it fails."""
    run_id = uuid.uuid4().hex
    sink = _datasink_class()(fs, root, run_id=run_id, **sink_options)
    # a Lance directory has one Lance committer: this call's (lance_format explains why)
    lance = sink_options["format"] == "lance"
    try:
        with lance_format.committer(fs, root) if lance else contextlib.nullcontext():
            run.write_datasink(
                sink,
                rows_per_write=sink_options["rows_per_shard"],
                max_bytes_per_write=sink_options["max_bytes_per_shard"],
                max_write_interval_s=interval_s,
            )
    finally:
        with s3_errors(path, fs):
            _save_report(fs, root, run, run_id)
    return run_id


def _open_directory(
    path: str, filesystem: Any, resume: bool, retry_failed: bool, create_bucket: bool
) -> tuple[Any, str, set[str]]:
    """``(fs, root, roots to skip)`` of a shard directory made ready for a run (orphans removed)."""
    fs, root = resolve_filesystem(path, filesystem)
    check_access(fs, root, create_bucket=create_bucket)
    with s3_errors(path, fs):
        before = load_manifest(fs, root)
        for directory in (MANIFEST_DIR, DEAD_LETTER_DIR):
            fs.makedirs(join_path(root, directory), exist_ok=True)
    if before.entries and not resume:
        raise ShardError(
            f"{path} already holds {len(before.entries)} committed entries: "
            "pass resume=True, or write to a new path"
        )
    if before.entries:  # one writer per path: files a killed run left without an entry go
        remove_orphans(path, filesystem=fs)
    return fs, root, before.present_roots if retry_failed else before.committed_roots


def _result(
    fs: Any, root: str, path: str, run: LineageDataset, run_id: str, *, skipped: int
) -> ShardResult:
    """What run ``run_id`` committed, from the manifest (what the manifest says is the truth)."""
    with s3_errors(path, fs):
        mine = [e for e in load_manifest(fs, root).entries if e.run_id == run_id]
    shards = [e for e in mine if e.kind == SHARD]
    return ShardResult(
        tuple(e.file for e in shards),
        sum(e.rows for e in shards),
        sum(e.rows for e in mine if e.kind == DEAD_LETTER),
        skipped,
        join_path(path, MANIFEST_DIR),
        run.report(),
        run_id,
    )
