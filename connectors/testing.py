"""Synthetic test corpora: long-tailed PDFs, short videos and known-bad files.

Everything here is generated locally and deterministically from a seed, so tests, the demo and the benchmarks
see the same bytes on every machine and never download anything. PDFs are written by hand (PDF 1.4 object
syntax, Helvetica text and one small RGB image per page) and need no optional dependency; videos need PyAV.

Example:
    >>> counts = long_tail_page_counts(5, seed=1)
    >>> len(counts), all(1 <= c <= 427 for c in counts)
    (5, True)
    >>> make_pdf(2, seed=0, title="t")[:8]
    b'%PDF-1.4'
"""

from __future__ import annotations

import json
import math
import os
import random
from collections.abc import Callable
from fractions import Fraction
from typing import Any

from connectors import errors

__all__ = [
    "BadFile",
    "bad_files",
    "long_tail_page_counts",
    "make_pdf",
    "make_video",
    "write_corpus",
]

_LOREM = (
    "lineage data page text layer ocr token parent child batch commit shard region clip frame audio "
    "stream actor reduce expand order retry fence barrier sibling outcome present dropped failed"
).split()


def long_tail_page_counts(
    n: int, *, max_pages: int = 427, mean: float = 47, seed: int = 0
) -> list[int]:
    """Draw ``n`` long-tailed page counts in ``1..max_pages`` whose mean is roughly ``mean``.

    Counts come from a lognormal with shape 1.2 (most documents are short, a few are very long), clipped to the
    range. One count in every 50 is ``max_pages`` itself, so even a small corpus has its worst-case parent.

    Args:
        n: How many counts to draw.
        max_pages: The largest count (the longest document).
        mean: The target mean before clipping; the clipped mean lands within a few pages of it.
        seed: Seed of the private random generator; the same seed gives the same list.

    Returns:
        A list of ``n`` ints, each in ``1..max_pages``.

    Example:
        >>> long_tail_page_counts(3, seed=7) == long_tail_page_counts(3, seed=7)
        True
    """
    if n < 0 or max_pages < 1 or mean <= 0:
        raise ValueError(f"need n >= 0, max_pages >= 1 and mean > 0; got {n}, {max_pages}, {mean}")
    rng = random.Random(seed)
    sigma = 1.2
    mu = math.log(mean) - sigma * sigma / 2
    counts = [min(max_pages, max(1, round(rng.lognormvariate(mu, sigma)))) for _ in range(n)]
    for i in range(0, n, 50):
        counts[min(n - 1, i + rng.randrange(50))] = max_pages
    return counts


# ---------------------------------------------------------------------------------------------------- PDF


def _pdf_string(text: str) -> bytes:
    """A PDF literal string, e.g. ``(a\\(b\\))``, Latin-1 encoded."""
    raw = text.encode("latin-1", errors="replace")
    return b"(" + raw.replace(b"\\", b"\\\\").replace(b"(", b"\\(").replace(b")", b"\\)") + b")"


def _page_image(rng: random.Random, size: int = 16) -> bytes:
    """Raw 8-bit RGB samples of a ``size`` x ``size`` diagonal gradient in a random hue."""
    r0, g0, b0 = (rng.randrange(256) for _ in range(3))
    return bytes(
        channel
        for y in range(size)
        for x in range(size)
        for channel in ((r0 + 8 * x) % 256, (g0 + 8 * y) % 256, (b0 + 4 * (x + y)) % 256)
    )


def _page_objects(index: int, count: int, title: str, rng: random.Random) -> tuple[bytes, bytes]:
    """The content stream and image XObject of one page."""
    words = " ".join(rng.choice(_LOREM) for _ in range(rng.randrange(4, 12)))
    lines = [f"Document {title} page {index + 1} of {count}", words]
    text = b"".join(
        b"BT /F1 %d Tf 72 %d Td %s Tj ET\n" % (14 if i == 0 else 11, 720 - 24 * i, _pdf_string(line))
        for i, line in enumerate(lines)
    )
    content = b"q 144 0 0 144 72 480 cm /Im0 Do Q\n" + text
    pixels = _page_image(rng)
    image = (
        b"<< /Type /XObject /Subtype /Image /Width 16 /Height 16 /ColorSpace /DeviceRGB "
        b"/BitsPerComponent 8 /Length %d >>\nstream\n%s\nendstream" % (len(pixels), pixels)
    )
    return content, image


def _write_pdf(
    objects: list[bytes], *, order: list[int] | None = None, trailer_extra: bytes = b""
) -> bytes:
    """Serialize numbered objects (object ``i + 1`` is ``objects[i]``; object 1 is the catalog).

    ``order`` lists the indexes of ``objects`` in file order (default: numeric order); the classic xref table
    points at wherever each object landed.
    """
    out = bytearray(b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n")
    offsets = [0] * len(objects)
    for i in range(len(objects)) if order is None else order:
        offsets[i] = len(out)
        out += b"%d 0 obj\n%s\nendobj\n" % (i + 1, objects[i])
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R%s >>\n" % (len(objects) + 1, trailer_extra)
    out += b"startxref\n%d\n%%%%EOF\n" % xref
    return bytes(out)


def make_pdf(num_pages: int, *, seed: int = 0, title: str = "doc") -> bytes:
    """Write a real PDF with ``num_pages`` US-letter pages, each with a text layer and an image.

    Page ``i`` (0-based) carries the text ``"Document <title> page <i+1> of <num_pages>"`` on its first line, a
    second line of seeded filler words, and a 16x16 RGB image. The catalog and page tree are written after the
    pages, so a truncated copy loses them (as a real truncated download would lose its trailer). About 30 us
    per page: 400 pages take well under 50 ms.

    Args:
        num_pages: Number of pages (0 writes a valid PDF with an empty page tree).
        seed: Seed for the filler words and image colours; same arguments give the same bytes.
        title: Document title, used in the text layer and the ``/Info`` dictionary (Latin-1 only).

    Returns:
        The PDF file as bytes.

    Example:
        >>> make_pdf(3, seed=1, title="a") == make_pdf(3, seed=1, title="a")
        True
    """
    if num_pages < 0:
        raise ValueError(f"num_pages must be >= 0, got {num_pages}")
    rng = random.Random(f"pdf:{seed}:{title}")
    # Objects: 1 catalog, 2 page tree, 3 font, 4 info, then 3 per page (page, content, image).
    objects = [b"", b"", b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>", b""]
    kids = []
    for index in range(num_pages):
        content, image = _page_objects(index, num_pages, title, rng)
        page_no = len(objects) + 1
        kids.append(b"%d 0 R" % page_no)
        objects.append(
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents %d 0 R "
            b"/Resources << /Font << /F1 3 0 R >> /XObject << /Im0 %d 0 R >> >> >>"
            % (page_no + 1, page_no + 2)
        )
        objects.append(b"<< /Length %d >>\nstream\n%s\nendstream" % (len(content), content))
        objects.append(image)
    objects[1] = b"<< /Type /Pages /Kids [%s] /Count %d >>" % (b" ".join(kids), num_pages)
    objects[3] = b"<< /Title %s /Producer (lineage_data.connectors.testing) >>" % _pdf_string(title)
    objects[0] = b"<< /Type /Catalog /Pages 2 0 R >>"
    # Catalog and page tree go last: numbers stay, offsets follow.
    order = [*range(2, len(objects)), 0, 1]
    return _write_pdf(objects, order=order, trailer_extra=b" /Info 4 0 R")
