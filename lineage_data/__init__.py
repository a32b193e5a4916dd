"""lineage_data: parent/child lineage for Ray Data.

Children of many parents share GPU batches, every result goes back to its parent in ordinal order, and
each parent commits the moment its own children are terminal.

Ray is imported lazily: ``import lineage_data`` (and ``lineage_data._core``) loads no ``ray``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from lineage_data._core import columns
from lineage_data._core.errors import (
    AccountingError,
    ContractError,
    DuplicateRootError,
    ExecutionError,
    FencingError,
    HelperLostError,
    LineageError,
    PlanError,
    UserCodeError,
)
from lineage_data._core.failures import GroupFailure, RecordFailure
from lineage_data._core.outcomes import Outcome
from lineage_data._core.plan import Plan, Source
from lineage_data._core.source import root_ids
from lineage_data.dataset import LineageDataset
from lineage_data.report import RunReport

__version__ = "0.1.0"

ROOT = columns.ROOT
OUTCOME = columns.OUTCOME
CAUSE = columns.CAUSE
STAGE = columns.STAGE

__all__ = [
    "CAUSE",
    "OUTCOME",
    "ROOT",
    "STAGE",
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
    "UserCodeError",
    "from_items",
    "from_ray",
    "init",
    "read_files",
]


def from_items(
    items: Iterable[Mapping[str, Any]], *, id_column: str | None = None
) -> LineageDataset:
    """Level-0 rows from Python dicts; ``id_column`` names the root id (else the row position).

    Duplicate ids raise :class:`DuplicateRootError` here, before anything runs.
    """
    rows = [dict(item) for item in items]
    roots = tuple(root_ids(rows, id_column))
    known = frozenset(name for row in rows for name in row) if rows else None
    return LineageDataset(Plan(Source("items", tuple(rows), id_column, roots=roots, columns=known)))


def from_ray(dataset: Any, *, id_column: str | None = None) -> LineageDataset:
    """Wrap a ``ray.data.Dataset``. Without ``id_column`` ids are hashes of row content.

    When the dataset's schema is known without running it, an ``id_column`` it lacks is a
    :class:`PlanError` here. Duplicate ids raise :class:`DuplicateRootError`, and a row with no id a
    :class:`PlanError`, when the run reaches them.
    """
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
    return LineageDataset(Plan(Source("ray", dataset, id_column, columns=known)))


def _known_columns(dataset: Any) -> frozenset[str] | None:
    """The dataset's column names if Ray knows them without executing anything, else None."""
    try:
        schema = dataset.schema(fetch_if_missing=False)
    except Exception:  # noqa: BLE001 - an unknown schema only skips the build-time checks
        return None
    names = getattr(schema, "names", None) if schema is not None else None
    return frozenset(names) if names is not None else None


def read_files(
    paths: str | Sequence[str],
    *,
    filesystem: Any = None,
    suffixes: Sequence[str] | None = None,
    files_per_task: int = 1,
) -> LineageDataset:
    """One level-0 row per file (``path``, ``size``, ``bytes``); the root id is the file's URI.

    ``paths`` may be files, directories or globs, local or any fsspec URL (``s3://`` with s3fs; pass
    ``filesystem=connectors.s3.s3_filesystem(...)`` for an endpoint or credentials of your own). Files are
    listed now, on the driver; their bytes are read by Ray tasks.
    """
    from lineage_data._ray.datasource import FILE_COLUMNS, list_files

    fs, files = list_files(paths, filesystem=filesystem, suffixes=suffixes)
    return LineageDataset(
        Plan(
            Source(
                "files",
                (fs, files),
                "path",
                {"files_per_task": files_per_task},
                columns=frozenset(FILE_COLUMNS),
            )
        )
    )


def init(address: str | None = None, **ray_init_kwargs: Any) -> None:
    """Connect to Ray (``address`` or ``RAY_ADDRESS``, else a local instance); optional."""
    from lineage_data._ray.execute import ensure_ray

    ensure_ray(address, **ray_init_kwargs)
