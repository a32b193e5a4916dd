"""The file formats of training shards: Parquet, WebDataset tar, JSONL documents.

One shard file is written by one :class:`ShardFile` (open, ``write`` Arrow tables, ``close`` to get
its size); :class:`lineage_data.connectors.shards.ShardWriter` cuts, stages and commits the files the same way
for every format (exactly once, through the manifest). Each format is read back by its own library:
``pyarrow``/``datasets`` for Parquet, the ``webdataset`` package or Ray Data's ``read_webdataset``
for tar shards, any JSON-lines reader for JSONL.

- ``parquet``: the rows as they are, streamed in row groups.
- ``webdataset``: one sample per document, as MINT-1T and NeMo Curator's interleaved PDF pipeline
  publish them: ``__key__`` is a digest of the root id (a WebDataset key may not hold the dots and
  slashes of a URI), ``<key>.txt`` the document's text, ``<key>.json`` its other columns with the
  root id under ``"id"``, ``<key>.<i>.png`` (or ``.jpg``) each image of a list-of-bytes column.
- ``lance``: the directory is a Lance dataset, one fragment per shard, committed through the
  manifest first and rolled into Lance after (:mod:`lineage_data.connectors.lance_format`).
- ``jsonl``: gzip-compressed JSON lines with Dolma's document fields (olmOCR writes these): ``id``
  (the root id), ``text``, ``source`` (the writer's ``source`` name) and ``metadata`` (the other
  columns; bytes left out).

The text column is ``text_column`` or, by default, ``markdown`` when the rows have it, else ``text``.
Written by hand: webdataset's ``TarWriter`` and a JSON-lines writer would do the bytes, but a shard
file here is staged and committed by our writer, and neither library writes through fsspec to a
name we choose and then commits; the formats themselves are plain tar and gzip JSON.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import tarfile
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from lineage_data import ROOT

FORMATS = ("parquet", "webdataset", "jsonl", "lance")
# lance: the staged rows (Arrow IPC); the shard itself is a Lance data file (lance_format)
EXTENSIONS = {"parquet": "parquet", "webdataset": "tar", "jsonl": "jsonl.gz", "lance": "arrows"}
_PNG, _JPEG = b"\x89PNG", b"\xff\xd8\xff"


def sample_key(root: str) -> str:
    """The WebDataset key of a root: a hex digest (a key holds no dot; URIs do).

    >>> sample_key("s3://corpus/a.pdf")
    '29ef0703dba063cec3dac4269f36aa9ffbf7dde5'
    """
    return hashlib.sha1(root.encode()).hexdigest()


def text_column(names: list[str], chosen: str | None) -> str | None:
    """The column holding a document's text (``chosen``, else ``markdown``, else ``text``)."""
    if chosen is not None:
        return chosen
    return next((n for n in ("markdown", "text") if n in names), None)


class ShardFile:
    """One shard file being written; ``close()`` returns its size in bytes."""

    def __init__(self, file: Any, schema: pa.Schema, options: dict[str, Any]) -> None:
        self._file = file
        self.schema = schema
        self._options = options

    def write(self, table: pa.Table, row_group_rows: int | None) -> None:  # noqa: D102
        raise NotImplementedError

    def close(self) -> int:  # noqa: D102
        raise NotImplementedError

    def _closed(self, writer: Any) -> int:
        """Close the format's ``writer``, then the file; the file's size."""
        writer.close()
        size = int(self._file.tell())
        self._file.close()
        return size


class ParquetFile(ShardFile):
    """The rows as they are, one row group per ``write`` (or ``row_group_rows``)."""

    def __init__(self, file: Any, schema: pa.Schema, options: dict[str, Any]) -> None:
        super().__init__(file, schema, options)
        self._writer = pq.ParquetWriter(file, schema)

    def write(self, table: pa.Table, row_group_rows: int | None) -> None:  # noqa: D102
        self._writer.write_table(table, row_group_size=row_group_rows or max(table.num_rows, 1))

    def close(self) -> int:  # noqa: D102
        return self._closed(self._writer)


