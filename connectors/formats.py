"""The file formats of training shards: Parquet, WebDataset tar, JSONL documents.

One shard file is written by one :class:`ShardFile` (open, ``write`` Arrow tables, ``close`` to get
its size); :class:`lineage_data.connectors.shards.ShardWriter` stages and commits the files the same
way for every format. What each format holds: ``docs/guide/shards.md``. Written by hand, because
neither webdataset's ``TarWriter`` nor a JSON-lines library writes through fsspec to a name we
choose and then commit; the formats themselves are plain tar and gzip JSON.
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
    """The WebDataset key of a root: a hex digest (a key holds no dot; URIs do)."""
    return hashlib.sha1(root.encode()).hexdigest()


def text_column(names: list[str], chosen: str | None) -> str | None:
    """The column holding a document's text (``chosen``, else ``markdown``, else ``text``)."""
    if chosen is not None:
        return chosen
    return next((n for n in ("markdown", "text") if n in names), None)


class ShardFile:
    """One shard file being written: the format's ``_writer`` over the open binary ``file``."""

    _writer: Any

    def __init__(self, file: Any, schema: pa.Schema, options: dict[str, Any]) -> None:
        self._file = file
        self.schema = schema

    def write(self, table: pa.Table, row_group_rows: int | None) -> None:  # noqa: D102
        raise NotImplementedError

    def close(self) -> int:
        """Close the format's writer, then the file; the file's size in bytes."""
        self._writer.close()
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
        self._writer = gzip.GzipFile(fileobj=file, mode="wb", mtime=0)
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
        self._writer.write("".join(lines).encode())


class TarFile(ShardFile):
    """WebDataset samples: ``<key>.txt``, ``<key>.json`` and the images of each document."""

    def __init__(self, file: Any, schema: pa.Schema, options: dict[str, Any]) -> None:
        super().__init__(file, schema, options)
        # closed by close(), after the shard's rows: a context manager would span calls
        self._writer = tarfile.open(fileobj=file, mode="w|", format=tarfile.USTAR_FORMAT)  # noqa: SIM115
        self._text = text_column(schema.names, options.get("text_column"))

    def _member(self, name: str, data: bytes) -> None:
        info = tarfile.TarInfo(name)
        info.size, info.mtime, info.mode = len(data), 0, 0o644
        self._writer.addfile(info, io.BytesIO(data))

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
