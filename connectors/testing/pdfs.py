"""Hand-written PDF and PNG bytes: documents with a text layer, and an encrypted one.

PDF 1.4 object syntax (Helvetica text and one small RGB image per page) and PNG chunks are
written directly, so nothing here needs an optional dependency. :mod:`.corpus` re-exports the
public generators.

Example:
    >>> make_pdf(2, seed=0, title="t")[:8]
    b'%PDF-1.4'
"""

from __future__ import annotations

import random
import struct
import zlib

__all__ = ["make_pdf", "make_png"]

#: The filler words of the text layers (and the first words of the scans' vocabulary).
_LOREM = (
    "lineage",
    "data",
    "page",
    "text",
    "layer",
    "ocr",
    "token",
    "parent",
    "child",
    "batch",
    "commit",
    "shard",
    "region",
    "clip",
    "frame",
    "audio",
    "stream",
    "actor",
    "reduce",
    "expand",
    "order",
    "retry",
    "fence",
    "barrier",
    "sibling",
    "outcome",
)


def _pdf_string(text: str) -> bytes:
    r"""A PDF literal string such as ``(a\(b\))``, Latin-1 encoded."""
    raw = text.encode("latin-1", errors="replace")
    return b"(" + raw.replace(b"\\", b"\\\\").replace(b"(", b"\\(").replace(b")", b"\\)") + b")"


def _gradient(rng: random.Random, width: int, height: int) -> bytes:
    """Raw 8-bit RGB samples of a diagonal gradient in a random hue."""
    r0, g0, b0 = (rng.randrange(256) for _ in range(3))
    return bytes(
        channel
        for y in range(height)
        for x in range(width)
        for channel in ((r0 + 8 * x) % 256, (g0 + 8 * y) % 256, (b0 + 4 * (x + y)) % 256)
    )


def _page_objects(index: int, count: int, title: str, rng: random.Random) -> tuple[bytes, bytes]:
    """The content stream and the image XObject of one page."""
    words = " ".join(rng.choice(_LOREM) for _ in range(rng.randrange(4, 12)))
    lines = [f"Document {title} page {index + 1} of {count}", words]
    text = b"".join(
        b"BT /F1 %d Tf 72 %d Td %s Tj ET\n" % (11 if i else 14, 720 - 24 * i, _pdf_string(line))
        for i, line in enumerate(lines)
    )
    content = b"q 144 0 0 144 72 480 cm /Im0 Do Q\n" + text
    pixels = _gradient(rng, 16, 16)
    image = (
        b"<< /Type /XObject /Subtype /Image /Width 16 /Height 16 /ColorSpace /DeviceRGB "
        b"/BitsPerComponent 8 /Length %d >>\nstream\n%s\nendstream" % (len(pixels), pixels)
    )
    return content, image


def _write_pdf(
    objects: list[bytes], *, order: list[int] | None = None, trailer_extra: bytes = b""
) -> bytes:
    """Serialize numbered objects (object ``i + 1`` is ``objects[i]``; object 1 is the catalog).

    ``order`` lists the indexes of ``objects`` in file order (default: numeric order); the
    classic xref table points at wherever each object landed.
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

    Page ``i`` (0-based) has the text ``"Document <title> page <i+1> of <num_pages>"`` on its
    first line, a second line of seeded filler words, and a 16x16 RGB image. The catalog and the
    page tree are written after the pages, so a truncated copy loses them, as a cut download
    would. About 50 us per page: 400 pages take a few tens of milliseconds.

    Args:
        num_pages: Number of pages (0 writes a valid PDF with an empty page tree).
        seed: Seed of the filler words and image colours; same arguments give the same bytes.
        title: Document title, used in the text layer and in ``/Info`` (Latin-1 only).

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
        number = len(objects) + 1
        kids.append(b"%d 0 R" % number)
        objects.append(
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents %d 0 R "
            b"/Resources << /Font << /F1 3 0 R >> /XObject << /Im0 %d 0 R >> >> >>"
            % (number + 1, number + 2)
        )
        objects.append(b"<< /Length %d >>\nstream\n%s\nendstream" % (len(content), content))
        objects.append(image)
    objects[0] = b"<< /Type /Catalog /Pages 2 0 R >>"
    objects[1] = b"<< /Type /Pages /Kids [%s] /Count %d >>" % (b" ".join(kids), num_pages)
    objects[3] = b"<< /Title %s /Producer (lineage_data.connectors.testing) >>" % _pdf_string(title)
    order = [*range(2, len(objects)), 0, 1]
    return _write_pdf(objects, order=order, trailer_extra=b" /Info 4 0 R")


def _encrypted_pdf() -> bytes:
    """A one-page PDF behind the standard security handler with an unknown user password.

    The /O and /U entries are arbitrary, so no password (the empty one included) opens it.
    """
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] >>",
        b"<< /Filter /Standard /V 1 /R 2 /O <%s> /U <%s> /P -44 >>" % (b"11" * 32, b"22" * 32),
    ]
    file_id = b"<%s>" % (b"33" * 16)
    return _write_pdf(objects, trailer_extra=b" /Encrypt 4 0 R /ID [%s %s]" % (file_id, file_id))


def make_png(width: int = 8, height: int = 8, *, seed: int = 0) -> bytes:
    r"""A valid RGB PNG image (written by hand, no pillow needed).

    Example:
        >>> make_png()[:8]
        b'\x89PNG\r\n\x1a\n'
    """

    def chunk(kind: bytes, body: bytes) -> bytes:
        crc = struct.pack(">I", zlib.crc32(kind + body))
        return struct.pack(">I", len(body)) + kind + body + crc

    pixels = _gradient(random.Random(f"png:{seed}"), width, height)
    rows = b"".join(b"\0" + pixels[y * width * 3 : (y + 1) * width * 3] for y in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )
