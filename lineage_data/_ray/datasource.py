"""``read_files``: a Ray Data Datasource over fsspec, one row per file, root lineage injected."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from ray.data.block import BlockMetadata
from ray.data.datasource import Datasource, ReadTask
from ray.data.datasource.partitioning import PathPartitionFilter

from lineage_data._core import columns as C
from lineage_data._core import outcomes
from lineage_data._core.errors import LineageError
from lineage_data._core.outcomes import Status
from lineage_data._core.source import with_lineage
from lineage_data.storage import (
    S3AccessError,
    S3ConnectionError,
    resolve_filesystem,
    s3_error,
    s3_errors,
)

STAGE = "read_files"  # the stage named in the cause of a file that cannot be read
FILE_COLUMNS = ("path", "size", "bytes")  # the user columns read_files can give, by default all

PartitionFilter = PathPartitionFilter | Callable[[str], bool]


def file_columns(columns: Sequence[str] | None, include_paths: bool) -> tuple[str, ...]:
    """The user columns of ``read_files`` rows for its ``columns`` and ``include_paths``."""
    if columns is None:
        return FILE_COLUMNS if include_paths else tuple(c for c in FILE_COLUMNS if c != "path")
    chosen = [columns] if isinstance(columns, str) else list(columns)
    unknown = sorted(set(chosen) - set(FILE_COLUMNS))
    if unknown:
        raise LineageError(f"read_files: unknown columns {unknown} (choose from {FILE_COLUMNS})")
    if "path" in chosen and not include_paths:
        raise LineageError("read_files: columns names 'path' but include_paths=False")
    return tuple(dict.fromkeys(chosen))


def _extensions(file_extensions: Sequence[str] | str | None) -> tuple[str, ...] | None:
    """Ray's rule: case-insensitive, a leading dot optional (``"pdf"`` and ``".PDF"`` match)."""
    if file_extensions is None:
        return None
    given = [file_extensions] if isinstance(file_extensions, str) else file_extensions
    return tuple("." + e.lower().lstrip(".") for e in given)


def _keep(names: list[str], partition_filter: PartitionFilter | None) -> list[str]:
    """The paths a partition filter keeps: Ray's PathPartitionFilter, or ``fn(path) -> bool``."""
    if partition_filter is None:
        return names
    if isinstance(partition_filter, PathPartitionFilter):
        return list(partition_filter(names))
    return [name for name in names if partition_filter(name)]


# Ray Data's directory listing leaves out paths whose first part (under the directory) starts so.
HIDDEN_PREFIXES = (".", "_")


def _expand(fs: Any, path: str, stripped: str, ignore_missing: bool) -> dict[str, dict]:
    """``{name: info}`` of the files a path, directory or glob names, as Ray Data finds them.

    A directory's hidden entries (:data:`HIDDEN_PREFIXES`) are left out, symbolic links followed.
    """
    try:
        with s3_errors(path, fs):
            if any(ch in stripped for ch in "*?["):
                return {p: fs.info(p) for p in fs.glob(stripped)}
            if fs.isdir(stripped):
                found = _walk_local(stripped) if _is_local(fs) else fs.find(stripped, detail=True)
                base = stripped.rstrip("/") + "/"
                return {
                    name: info
                    for name, info in dict(found).items()
                    if not name[len(base) :].startswith(HIDDEN_PREFIXES)
                }
            return {stripped: fs.info(stripped)}
    except FileNotFoundError as exc:
        if isinstance(exc, LineageError):  # a missing bucket: not a missing path
            raise
        if ignore_missing:
            return {}
        raise LineageError(f"read_files: {path!r} does not exist") from exc


def _is_local(fs: Any) -> bool:
    protocols = (fs.protocol,) if isinstance(fs.protocol, str) else tuple(fs.protocol)
    return bool({"file", "local"} & set(protocols))


def _walk_local(directory: str) -> dict[str, dict]:
    """Files under a local directory, each directory once, symbolic links followed (unlike ``find``)."""
    found: dict[str, dict] = {}
    seen: set[str] = set()
    for top, dirs, names in os.walk(directory, followlinks=True):
        real = os.path.realpath(top)
        if real in seen:
            dirs[:] = []
            continue
        seen.add(real)
        for name in names:
            full = os.path.join(top, name)
            try:
                size = os.stat(full).st_size  # the link's target
            except OSError:
                continue  # a dangling link: nothing to read
            found[full] = {"name": full, "size": size, "type": "file"}
    return found


