"""Synthetic test corpora: long-tailed PDFs, short videos, scanned documents and known-bad files.

Everything here is generated locally and deterministically from a seed, so tests, the demo and
the benchmarks see the same bytes on every machine and never download anything. This module
draws the corpora (page counts, the bad files) and writes them with their manifests; the bytes
of one file come from a generator module, re-exported here:

- :mod:`.pdfs`: :func:`make_pdf` and :func:`make_png`, written by hand, no optional dependency.
- :mod:`.videos`: :func:`make_video`, needs PyAV (``pip install 'lineage-data[video]'``).
- :mod:`.scans`: :func:`scanned_pages`, :func:`make_page_image` and :func:`make_scanned_pdf`,
  image-only PDFs; needs Pillow.

Example:
    >>> counts = long_tail_page_counts(5, seed=1)
    >>> len(counts), all(1 <= c <= 427 for c in counts)
    (5, True)
    >>> make_pdf(2, seed=0, title="t")[:8]
    b'%PDF-1.4'
"""

from __future__ import annotations

import itertools
import json
import math
import os
import random
from collections.abc import Iterator
from typing import Any

from lineage_data.connectors.errors import (
    ConnectorError,
    CorruptInputError,
    EmptyInputError,
    EncryptedInputError,
    TruncatedInputError,
    UnsupportedInputError,
)
from lineage_data.connectors.testing.pdfs import _encrypted_pdf, make_pdf, make_png
from lineage_data.connectors.testing.scans import make_page_image, make_scanned_pdf, scanned_pages
from lineage_data.connectors.testing.videos import make_video
from lineage_data.storage import resolve_filesystem

__all__ = [
    "BAD_FILE_ERRORS",
    "bad_files",
    "long_tail_page_counts",
    "make_page_image",
    "make_pdf",
    "make_png",
    "make_scanned_pdf",
    "scanned_pages",
    "make_video",
    "write_corpus",
    "write_scanned_corpus",
]


def long_tail_page_counts(
    n: int, *, max_pages: int = 427, mean: float = 47, seed: int = 0
) -> list[int]:
    """Draw ``n`` long-tailed page counts in ``1..max_pages`` with a mean of roughly ``mean``.

    Counts come from a lognormal with shape 1.2 (most documents are short, a few are very long),
    clipped to the range. One count in every 50 is ``max_pages`` itself, so even a small corpus
    has its worst-case parent.

    Args:
        n: How many counts to draw.
        max_pages: The largest count (the longest document).
        mean: The target mean; clipping and the forced maxima move it by a few pages.
        seed: Seed of a private random generator; the same seed gives the same list.

    Returns:
        A list of ``n`` ints, each in ``1..max_pages``.

    Example:
        >>> long_tail_page_counts(3, seed=7) == long_tail_page_counts(3, seed=7)
        True
    """
    if n < 0 or max_pages < 1 or mean <= 0:
        raise ValueError(f"need n >= 0, max_pages >= 1, mean > 0; got {n}, {max_pages}, {mean}")
    rng = random.Random(seed)
    sigma = 1.2
    mu = math.log(mean) - sigma * sigma / 2
    counts = [min(max_pages, max(1, round(rng.lognormvariate(mu, sigma)))) for _ in range(n)]
    for i in range(0, n, 50):
        counts[min(n - 1, i + rng.randrange(50))] = max_pages
    return counts


# --------------------------------------------------------------------------------------- bad files

#: The error each file of :func:`bad_files` must raise, by file name.
BAD_FILE_ERRORS: dict[str, type[ConnectorError]] = {
    "corrupt.pdf": CorruptInputError,
    "truncated.pdf": TruncatedInputError,
    "encrypted.pdf": EncryptedInputError,
    "empty.pdf": EmptyInputError,
    "zero-pages.pdf": EmptyInputError,
    "png-named.pdf": UnsupportedInputError,
    "truncated.mp4": TruncatedInputError,
    "not-a-video.mp4": UnsupportedInputError,
    "empty.mp4": EmptyInputError,
}