def _json_value(value: Any) -> Any:
    """A value JSON can hold: bytes become None (the formats keep them as files or leave them)."""
    if isinstance(value, bytes | bytearray | memoryview):
        return None
    if isinstance(value, list):
        return [_json_value(v) for v in value]
    if isinstance(value, dict):
        return {k: _json_value(v) for k, v in value.items()}
    return value


class JsonlFile(ShardFile):
    """Dolma-style documents, one JSON object a line, gzip-compressed."""

    def __init__(self, file: Any, schema: pa.Schema, options: dict[str, Any]) -> None:
        super().__init__(file, schema, options)
        self._gzip = gzip.GzipFile(fileobj=file, mode="wb", mtime=0)
        self._text = text_column(schema.names, options.get("text_column"))
        self._source = options.get("source") or ""

    def write(self, table: pa.Table, row_group_rows: int | None) -> None:  # noqa: D102
        lines = []
        for row in table.to_pylist():
            root = row.pop(ROOT)
            text = row.pop(self._text, None) if self._text else None
            document = {
                "id": root,
                "text": text or "",
                "source": self._source,
                "metadata": {k: _json_value(v) for k, v in row.items()},
            }
            lines.append(json.dumps(document, ensure_ascii=False, default=str) + "\n")
        self._gzip.write("".join(lines).encode())

    def close(self) -> int:  # noqa: D102
        return self._closed(self._gzip)


class TarFile(ShardFile):
    """WebDataset samples: ``<key>.txt``, ``<key>.json`` and the images of each document."""

    def __init__(self, file: Any, schema: pa.Schema, options: dict[str, Any]) -> None:
        super().__init__(file, schema, options)
        # closed by close(), after the shard's rows: a context manager would span calls
        self._tar = tarfile.open(fileobj=file, mode="w|", format=tarfile.USTAR_FORMAT)  # noqa: SIM115
        self._text = text_column(schema.names, options.get("text_column"))

    def _member(self, name: str, data: bytes) -> None:
        info = tarfile.TarInfo(name)
        info.size, info.mtime, info.mode = len(data), 0, 0o644
        self._tar.addfile(info, io.BytesIO(data))

    def write(self, table: pa.Table, row_group_rows: int | None) -> None:  # noqa: D102
        for row in table.to_pylist():
            root = row.pop(ROOT)
            key = sample_key(root)
            if self._text is not None:
                self._member(f"{key}.txt", (row.pop(self._text, None) or "").encode())
            files: list[tuple[str, bytes]] = []
            for column in list(row):
                value = row[column]
                if isinstance(value, list) and value and all(isinstance(v, bytes) for v in value):
                    files += [(f"{i}.{_kind(v)}", v) for i, v in enumerate(row.pop(column))]
                elif isinstance(value, bytes):
                    files.append((f"{column}.{_kind(value)}", row.pop(column)))
            meta = {"id": root, **{k: _json_value(v) for k, v in row.items()}}
            self._member(f"{key}.json", json.dumps(meta, ensure_ascii=False, default=str).encode())
            for suffix, data in files:
                self._member(f"{key}.{suffix}", data)

    def close(self) -> int:  # noqa: D102
        return self._closed(self._tar)


def _kind(data: bytes) -> str:
    """The file extension of an encoded image (``bin`` for other bytes)."""
    return "png" if data.startswith(_PNG) else "jpg" if data.startswith(_JPEG) else "bin"


_CLASSES: dict[str, type[ShardFile]] = {
    "parquet": ParquetFile,
    "webdataset": TarFile,
    "jsonl": JsonlFile,
}


def open_shard(fmt: str, file: Any, schema: pa.Schema, options: dict[str, Any]) -> ShardFile:
    """A :class:`ShardFile` of format ``fmt`` writing to the open binary ``file``."""
    if fmt == "lance":
        from lineage_data.connectors.lance_format import LanceStaging

        return LanceStaging(file, schema, options)
    return _CLASSES[fmt](file, schema, options)
