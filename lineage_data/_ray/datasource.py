"""``read_files``: a Ray Data Datasource over fsspec, one row per file, root lineage injected."""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from typing import Any

import fsspec
import pyarrow as pa
from ray.data.block import BlockMetadata
from ray.data.datasource import Datasource, ReadTask

from lineage_data._core import columns as C
from lineage_data._core import outcomes
from lineage_data._core.errors import LineageError
from lineage_data._core.outcomes import Status
from lineage_data._core.source import with_lineage


def list_files(
    paths: str | Sequence[str], *, filesystem: Any = None, suffixes: Sequence[str] | None = None
) -> tuple[Any, list[tuple[str, int]]]:
    """Resolve ``paths`` (files, directories, globs; local or any fsspec URL) to ``(uri, size)`` pairs.

    Returns the filesystem and the files sorted by URI. The URI (with its protocol) is the root id.
    """
    paths = [paths] if isinstance(paths, str) else list(paths)
    if not paths:
        raise LineageError("read_files: no paths given")
    fs = filesystem
    files: dict[str, int] = {}
    for path in paths:
        if fs is None:
            fs, _ = fsspec.core.url_to_fs(path)
        stripped = fs._strip_protocol(path)
        try:
            if any(ch in stripped for ch in "*?["):
                found = {p: fs.info(p) for p in fs.glob(stripped)}
            elif fs.isdir(stripped):
                found = fs.find(stripped, detail=True)
            else:
                found = {stripped: fs.info(stripped)}
        except FileNotFoundError as exc:
            raise LineageError(f"read_files: {path!r} does not exist") from exc
        for name, info in found.items():
            if info.get("type", "file") != "file":
                continue
            if suffixes and not name.lower().endswith(tuple(s.lower() for s in suffixes)):
                continue
            files[fs.unstrip_protocol(name) if "://" in path else name] = int(info.get("size") or 0)
    if not files:
        raise LineageError(f"read_files: no files found under {paths}")
    return fs, sorted(files.items())


STAGE = "read_files"  # the stage named in the cause of a file that cannot be read
FILE_COLUMNS = ("path", "size", "bytes")  # the user columns of every row read_files gives


def _read(fs: Any, files: list[tuple[str, int]]) -> Iterable[pa.Table]:
    """One row per file; a file that vanished or cannot be read fails its root alone (no bytes)."""
    uris = [uri for uri, _ in files]
    data: list[bytes | None] = []
    failed: dict[int, Status] = {}
    for i, uri in enumerate(uris):
        try:
            data.append(fs.cat_file(fs._strip_protocol(uri)))
        except Exception as exc:  # noqa: BLE001 - one file's fault is that root's outcome
            data.append(None)
            failed[i] = outcomes.rejected(_unreadable(uri, exc), STAGE)
    table = pa.table(
        {
            "path": uris,
            "size": pa.array([None if b is None else len(b) for b in data], pa.int64()),
            "bytes": pa.array(data, pa.large_binary()),
        }
    )
    yield C.with_statuses(with_lineage(table, uris), failed)


def _unreadable(uri: str, exc: BaseException) -> str:
    """``"FileNotFoundError: s3://b/x.pdf"``; other errors keep their message after the path."""
    name = type(exc).__name__
    if isinstance(exc, FileNotFoundError) or not str(exc):
        return f"{name}: {uri}"
    return f"{name}: {uri}: {exc}"


class FileDatasource(Datasource):
    """Lists files on the driver; each read task reads ``files_per_task`` of them."""

    def __init__(self, fs: Any, files: list[tuple[str, int]], *, files_per_task: int = 1) -> None:
        super().__init__()
        self._fs = fs
        self._files = files
        self._per_task = max(1, files_per_task)

    def estimate_inmemory_data_size(self) -> int | None:  # noqa: D102
        return sum(size for _, size in self._files)

    def get_read_tasks(
        self, parallelism: int, per_task_row_limit: int | None = None, data_context: Any = None
    ) -> list[ReadTask]:  # noqa: D102, E501
        tasks = []
        fs = self._fs
        for start in range(0, len(self._files), self._per_task):
            chunk = self._files[start : start + self._per_task]
            meta = BlockMetadata(
                num_rows=len(chunk),
                size_bytes=sum(s for _, s in chunk),
                input_files=tuple(u for u, _ in chunk),
                exec_stats=None,
            )
            tasks.append(ReadTask(functools.partial(_read, fs, chunk), meta))
        return tasks
