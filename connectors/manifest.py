"""The commit records of a shard directory, and the readers that trust nothing else.

Readers (:func:`read_shards`, :func:`read_dead_letter`, :func:`committed_roots`) look at manifest
entries only (``path/_manifest/<entry>.json``), so a file left by a run that died before its
entry is invisible; :func:`remove_orphans` deletes such files. On S3, refused credentials and a
missing bucket raise the typed errors of :mod:`lineage_data.connectors.s3`. The directory's
layout: ``docs/guide/shards.md``.
"""

from __future__ import annotations

import builtins
import contextlib
import hashlib
import json
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from lineage_data import ROOT
from lineage_data.connectors.s3 import resolve_filesystem, s3_errors
from lineage_data.exceptions import ShardError

__all__ = [
    "DEAD_LETTER_SCHEMA",
    "Manifest",
    "ManifestEntry",
    "ShardError",
    "committed_roots",
    "read_dead_letter",
    "read_manifest",
    "read_shards",
    "remove_orphans",
]

MANIFEST_DIR = "_manifest"
DEAD_LETTER_DIR = "_dead_letter"
MANIFEST_VERSION = 1
SHARD = "shard"
DEAD_LETTER = "dead_letter"

DEAD_LETTER_SCHEMA = pa.schema(
    [
        pa.field("root", pa.string(), nullable=False),
        pa.field("stage", pa.string()),
        pa.field("outcome", pa.string(), nullable=False),
        pa.field("cause", pa.string()),
        pa.field("time", pa.timestamp("us", tz="UTC"), nullable=False),
        pa.field("run_id", pa.string(), nullable=False),
    ]
)
"""Columns of the dead-letter table (one row per root that did not end PRESENT)."""
REPORTS_DIR = "_reports"
# data files being written on a local disk (renamed into place when complete)
STAGING_DIR = "_staging"


@dataclass(frozen=True)
class ManifestEntry:
    """One commit record: ``path/_manifest/<entry>.json``, written after its file is complete.

    Attributes:
        entry: Hash of ``run_id``, ``kind`` and the sorted roots; also the JSON file's name.
        kind: ``"shard"`` or ``"dead_letter"``.
        file: The data file, relative to the shard directory.
        rows: Rows in the file.
        bytes: Size of the file in bytes.
        roots: The lineage roots the file holds, in file order.
        run_id: The :func:`write_shards` call that wrote it.
        committed_at: Unix time at which the entry was written.
        version: Manifest format version.
    """

    entry: str
    kind: str
    file: str
    rows: int
    bytes: int
    roots: tuple[str, ...]
    run_id: str
    committed_at: float
    version: int = MANIFEST_VERSION

    def to_json(self) -> builtins.bytes:  # the field ``bytes`` shadows the type in this class
        """The entry as UTF-8 JSON."""
        return json.dumps(asdict(self), separators=(",", ":")).encode()  # roots: a JSON array

    @classmethod
    def from_json(cls, data: builtins.bytes | str) -> ManifestEntry:
        """Parse an entry written by :meth:`to_json` (:class:`ShardError` if its version is new)."""
        raw = json.loads(data)
        if int(raw.get("version", 1)) > MANIFEST_VERSION:
            raise ShardError(f"manifest entry {raw.get('entry')}: unknown version {raw['version']}")
        raw["roots"] = tuple(raw["roots"])
        return cls(**raw)

    @staticmethod
    def name_for(run_id: str, kind: str, roots: Iterable[str]) -> str:
        """The deterministic entry name: a retried write of the same rows maps to the same entry."""
        digest = hashlib.sha256(f"{run_id}\n{kind}\n".encode())
        digest.update("\n".join(sorted(roots)).encode())
        return digest.hexdigest()[:32]


@dataclass(frozen=True)
class Manifest:
    """Every committed entry of one shard directory, oldest first."""

    entries: tuple[ManifestEntry, ...]

    @property
    def shards(self) -> tuple[ManifestEntry, ...]:
        """Shard entries, oldest first."""
        return tuple(e for e in self.entries if e.kind == SHARD)

    @property
    def dead_letters(self) -> tuple[ManifestEntry, ...]:
        """Dead-letter entries, oldest first."""
        return tuple(e for e in self.entries if e.kind == DEAD_LETTER)

    @property
    def present_roots(self) -> set[str]:
        """Roots committed to a shard."""
        return {root for e in self.shards for root in e.roots}

    @property
    def committed_roots(self) -> set[str]:
        """Roots with any committed outcome: in a shard or in the dead-letter table."""
        return {root for e in self.entries for root in e.roots}


def is_local(fs: Any) -> bool:
    """Whether the fsspec filesystem ``fs`` is the local disk."""
    protocols = (fs.protocol,) if isinstance(fs.protocol, str) else tuple(fs.protocol)
    return bool({"file", "local"} & set(protocols))


def join_path(*parts: str) -> str:
    """``parts`` joined by single slashes (the first keeps its leading slash or protocol)."""
    return "/".join(p.strip("/") if i else p.rstrip("/") for i, p in enumerate(parts) if p)


def put_atomic(fs: Any, path: str, data: bytes) -> None:
    """Write ``data`` so readers see all of it or nothing (PUT on object stores, rename on disk)."""
    if not is_local(fs):
        fs.pipe_file(path, data)
        return
    parent, _, name = path.rpartition("/")
    tmp = join_path(parent, f".tmp-{uuid.uuid4().hex}-{name}")
    fs.pipe_file(tmp, data)
    fs.mv(tmp, path)