def list_files(
    paths: str | Sequence[str],
    *,
    filesystem: Any = None,
    file_extensions: Sequence[str] | str | None = None,
    partition_filter: PartitionFilter | None = None,
    ignore_missing_paths: bool = False,
) -> tuple[Any, list[tuple[str, int]]]:
    """The filesystem and ``(uri, size)`` of the files ``paths`` name (files, directories, globs).

    Sorted by URI, the root id. Filters apply as in Ray Data: ``partition_filter`` to the paths as
    listed (no scheme), then ``file_extensions``. On S3 a refused listing raises the typed S3 error.
    """
    paths = [paths] if isinstance(paths, str) else list(paths)
    if not paths:
        raise LineageError("read_files: no paths given")
    fs = filesystem
    extensions = _extensions(file_extensions)
    files: dict[str, int] = {}
    for path in paths:
        fs, stripped = resolve_filesystem(path, fs)
        found = _expand(fs, path, stripped, ignore_missing_paths)
        names = [name for name, info in found.items() if info.get("type", "file") == "file"]
        for name in _keep(sorted(names), partition_filter):
            if extensions and not name.lower().endswith(extensions):
                continue
            uri = fs.unstrip_protocol(name) if "://" in path else name
            files[uri] = int(found[name].get("size") or 0)
    if not files:
        raise LineageError(f"read_files: no files found under {paths}")
    return fs, sorted(files.items())


@dataclass(frozen=True)
class FileSource:
    """How the listed files are read: the filesystem and the user columns to produce."""

    fs: Any
    columns: tuple[str, ...] = FILE_COLUMNS


def _read(
    fs: Any, files: list[tuple[str, int]], columns: Sequence[str] = FILE_COLUMNS
) -> Iterable[pa.Table]:
    """One row per file; a file that vanished or cannot be read fails its root alone (no bytes).

    S3 refusing the request or not answering is the job's problem, not the file's: it raises.
    """
    uris = [uri for uri, _ in files]
    data: list[bytes | None] = []
    failed: dict[int, Status] = {}
    for i, uri in enumerate(uris if "bytes" in columns else ()):
        try:
            data.append(fs.cat_file(fs._strip_protocol(uri)))
        except Exception as exc:  # noqa: BLE001 - one file's fault is that root's outcome
            error = s3_error(exc, uri, fs)
            if isinstance(error, S3AccessError | S3ConnectionError):
                raise error from None
            data.append(None)
            failed[i] = outcomes.rejected(_unreadable(uri, error or exc), STAGE)
    sizes: list[int | None] = [size for _, size in files]
    if data:
        sizes = [None if b is None else len(b) for b in data]
    values = {
        "path": pa.array(uris, pa.string()),
        "size": pa.array(sizes, pa.int64()),
        "bytes": pa.array(data, pa.large_binary()),
    }
    table = pa.table({"_": pa.nulls(len(uris))}).drop_columns(["_"])  # keeps the row count
    for name in columns:
        table = table.append_column(name, values[name])
    yield C.with_statuses(with_lineage(table, uris), failed)


def _unreadable(uri: str, exc: BaseException) -> str:
    """``"FileNotFoundError: s3://b/x.pdf"``; other errors keep their message after the path."""
    name = type(exc).__name__
    if isinstance(exc, FileNotFoundError) or not str(exc):
        return f"{name}: {uri}"
    if isinstance(exc, LineageError):  # ours name the object already
        return f"{name}: {exc}"
    return f"{name}: {uri}: {exc}"


class FileDatasource(Datasource):
    """Lists files on the driver; each read task reads ``files_per_task`` of them."""

    def __init__(
        self, source: FileSource, files: list[tuple[str, int]], *, files_per_task: int = 1
    ) -> None:
        super().__init__()
        self._source = source
        self._files = files
        self._per_task = max(1, files_per_task)

    def estimate_inmemory_data_size(self) -> int | None:  # noqa: D102
        if "bytes" not in self._source.columns:
            return 64 * len(self._files)
        return sum(size for _, size in self._files)

    def get_read_tasks(
        self, parallelism: int, per_task_row_limit: int | None = None, data_context: Any = None
    ) -> list[ReadTask]:  # noqa: D102, E501
        tasks = []
        fs, columns = self._source.fs, self._source.columns
        for start in range(0, len(self._files), self._per_task):
            chunk = self._files[start : start + self._per_task]
            meta = BlockMetadata(
                num_rows=len(chunk),
                size_bytes=sum(s for _, s in chunk) if "bytes" in columns else None,
                input_files=tuple(u for u, _ in chunk),
                exec_stats=None,
            )
            tasks.append(ReadTask(functools.partial(_read, fs, chunk, columns), meta))
        return tasks
