"""Lance shards: the shard directory is a Lance dataset, committed exactly once through our manifest.

``write_shards(ds, path, format="lance")`` makes ``path`` itself a Lance dataset; our files sit
beside Lance's (``_manifest/``, ``_fragments/<name>.json``, ``_dead_letter/``). A Lance commit and
our manifest entry cannot be written atomically together, so ours is the truth and Lance follows:

1. A write task stages the shard's rows (Arrow IPC under ``_staging/``), writes them as one Lance
   fragment (a data file no Lance reader sees until a version lists it), then its metadata
   (``_fragments/``), then the manifest entry: the commit.
2. One committer (:func:`committer`, a driver thread) rolls Lance forward (:func:`roll_forward`):
   every manifest shard whose data file no Lance version lists is appended, one Lance commit per
   pass. Idempotent by data file name, so a crash anywhere ends in a pass that commits what is
   missing and nothing twice; one committer, because two tasks racing to create the dataset
   would lose one's rows.
3. A data file no entry names (a crash before step 1's entry) is removed by :func:`reconcile`.

The first shard's schema is final. Local directories only; one writer per path. The whole story:
``docs/connectors/shards.md#lance``.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterator
from typing import Any

import pyarrow as pa

from lineage_data.connectors.formats import ShardFile
from lineage_data.connectors.manifest import ShardError, is_local, join_path, load_manifest
from lineage_data.connectors.schema import load as load_schema

__all__ = ["committer", "reconcile", "roll_forward"]

DATA_DIR = "data"  # Lance's own data folder
FRAGMENTS_DIR = "_fragments"
_COMMIT_EVERY_S = 1.0
_MOST_ROWS = (1 << 31) - 1


def _lance() -> Any:
    try:
        import lance
    except ImportError as exc:
        raise ImportError(
            "format='lance' needs pylance: pip install 'lineage-data[lance]'"
        ) from exc
    return lance


class LanceStaging(ShardFile):
    """The rows of one Lance shard, staged as an Arrow IPC stream (bounded memory, crash-safe)."""

    def __init__(self, file: Any, schema: pa.Schema, options: dict[str, Any]) -> None:
        super().__init__(file, schema, options)
        self._writer = pa.ipc.new_stream(file, schema)

    def write(self, table: pa.Table, row_group_rows: int | None) -> None:  # noqa: D102
        self._writer.write_table(table, max_chunksize=row_group_rows)


def write_fragment(fs: Any, path: str, staged: str) -> tuple[str, int]:
    """Turn the staged rows into one uncommitted Lance fragment; its data file and size.

    The data file is ``data/<name>.lance`` (relative to ``path``): what the manifest entry names.
    Its metadata goes to ``_fragments/<name>.json`` before the caller writes the entry.
    """
    from lance.fragment import write_fragments

    with fs.open(staged, "rb") as f:
        reader = pa.ipc.open_stream(f)
        if load_schema(fs, path) != reader.schema:
            # another write task recorded the directory's schema first: this shard's rows were
            # cut to another one, and Lance would refuse them (the task fails before its commit)
            raise ShardError(f"shards at {path}: the dataset's schema changed under this shard")
        # one fragment per shard; Lance's row bound wraps above 2**32 (then every batch is a file)
        fragments = write_fragments(
            reader,
            path,
            schema=reader.schema,
            max_rows_per_file=_MOST_ROWS,
            max_rows_per_group=1024,
        )
    if len(fragments) != 1 or len(fragments[0].files) != 1:
        raise ShardError(f"shards at {path}: Lance wrote {len(fragments)} fragments for one shard")
    (data,) = fragments[0].files
    fs.makedirs(join_path(path, FRAGMENTS_DIR), exist_ok=True)
    fs.pipe_file(_descriptor(path, data.path), json.dumps(fragments[0].to_json()).encode())
    fs.rm(staged)
    name = f"{DATA_DIR}/{data.path}"
    size = data.file_size_bytes
    return name, int(size) if size is not None else int(fs.size(join_path(path, name)))


def _descriptor(path: str, data_file: str) -> str:
    """Where the metadata of the fragment whose data file is ``data_file`` lives."""
    stem = data_file.rpartition("/")[2].removesuffix(".lance")
    return join_path(path, FRAGMENTS_DIR, f"{stem}.json")


def _open(path: str) -> Any:
    """The latest Lance version at ``path`` (None before the first commit)."""
    lance = _lance()
    try:
        return lance.dataset(path)
    except ValueError:  # "Dataset at path ... was not found"
        return None


def _files(dataset: Any) -> set[str]:
    """The data files (``data/<name>.lance``) one Lance version lists."""
    return {
        f"{DATA_DIR}/{file.path}"
        for fragment in dataset.get_fragments()
        for file in fragment.data_files()
    }


def _every_version(dataset: Any) -> set[str]:
    """The data files any Lance version still on disk lists."""
    versions = (dataset.checkout_version(v["version"]) for v in dataset.versions())
    return set[str]().union(*map(_files, versions))


def roll_forward(
    fs: Any, path: str, *, known: set[str] | None = None, history: bool = False
) -> set[str]:
    """Append to Lance every manifest shard no Lance version lists, in one commit; none twice.

    ``known``: data files this committer already committed (what the last pass returned);
    ``history``: also look at older Lance versions (after a compaction the latest lists other
    files). Returns the data files known to be committed now.
    """
    lance = _lance()
    shards = [e.file for e in load_manifest(fs, path).shards if e.file.startswith(f"{DATA_DIR}/")]
    dataset = _open(path)
    done = set(known or ()) | (_files(dataset) if dataset is not None else set())
    # a listed file that is gone was committed and compacted away (a crash removes no listed file)
    todo = [f for f in shards if f not in done and fs.exists(join_path(path, f))]
    if todo and history and dataset is not None:
        done |= _every_version(dataset)
        todo = [f for f in todo if f not in done]
    if not todo:
        return done
    fragments = [
        lance.fragment.FragmentMetadata.from_json(fs.cat_file(_descriptor(path, f)).decode())
        for f in todo
    ]
    if dataset is None:
        operation: Any = lance.LanceOperation.Overwrite(load_schema(fs, path), fragments)
        lance.LanceDataset.commit(path, operation)
    else:
        operation = lance.LanceOperation.Append(fragments)
        lance.LanceDataset.commit(path, operation, read_version=dataset.version)
    return done | set(todo)


def reconcile(fs: Any, path: str) -> None:
    """Before a write: commit what the manifest holds and Lance lacks, remove uncommitted fragments.

    Only while no writer runs on ``path``: a running writer's fragments are not committed yet.
    """
    roll_forward(fs, path, history=True)
    listed = {e.file for e in load_manifest(fs, path).entries}
    fs.invalidate_cache(path)
    data = fs.glob(join_path(path, DATA_DIR, "*.lance"))
    stray = [p for p in data if _relative(p) not in listed]
    if stray:  # files of a Lance version we did not write (a compaction) are not ours to remove
        dataset = _open(path)
        live = _every_version(dataset) if dataset is not None else set()
        for p in stray:
            if _relative(p) not in live:
                fs.rm(p)
    for p in fs.glob(join_path(path, FRAGMENTS_DIR, "*.json")):
        stem = p.rpartition("/")[2].removesuffix(".json")
        if f"{DATA_DIR}/{stem}.lance" not in listed:
            fs.rm(p)


def _relative(p: str) -> str:
    return f"{DATA_DIR}/{p.rpartition('/')[2]}"


@contextlib.contextmanager
def committer(fs: Any, path: str, interval_s: float = _COMMIT_EVERY_S) -> Iterator[None]:
    """Reconcile, then roll Lance forward every ``interval_s`` while the block runs, and at its end.

    The one Lance committer of a :func:`~lineage_data.connectors.shards.write_shards` call.
    """
    if not is_local(fs):  # refused before anything runs
        raise ShardError(f"format='lance' writes to a local directory, not {path}")
    _lance()
    reconcile(fs, path)
    stop = threading.Event()
    known: set[str] = set()

    def loop() -> None:
        nonlocal known
        while not stop.wait(interval_s):
            # a failed pass is retried by the next one, and by the final pass, which raises
            with contextlib.suppress(Exception):
                known = roll_forward(fs, path, known=known)

    thread = threading.Thread(target=loop, name="lance-committer", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        # the entries of this run are committed whether the run failed or not: Lance follows
        roll_forward(fs, path, known=known)