def bad_files(*, video: bool = True) -> dict[str, bytes]:
    """Known-bad inputs, by file name; :data:`BAD_FILE_ERRORS` names the error each must raise.

    ``*.pdf`` files go to :func:`lineage_data.connectors.pdf.render_pages`, ``*.mp4`` files to
    :func:`lineage_data.connectors.video.split_clips`:

    ========================  =========================  ======================================
    name                      error                      what it is
    ========================  =========================  ======================================
    ``corrupt.pdf``           CorruptInputError          a PDF header, then noise, then %%EOF
    ``truncated.pdf``         TruncatedInputError        the first 60% of a 5-page PDF
    ``encrypted.pdf``         EncryptedInputError        needs an (unknown) password
    ``empty.pdf``             EmptyInputError            zero bytes
    ``zero-pages.pdf``        EmptyInputError            a valid PDF with an empty page tree
    ``png-named.pdf``         UnsupportedInputError      a PNG image
    ``truncated.mp4``         TruncatedInputError        the first 60% of a 2 s MP4
    ``not-a-video.mp4``       UnsupportedInputError      plain text
    ``empty.mp4``             EmptyInputError            zero bytes
    ========================  =========================  ======================================

    Args:
        video: Include the ``*.mp4`` files (``truncated.mp4`` needs PyAV).

    Returns:
        A dict from file name to bytes, in the table's order.

    Example:
        >>> pdfs = [name for name in BAD_FILE_ERRORS if name.endswith(".pdf")]
        >>> list(bad_files(video=False)) == pdfs
        True
    """
    noise = random.Random("corrupt").randbytes(2048)
    whole = make_pdf(5, seed=0, title="truncated")
    files = {
        "corrupt.pdf": b"%PDF-1.4\n" + noise + b"\n%%EOF\n",
        "truncated.pdf": whole[: len(whole) * 6 // 10],
        "encrypted.pdf": _encrypted_pdf(),
        "empty.pdf": b"",
        "zero-pages.pdf": make_pdf(0, title="empty"),
        "png-named.pdf": make_png(),
    }
    if video:
        clip = make_video(2, seed=0)
        files["truncated.mp4"] = clip[: len(clip) * 6 // 10]
        files["not-a-video.mp4"] = b"this is plain text, not a video\n" * 64
        files["empty.mp4"] = b""
    return files


# ------------------------------------------------------------------------------------------ corpus


def write_corpus(
    directory_or_url: str | os.PathLike[str],
    *,
    n_pdfs: int,
    n_bad: int = 0,
    n_videos: int = 0,
    seed: int = 0,
    fs: Any = None,
    max_pages: int = 427,
    mean_pages: float = 47,
    video_seconds: tuple[float, float] = (2.0, 6.0),
) -> dict[str, Any]:
    """Write a seeded corpus of PDFs, videos and bad files, plus its ``manifest.json``.

    Layout under the target: ``pdfs/doc-00000.pdf`` (page counts from
    :func:`long_tail_page_counts`), ``videos/vid-00000.mp4`` (lengths drawn from
    ``video_seconds``), ``bad/00-corrupt.pdf`` (the :func:`bad_files`, cycled to make ``n_bad``;
    the ``*.mp4`` ones only when ``n_videos > 0``) and ``manifest.json``.

    Args:
        directory_or_url: A local directory, or an fsspec URL such as ``"s3://bucket/corpus"``.
        n_pdfs: Number of good PDFs.
        n_bad: Number of bad files.
        n_videos: Number of good videos (needs PyAV).
        seed: Seed of everything; the same arguments write the same bytes.
        fs: An fsspec filesystem to write through; ``directory_or_url`` is then a path on it.
        max_pages: Longest document.
        mean_pages: Target mean page count.
        video_seconds: ``(shortest, longest)`` video duration.

    Returns:
        The manifest: ``{"root", "seed", "files": [...], "totals": {...}}``. Each file entry has
        ``name`` (relative), ``path`` (root + name), ``kind`` (``"pdf"`` or ``"video"``),
        ``bytes``, ``expected_error`` (an error class name, or None), and ``pages`` for good
        PDFs or ``seconds`` for good videos.

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as tmp:
        ...     manifest = write_corpus(tmp, n_pdfs=2, n_bad=3, seed=1)
        >>> manifest["totals"]["files"], [f["expected_error"] for f in manifest["files"][2:]]
        (5, ['CorruptInputError', 'TruncatedInputError', 'EncryptedInputError'])
    """
    fs, root = _target(directory_or_url, fs)
    entries = itertools.chain(
        _good_pdfs(n_pdfs, seed, max_pages, mean_pages),
        _good_videos(n_videos, seed, video_seconds),
        _bad_entries(n_bad, video=n_videos > 0),
    )
    files = []
    for name, data, facts in entries:  # one file in memory at a time
        _put(fs, f"{root}/{name}", data)
        files.append({"name": name, "path": f"{root}/{name}", "bytes": len(data), **facts})
    manifest = {"root": root, "seed": seed, "files": files, "totals": _totals(files)}
    _put(fs, f"{root}/manifest.json", json.dumps(manifest, indent=1).encode())
    return manifest


def _target(directory_or_url: str | os.PathLike[str], fs: Any) -> tuple[Any, str]:
    """``(filesystem or None for local, root path without a trailing slash)``."""
    target = os.fspath(directory_or_url)
    if fs is None and "://" in target:
        fs, _ = resolve_filesystem(target)  # the library's resolver: S3 configured as for reads
    if fs is None:
        return None, os.path.abspath(target)
    return fs, target.rstrip("/")


def _put(fs: Any, path: str, data: bytes) -> None:
    if fs is None:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as out:
            out.write(data)
    else:
        fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
        fs.pipe_file(path, data)


_Entry = tuple[str, bytes, dict[str, Any]]


def _good_pdfs(n: int, seed: int, max_pages: int, mean: float) -> Iterator[_Entry]:
    counts = long_tail_page_counts(n, max_pages=max_pages, mean=mean, seed=seed)
    for i, pages in enumerate(counts):
        data = make_pdf(pages, seed=seed, title=f"{seed}-{i}")
        facts = {"kind": "pdf", "expected_error": None, "pages": pages}
        yield f"pdfs/doc-{i:05d}.pdf", data, facts


def _good_videos(n: int, seed: int, seconds: tuple[float, float]) -> Iterator[_Entry]:
    rng = random.Random(f"videos:{seed}")
    for i in range(n):
        length = round(rng.uniform(*seconds), 1)
        data = make_video(length, seed=seed * 100_003 + i)
        facts = {"kind": "video", "expected_error": None, "seconds": length}
        yield f"videos/vid-{i:05d}.mp4", data, facts


def _bad_entries(n: int, *, video: bool) -> Iterator[_Entry]:
    if n <= 0:
        return
    bad = list(bad_files(video=video).items())
    for i in range(n):
        name, data = bad[i % len(bad)]
        kind = "pdf" if name.endswith(".pdf") else "video"
        error = BAD_FILE_ERRORS[name].__name__
        yield f"bad/{i:02d}-{name}", data, {"kind": kind, "expected_error": error}


def _totals(files: list[dict[str, Any]]) -> dict[str, int]:
    good = [f for f in files if f["expected_error"] is None]
    return {
        "files": len(files),
        "pdfs": sum(f["kind"] == "pdf" for f in good),
        "pages": sum(f.get("pages", 0) for f in good),
        "videos": sum(f["kind"] == "video" for f in good),
        "bad": len(files) - len(good),
    }


# -------------------------------------------------------------------------------- scanned corpus


def write_scanned_corpus(
    directory_or_url: str | os.PathLike[str],
    *,
    n_pdfs: int,
    seed: int = 0,
    fs: Any = None,
    max_pages: int = 60,
    mean_pages: float = 6,
    dpi: float = 100,
    lines: tuple[int, int] = (4, 12),
) -> dict[str, Any]:
    r"""Write seeded long-tailed image-only PDFs and a ``manifest.json`` with their true text.

    Layout: ``scans/scan-00000.pdf`` ... (page counts from :func:`long_tail_page_counts`, text from
    :func:`scanned_pages`). The text can only come from OCR: the PDFs have no text layer.

    Returns:
        The manifest: ``{"root", "seed", "dpi", "files": [...], "totals": {...}}``; each file has
        ``name``, ``path``, ``kind`` ("pdf"), ``bytes``, ``expected_error`` (None), ``pages``,
        ``lines`` and ``text`` (page texts joined by a blank line, lines by ``\n``, the shape of
        :func:`lineage_data.connectors.ocr.document_text`'s ``text``).

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as tmp:
        ...     manifest = write_scanned_corpus(tmp, n_pdfs=2, max_pages=3, mean_pages=2, dpi=30)
        >>> manifest["totals"]["files"], manifest["files"][0]["name"]
        (2, 'scans/scan-00000.pdf')
    """
    fs, root = _target(directory_or_url, fs)
    counts = long_tail_page_counts(n_pdfs, max_pages=max_pages, mean=mean_pages, seed=seed)
    files = []
    for i, count in enumerate(counts):
        pages = scanned_pages(count, seed=seed * 100_003 + i, lines=lines)
        data, texts = make_scanned_pdf(pages, dpi=dpi)
        name = f"scans/scan-{i:05d}.pdf"
        _put(fs, f"{root}/{name}", data)
        files.append(
            {
                "name": name,
                "path": f"{root}/{name}",
                "kind": "pdf",
                "bytes": len(data),
                "expected_error": None,
                "pages": count,
                "lines": sum(len(t.splitlines()) for t in texts),
                "text": "\n\n".join(texts),
            }
        )
    manifest = {"root": root, "seed": seed, "dpi": dpi, "files": files, "totals": _totals(files)}
    _put(fs, f"{root}/manifest.json", json.dumps(manifest, indent=1).encode())
    return manifest
