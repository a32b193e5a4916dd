"""lineage_data: parent/child lineage for Ray Data.

Children of many parents share GPU batches, every result goes back to its parent in ordinal order, and
each parent commits the moment its own children are terminal.

Ray is imported lazily: ``import lineage_data`` (and ``lineage_data._core``) loads no ``ray``.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from lineage_data._core import columns
from lineage_data._core.columns import CAUSE, OUTCOME, ROOT
from lineage_data._core.failures import GroupFailure, RecordFailure
from lineage_data._core.outcomes import Outcome
from lineage_data._core.plan import FilesSource, ItemsSource, Plan, RaySource
from lineage_data.exceptions import (
    AccountingError,
    ContractError,
    DuplicateRootError,
    ExecutionError,
    FencingError,
    HelperLostError,
    LineageError,
    PlanError,
    S3AccessError,
    S3BucketNotFoundError,
    S3ConnectionError,
    StageFailedError,
    UserCodeError,
    WorkerCrashedError,
)

if TYPE_CHECKING:
    from lineage_data.dataset import LineageDataset
    from lineage_data.report import RunReport

# Loaded on first use: a helper actor or a worker imports this package without the user API's
# dependencies (Ray Data, polars, fsspec); the coordinator's imports took 0.76 s instead of 1.45 s.
_LAZY = {
    "LineageDataset": "lineage_data.dataset",
    "RunReport": "lineage_data.report",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'lineage_data' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


__version__ = "0.1.0"

__all__ = [
    "CAUSE",
    "OUTCOME",
    "ROOT",
    "AccountingError",
    "ContractError",
    "DuplicateRootError",
    "ExecutionError",
    "FencingError",
    "GroupFailure",
    "HelperLostError",
    "LineageDataset",
    "LineageError",
    "Outcome",
    "PlanError",
    "RecordFailure",
    "RunReport",
    "S3AccessError",
    "S3BucketNotFoundError",
    "S3ConnectionError",
    "UserCodeError",
    "StageFailedError",
    "WorkerCrashedError",
    "from_items",
    "from_ray",
    "init",
    "read_files",
]


def from_items(
    items: Iterable[Mapping[str, Any]], *, id_column: str | None = None
) -> LineageDataset:
    """Level-0 rows from Python dicts; ``id_column`` names the root id (else the row position).

    The rows are converted to Arrow here, as Ray Data's ``from_items`` does: changing the dicts
    afterwards does not change the dataset. Duplicate ids raise :class:`DuplicateRootError` and a
    column with the reserved ``_lineage_`` prefix a :class:`PlanError` here, before anything runs.
    """
    from lineage_data._core.source import items_table, root_ids
    from lineage_data.dataset import LineageDataset

    # Dicts are not copied first (a million rows: ~0.5-3 s of allocation and GC in the driver).
    rows = [item if type(item) is dict else dict(item) for item in items]
    roots = tuple(root_ids(rows, id_column))
    table = items_table(rows, roots)
    known = frozenset(columns.user_columns(table.column_names)) if rows else None
    source = ItemsSource(table=table, id_column=id_column, roots=roots, columns=known)
    return LineageDataset(Plan(source))


def from_ray(dataset: Any, *, id_column: str | None = None) -> LineageDataset:
    """Wrap a ``ray.data.Dataset``. Without ``id_column`` ids are hashes of row content.

    When the dataset's schema is known without running it, an ``id_column`` it lacks is a
    :class:`PlanError` here. Duplicate ids raise :class:`DuplicateRootError`, and a row with no id a
    :class:`PlanError`, when the run reaches them.
    """
    from lineage_data.dataset import LineageDataset

    known = _known_columns(dataset)
    if known is not None:
        if id_column is not None and id_column not in known:
            raise PlanError(
                f"from_ray: id_column {id_column!r} is not in the dataset (columns: {sorted(known)})"
            )
        reserved = sorted(c for c in known if columns.is_reserved(c))
        if reserved:
            raise PlanError(
                f"from_ray: columns {reserved} use the reserved prefix {columns.PREFIX!r}"
            )
    return LineageDataset(Plan(RaySource(dataset=dataset, id_column=id_column, columns=known)))


def _known_columns(dataset: Any) -> frozenset[str] | None:
    """The dataset's column names if Ray knows them without executing anything, else None."""
    try:
        schema = dataset.schema(fetch_if_missing=False)
    except Exception:  # noqa: BLE001 - an unknown schema only skips the build-time checks
        return None
    names = getattr(schema, "names", None)
    return frozenset(names) if names is not None else None