def concat_tables(tables: list[pa.Table]) -> pa.Table:
    """One table from several whose columns may differ (missing values become nulls)."""
    return tables[0] if len(tables) == 1 else pa.concat_tables(tables, promote_options="permissive")


def load_manifest(fs: Any, path: str) -> Manifest:
    """The entries under ``path`` on ``fs`` (a path the filesystem understands), oldest first."""
    directory = join_path(path, MANIFEST_DIR)
    fs.invalidate_cache(directory)
    if not fs.exists(directory):
        return Manifest(())
    names = [
        p
        for p in fs.ls(directory, detail=False)
        if p.endswith(".json") and not p.rpartition("/")[2].startswith(".")
    ]
    blobs = fs.cat(names) if names else {}
    entries = [ManifestEntry.from_json(blobs[name]) for name in names]
    return Manifest(tuple(sorted(entries, key=lambda e: (e.committed_at, e.entry))))


@contextlib.contextmanager
def _storage(path: str, filesystem: Any) -> Iterator[tuple[Any, str]]:
    """``(fs, path on fs)``; inside the block S3 failures are the typed ``lineage_data.connectors.s3`` errors."""
    fs, root = resolve_filesystem(path, filesystem)
    with s3_errors(path, fs):
        yield fs, root


def read_manifest(path: str, *, filesystem: Any = None) -> Manifest:
    """The committed manifest entries of a shard directory (empty if there is none)."""
    with _storage(path, filesystem) as (fs, root):
        return load_manifest(fs, root)


def committed_roots(path: str, *, filesystem: Any = None) -> set[str]:
    """Roots with a committed outcome under ``path``: in a shard or in the dead-letter table."""
    return read_manifest(path, filesystem=filesystem).committed_roots


def _read_files(fs: Any, path: str, entries: Iterable[ManifestEntry], columns: Any) -> list:
    return [pq.read_table(join_path(path, e.file), filesystem=fs, columns=columns) for e in entries]


def read_shards(path: str, *, filesystem: Any = None, columns: list[str] | None = None) -> pa.Table:
    """The rows of every Parquet shard the manifest lists (orphan files are ignored), oldest first.

    A root is returned once even if two entries list it. Shards with different user columns are
    merged, missing values null; ``columns`` limits the columns read (``_lineage_root`` always is).
    ``filesystem`` (fsspec or pyarrow) is inferred from ``path`` when None.
    """
    with _storage(path, filesystem) as (fs, root):
        # tar and JSONL shards are read by their own libraries (lineage_data.connectors.formats)
        entries = tuple(e for e in load_manifest(fs, root).shards if e.file.endswith(".parquet"))
        if columns is not None and ROOT not in columns:
            columns = [ROOT, *columns]
        read = _read_files(fs, root, entries, columns)
    tables: list[pa.Table] = []
    seen: set[str] = set()
    for entry, table in zip(entries, read, strict=True):
        if again := seen.intersection(entry.roots):
            table = table.filter(pc.invert(pc.is_in(table[ROOT], pa.array(sorted(again)))))
        seen.update(entry.roots)
        tables.append(table)
    if not tables:
        return pa.table({ROOT: pa.array([], pa.string())})
    return concat_tables(tables)


def read_dead_letter(path: str, *, filesystem: Any = None) -> pa.Table:
    """The dead-letter table (:data:`DEAD_LETTER_SCHEMA`): one row per root not ending PRESENT.

    A root dead-lettered twice shows its newest row; one that a later run (``retry_failed=True``)
    committed to a shard is left out.
    """
    with _storage(path, filesystem) as (fs, root):
        manifest = load_manifest(fs, root)
        tables = _read_files(fs, root, manifest.dead_letters, None)
    superseded = manifest.present_roots
    kept = []
    for table in reversed(tables):  # newest first: an older row of the same root is superseded
        roots = table["root"].to_pylist()
        keep = [i for i, r in enumerate(roots) if r not in superseded]
        superseded.update(roots)
        kept.append(table.take(pa.array(keep, pa.int64())).cast(DEAD_LETTER_SCHEMA))
    if not kept:
        return DEAD_LETTER_SCHEMA.empty_table()
    return pa.concat_tables(kept[::-1])


def remove_orphans(path: str, *, filesystem: Any = None) -> list[str]:
    """Delete the data files no manifest entry names (left by a killed run) and return their paths.

    Only while no writer runs on ``path``: the files of a running writer are not committed yet.
    """
    with _storage(path, filesystem) as (fs, root):
        entries = load_manifest(fs, root).entries
        listed = {fs._strip_protocol(join_path(root, e.file)) for e in entries}
        fs.invalidate_cache(root)
        patterns = (
            "part-*",
            f"{DEAD_LETTER_DIR}/part-*",
            f"{MANIFEST_DIR}/.tmp-*",
            f"{STAGING_DIR}/part-*",
        )
        candidates = [p for pattern in patterns for p in fs.glob(join_path(root, pattern))]
        orphans = [p for p in candidates if fs._strip_protocol(p) not in listed]
        for p in orphans:
            fs.rm(p)
        return orphans
