"""Typed input errors raised by the format connectors.

Every connector error is a :class:`~lineage_data.exceptions.LineageError`, so one
``except ld.LineageError`` catches them all, and the leaf type says *why* an input was rejected. The
message names the input (its path when the row has one) and the cause:

    >>> from lineage_data import LineageError
    >>> error = EncryptedInputError.for_input("s3://b/a.pdf", "needs a password")
    >>> isinstance(error, LineageError), str(error)
    (True, 's3://b/a.pdf: needs a password')
"""

from __future__ import annotations

from typing import Any

from lineage_data.exceptions import (
    ConnectorError,
    CorruptInputError,
    EmptyInputError,
    EncryptedInputError,
    OversizedInputError,
    TruncatedInputError,
    UnsupportedInputError,
)

__all__ = [
    "ConnectorError",
    "CorruptInputError",
    "EmptyInputError",
    "EncryptedInputError",
    "OversizedInputError",
    "TruncatedInputError",
    "UnsupportedInputError",
    "input_name",
    "sniff_format",
]


def input_name(row: dict[str, Any], *, kind: str = "input") -> str:
    """How error messages name a row's input: its ``path`` (or ``uri``) if it has one.

    Args:
        row: The input row.
        kind: Word used when the row has no path, e.g. ``"pdf"`` gives ``"<pdf of 123 bytes>"``.

    Example:
        >>> input_name({"path": "/data/a.pdf", "bytes": b"x"})
        '/data/a.pdf'
        >>> input_name({"bytes": b"abc"}, kind="pdf")
        '<pdf of 3 bytes>'
    """
    value = row.get("path") or row.get("uri")
    if value:
        return str(value)
    data = row.get("bytes")
    size = f" of {len(data)} bytes" if isinstance(data, bytes | bytearray | memoryview) else ""
    return f"<{kind}{size}>"


_MAGIC: tuple[tuple[bytes, str], ...] = (
    (b"\x89PNG\r\n\x1a\n", "PNG image"),
    (b"\xff\xd8\xff", "JPEG image"),
    (b"GIF8", "GIF image"),
    (b"\x1aE\xdf\xa3", "Matroska/WebM video"),
    (b"PK\x03\x04", "ZIP archive"),
    (b"\x1f\x8b", "gzip archive"),
    (b"OggS", "Ogg media"),
    (b"FLV", "FLV video"),
    (b"ID3", "MP3 audio"),
    (b"fLaC", "FLAC audio"),
    (b"\x00\x00\x01\xba", "MPEG-PS video"),
)
_RIFF = {b"WEBP": "WebP image", b"AVI ": "AVI video", b"WAVE": "WAV audio"}
_IMAGE_BRANDS = (b"heic", b"heix", b"mif1", b"msf1", b"avif", b"avis")


def sniff_format(data: bytes) -> str:
    r"""Name the file type that ``data`` looks like, from its leading magic bytes.

    Says *what* an input is when it is not what a connector expects ("not a PDF (looks like a PNG
    image)"). Only common formats are known; anything else is ``"text"`` or ``"unknown binary"``.

    Args:
        data: The input bytes (only the first 1 KiB is looked at).

    Example:
        >>> sniff_format(b"%PDF-1.7 ...")
        'PDF document'
        >>> sniff_format(b"\x89PNG\r\n\x1a\n....")
        'PNG image'
        >>> sniff_format(b"")
        'empty'
    """
    head = bytes(data[:1024])
    if not head:
        return "empty"
    if b"%PDF-" in head:
        return "PDF document"
    for magic, name in _MAGIC:
        if head.startswith(magic):
            return name
    if head.startswith(b"RIFF") and head[8:12] in _RIFF:
        return _RIFF[head[8:12]]
    if head[4:8] == b"ftyp":
        return "HEIF/AVIF image" if head[8:12] in _IMAGE_BRANDS else "MP4/QuickTime video"
    if len(head) > 188 and head[0] == head[188] == 0x47:
        return "MPEG-TS video"
    printable = sum(32 <= b < 127 or b in (9, 10, 13) for b in head)
    return "text" if printable >= 0.95 * len(head) else "unknown binary"


def input_bytes(row: dict[str, Any], key: str, name: str, max_bytes: int | None) -> bytes:
    """``row[key]`` as ``bytes``, checked as every format does: present, not empty, not too big."""
    if key not in row:
        raise KeyError(f"{name}: the row has no {key!r} column (columns: {sorted(row)})")
    raw = row[key]
    if raw is None or len(raw) == 0:
        raise EmptyInputError.for_input(name, "the file is empty (0 bytes)")
    data = raw if isinstance(raw, bytes) else bytes(raw)
    if max_bytes is not None and len(data) > max_bytes:
        raise OversizedInputError.for_input(name, f"{len(data)} bytes exceed max_bytes={max_bytes}")
    return data


def column_values(batch: Any, column: str, owner: str) -> list[Any]:
    """``batch[column]`` as a list, for a pyarrow Table/RecordBatch or a dict of lists."""
    names = column_names(batch)
    if column not in names:
        raise KeyError(f"{owner}: the batch has no {column!r} column (columns: {names})")
    values = batch[column]
    return values.to_pylist() if hasattr(values, "to_pylist") else list(values)


def column_names(batch: Any) -> list[str]:
    """The column names of a pyarrow Table/RecordBatch or a dict of lists."""
    return list(batch.column_names) if hasattr(batch, "column_names") else list(batch)