def read_files(
    paths: str | Sequence[str],
    *,
    filesystem: Any = None,
    include_paths: bool = True,
    columns: Sequence[str] | None = None,
    partition_filter: Any = None,
    file_extensions: Sequence[str] | None = None,
    ignore_missing_paths: bool = False,
    files_per_task: int = 1,
    suffixes: Sequence[str] | None = None,
) -> LineageDataset:
    """One level-0 row per file; the root id (``_lineage_root``) is the file's URI.

    ``s3://`` goes through s3fs configured by botocore (see :mod:`lineage_data.storage`). Files are
    listed now, on the driver; their bytes are read by Ray tasks. Arguments that Ray Data's file
    readers also take mean what they mean there.

    Args:
        paths: Files, directories or globs, local or any fsspec URL, or a list of them.
        filesystem: fsspec or pyarrow filesystem to list and read with; else from the first path.
        include_paths: Keep the ``path`` column (the URI; on by default, unlike Ray, because it
            names the input in error messages). ``_lineage_root`` holds the URI either way.
        columns: The user columns, from ``("path", "size", "bytes")`` (default all, less ``path``
            when ``include_paths=False``). Without ``"bytes"`` no file is read: ``size`` comes
            from the listing.
        partition_filter: Ray Data's ``PathPartitionFilter``, or ``fn(path) -> bool``; it sees the
            paths as the filesystem lists them (no scheme, e.g. ``bucket/dir/a.pdf``).
        file_extensions: Keep only these extensions (``["pdf"]`` or ``[".pdf"]``, any case).
        ignore_missing_paths: Skip paths that do not exist instead of raising.
        files_per_task: Files each Ray read task reads.
        suffixes: Alias of ``file_extensions``.

    Raises:
        LineageError: No files are found, a path is missing, or the column options conflict.
        S3AccessError: S3 refused the listing, or the reads in the run (wrong credentials).
    """
    from lineage_data._ray.datasource import FileSource, file_columns, list_files
    from lineage_data.dataset import LineageDataset

    if suffixes is not None and file_extensions is not None:
        raise LineageError("read_files: give file_extensions or its alias suffixes, not both")
    chosen = file_columns(columns, include_paths)
    fs, files = list_files(
        paths,
        filesystem=filesystem,
        file_extensions=file_extensions if suffixes is None else suffixes,
        partition_filter=partition_filter,
        ignore_missing_paths=ignore_missing_paths,
    )
    source = FilesSource(
        reader=FileSource(fs, chosen),
        files=tuple(files),
        files_per_task=files_per_task,
        id_column="path" if "path" in chosen else None,
        roots=tuple(uri for uri, _ in files),
        columns=frozenset(chosen),
    )
    return LineageDataset(Plan(source))


def init(address: str | None = None, **ray_init_kwargs: Any) -> None:
    """Connect to Ray once; optional (the first run does it with no arguments).

    ``address`` (or ``RAY_ADDRESS``) connects to a cluster; else a local instance starts with
    ``num_cpus=max(8, cores)`` unless given (see the cluster guide), keeping Ray's token
    authentication without Ray's warning (``RAY_AUTH_MODE`` chooses).

    Args:
        address: Cluster address (``"auto"``, ``"ray://host:10001"`` ...), or ``"local"``.
        **ray_init_kwargs: Passed to ``ray.init`` (``num_gpus=``, ``runtime_env=`` ...).
    """
    from lineage_data._ray.init import init_ray

    init_ray(address, **ray_init_kwargs)
