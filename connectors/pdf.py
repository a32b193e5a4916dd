"""PDF connector: a document becomes ordered pages (pypdfium2), and pages get a normalized text.

:func:`render_pages` (or its callable-class form :class:`PdfPages`) is an **expand** function and
:class:`ExtractText` a 1:1 **batch UDF**; the PDF connector guide shows a plan. Bad inputs raise
the typed errors of :mod:`lineage_data.connectors.errors` before the first page is yielded. PDFium
is not thread-safe: run one render per worker process (Ray Data's default).

Needs ``pip install 'lineage-data[pdf]'`` (pypdfium2, and pillow to encode page images), imported
when first called.
"""

from __future__ import annotations

import io
import math
import re
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from lineage_data import RecordFailure
from lineage_data.connectors import errors
from lineage_data.connectors.errors import CorruptInputError

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = [
    "PAGE_TIMEOUT_S",
    "ExtractText",
    "PdfPages",
    "normalize_text",
    "render_pages",
    "render_scale",
]

#: The ``timeout_s`` of :func:`render_pages` and :class:`PdfPages` unless given one: no next page
#: in this long is a hang in pdfium, and the document fails with ``TimeoutError``. A 150-dpi page
#: takes well under a second; ``timeout_s=math.inf`` on the verb turns it off.
PAGE_TIMEOUT_S = 120.0

_MiB = 1 << 20
_IMAGE_FORMATS = {"png": "PNG", "jpeg": "JPEG"}
# PDFium's FPDF_GetLastError codes (fpdfview.h) for encryption; stable across PDFium releases.
_ENCRYPTED = {
    4: "the PDF is encrypted and needs a password",  # FPDF_ERR_PASSWORD
    5: "the PDF uses an unknown security handler",  # FPDF_ERR_SECURITY
}
_INSTALL_HINT = "pip install 'lineage-data[pdf]'"


def render_pages(
    row: dict[str, Any],
    *,
    dpi: float = 72,
    max_pixels: int = 4_000_000,
    max_pages: int | None = 2000,
    max_bytes: int | None = 512 * _MiB,
    render: bool = True,
    image_format: str = "png",
    page_errors: str = "raise",
) -> Iterator[dict[str, Any]]:
    r"""Expand one PDF row (``bytes``, and ``path`` to name it in errors) into its pages, in order.

    Yields, for page ``i`` of ``n``::

        {"page_index": i, "page_count": n, "width": points, "height": points,
         "image": bytes | None, "text": str}

    ``width``/``height`` are in PDF points (1/72 in); ``image`` is the page rendered at ``dpi``
    (scaled down to at most ``max_pixels``) as PNG or JPEG; ``text`` is the text layer ("" for a
    scan). With ``page_errors="keep"`` each row also has ``error``: None, or why PDFium cannot read
    that page (then ``image`` None, ``text`` "", no size), so that a later stage such as
    :class:`lineage_data.connectors.ocr.DetectLines` fails that page alone.

    Options are checked when this is called, the input on the first ``next()``.

    Args:
        row: The input row, with ``bytes`` and optionally ``path``.
        dpi: Render resolution in dots per inch (72 = one pixel per point).
        max_pixels: Cap on width x height of each rendered image.
        max_pages: Reject documents with more pages (None: no cap).
        max_bytes: Reject files larger than this (None: no cap).
        render: Render page images; False skips rendering (and pillow) entirely.
        image_format: ``"png"`` or ``"jpeg"``.
        page_errors: ``"raise"`` (a bad page fails the document) or ``"keep"``.

    Raises:
        EmptyInputError: Zero bytes, or a PDF with zero pages.
        UnsupportedInputError: The bytes are not a PDF (the message says what they look like).
        EncryptedInputError: The PDF needs a password or uses an unsupported security handler.
        TruncatedInputError: The file has no ``%%EOF`` marker: it was cut short.
        CorruptInputError: PDFium cannot parse the document or one of its pages.
        OversizedInputError: More than ``max_bytes`` bytes or ``max_pages`` pages.
        ImportError: pypdfium2 (or pillow, when rendering) is not installed.

    Example:
        >>> from lineage_data.connectors.testing.corpus import make_pdf
        >>> pages = list(render_pages({"bytes": make_pdf(2, title="a")}, render=False))
        >>> [(p["page_index"], p["page_count"], p["text"].splitlines()[0]) for p in pages]
        [(0, 2, 'Document a page 1 of 2'), (1, 2, 'Document a page 2 of 2')]
    """
    options = _PageOptions(dpi, max_pixels, max_pages, max_bytes, render, image_format, page_errors)
    return _iter_pages(row, options)


class PdfPages:
    """Callable-class form of :func:`render_pages`; bad options fail at construction.

    Example:
        >>> from lineage_data.connectors.testing.corpus import make_pdf
        >>> expand = PdfPages(render=False)
        >>> len(list(expand({"bytes": make_pdf(3)})))
        3
    """

    def __init__(self, **options: Any) -> None:
        render_pages({}, **options)  # checks the options; the row is read only on next()
        self._options = options

    def __call__(self, row: dict[str, Any]) -> Iterator[dict[str, Any]]:
        """See :func:`render_pages`."""
        return render_pages(row, **self._options)


for _native in (render_pages, PdfPages):  # see PAGE_TIMEOUT_S
    setattr(_native, "default_timeout_s", PAGE_TIMEOUT_S)  # noqa: B010 - a function attribute


@dataclass(slots=True)
class _PageOptions:
    """Validated options of :func:`render_pages`; ``image_format`` becomes pillow's name."""

    dpi: float
    max_pixels: int
    max_pages: int | None
    max_bytes: int | None
    render: bool
    image_format: str
    page_errors: str = "raise"

    def __post_init__(self) -> None:
        if self.page_errors not in ("raise", "keep"):
            raise ValueError(f"page_errors must be 'raise' or 'keep', got {self.page_errors!r}")
        if not self.dpi > 0:
            raise ValueError(f"dpi must be > 0, got {self.dpi!r}")
        if self.max_pixels < 1:
            raise ValueError(f"max_pixels must be >= 1, got {self.max_pixels!r}")
        for name, cap in (("max_pages", self.max_pages), ("max_bytes", self.max_bytes)):
            if cap is not None and cap < 1:
                raise ValueError(f"{name} must be >= 1 or None, got {cap!r}")
        if self.image_format.lower() not in _IMAGE_FORMATS:
            known = sorted(_IMAGE_FORMATS)
            raise ValueError(f"image_format must be one of {known}, got {self.image_format!r}")
        self.dpi, self.max_pixels = float(self.dpi), int(self.max_pixels)
        self.render = bool(self.render)
        self.image_format = _IMAGE_FORMATS[self.image_format.lower()]


def _iter_pages(row: dict[str, Any], options: _PageOptions) -> Iterator[dict[str, Any]]:
    """The generator behind :func:`render_pages`."""
    try:
        import pypdfium2 as pdfium
    except ImportError as exc:
        raise ImportError(f"the PDF connector needs pypdfium2: {_INSTALL_HINT}") from exc
    name = errors.input_name(row, kind="pdf")
    data = _checked_bytes(row, name, options.max_bytes)  # alive until the document closes
    document = _open_document(pdfium, data, name)
    try:
        count = len(document)
        if options.max_pages is not None and count > options.max_pages:
            raise errors.OversizedInputError.for_input(
                name, f"{count} pages exceed max_pages={options.max_pages}"
            )
        for index in range(count):
            if options.page_errors == "raise":
                yield _read_page(pdfium, document, index, count, name, options)
                continue
            try:
                page = {**_read_page(pdfium, document, index, count, name, options), "error": None}
            except CorruptInputError as exc:
                page = {"page_index": index, "page_count": count, "width": None, "height": None}
                page.update(image=None, text="", error=str(exc))
            yield page
    finally:
        document.close()


def _checked_bytes(row: dict[str, Any], name: str, max_bytes: int | None) -> bytes:
    """``row["bytes"]`` as ``bytes``, after the checks that need no parser."""
    data = errors.input_bytes(row, "bytes", name, max_bytes)
    kind = errors.sniff_format(data)
    if kind != "PDF document":
        raise errors.UnsupportedInputError.for_input(name, f"not a PDF (looks like {kind})")
    if data.rfind(b"%%EOF") < 0:
        # PDFium would rebuild a cut file from what is left and silently return fewer pages.
        raise errors.TruncatedInputError.for_input(
            name, f"no %%EOF marker in {len(data)} bytes: the file was cut short"
        )
    return data


def _open_document(pdfium: Any, data: bytes, name: str) -> Any:
    """Open ``data`` with PDFium (kept alive by the caller: PDFium reads it lazily), or raise.

    The raw API closes a zero-page document again; pypdfium2's constructor leaks its handle.
    """
    raw = pdfium.raw
    handle = raw.FPDF_LoadMemDocument64(data, len(data), None)
    if not handle:
        code = raw.FPDF_GetLastError()
        if code in _ENCRYPTED:
            raise errors.EncryptedInputError.for_input(name, _ENCRYPTED[code])
        reason = pdfium.internal.ErrorToStr.get(code, f"error {code}")
        raise CorruptInputError.for_input(name, f"PDFium cannot parse the document ({reason})")
    if raw.FPDF_GetPageCount(handle) < 1:
        raw.FPDF_CloseDocument(handle)
        raise errors.EmptyInputError.for_input(name, "the PDF has zero pages")
    return pdfium.PdfDocument(handle)


def _read_page(
    pdfium: Any, document: Any, index: int, count: int, name: str, options: _PageOptions
) -> dict[str, Any]:
    """Read one page into a page row, closing every PDFium object it opened."""
    try:
        page = document[index]
    except pdfium.PdfiumError as exc:
        raise CorruptInputError.for_input(name, f"page {index} cannot be loaded ({exc})") from exc
    try:
        width, height = page.get_size()
        textpage = page.get_textpage()
        try:
            text = textpage.get_text_range()
        finally:
            textpage.close()
        image = _render(page, width, height, options) if options.render else None
    except pdfium.PdfiumError as exc:
        raise CorruptInputError.for_input(name, f"page {index} cannot be read ({exc})") from exc
    finally:
        page.close()
    return {
        "page_index": index,
        "page_count": count,
        "width": float(width),
        "height": float(height),
        "image": image,
        "text": text.replace("\r\n", "\n").replace("\r", "\n"),
    }


def render_scale(width: float, height: float, *, dpi: float, max_pixels: int) -> float:
    """The PDFium render scale for a page of ``width`` x ``height`` points.

    ``dpi / 72``, reduced so that the bitmap (PDFium rounds sides up) has ``max_pixels`` at most.

    Example:
        >>> render_scale(612, 792, dpi=144, max_pixels=10**9)
        2.0
        >>> s = render_scale(612, 792, dpi=300, max_pixels=1_000_000)
        >>> math.ceil(612 * s) * math.ceil(792 * s) <= 1_000_000
        True
    """
    scale = dpi / 72
    if math.ceil(width * scale) * math.ceil(height * scale) > max_pixels:
        scale = math.sqrt(max_pixels / (max(width, 1e-6) * max(height, 1e-6)))
        while scale > 0 and math.ceil(width * scale) * math.ceil(height * scale) > max_pixels:
            scale *= 0.999
    return scale


def _render(page: Any, width: float, height: float, options: _PageOptions) -> bytes:
    scale = render_scale(width, height, dpi=options.dpi, max_pixels=options.max_pixels)
    bitmap = page.render(scale=scale, rev_byteorder=True)
    try:
        image = bitmap.to_pil()
        out = io.BytesIO()
        if options.image_format == "PNG":
            # Level 1: this is the hot loop; the default level 6 costs far more time than it saves.
            image.save(out, format="PNG", compress_level=1)
        else:
            image.convert("RGB").save(out, format="JPEG", quality=90)
        return out.getvalue()
    except ImportError as exc:
        raise ImportError(f"rendering PDF pages needs pillow: {_INSTALL_HINT}") from exc
    finally:
        bitmap.close()


# ------------------------------------------------------------------------------------------- text

_SPACES = re.compile(r"[^\S\n]+")  # runs of whitespace other than newlines
_BLANK_LINES = re.compile(r"\n{3,}")


# A hyphenation point PDFium found: its marker U+FFFE (a noncharacter), U+0002 in older PDFium
# builds, or a soft hyphen U+00AD. At a line end the word goes on on the next line: join it.
_HYPHEN_AT_LINE_END = re.compile("[\u00ad\ufffe\x02][^\\S\n]*\n[^\\S\n]*")


def _kept(ch: str) -> bool:
    """False for a character that is never text: controls, format characters, noncharacters."""
    if ch in "\n\t":
        return True
    code = ord(ch)
    if 0xFDD0 <= code <= 0xFDEF or (code & 0xFFFE) == 0xFFFE:  # the 66 noncharacters
        return False
    return unicodedata.category(ch) not in ("Cc", "Cf", "Cs")


def normalize_text(text: str) -> str:
    r"""Normalize a page's text layer for training data.

    Joins words hyphenated at a line end, drops control, format and noncharacter code points,
    applies NFKC ("ﬁ" becomes "fi"), makes ``\n`` the line end, collapses spaces and tabs, strips
    each line, keeps at most one blank line in a row and strips the whole.

    Example:
        >>> normalize_text("  ﬁrst\tline \r\n\r\n\r\n\x00second  ")
        'first line\n\nsecond'
        >>> normalize_text("to improve\ufffe\r\nments and re\u00adread, not\ufffeyet")
        'to improvements and reread, notyet'
    """
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    text = _HYPHEN_AT_LINE_END.sub("", text)
    # Drop them before NFKC: it may compose across a removed character.
    text = "".join(ch for ch in text if _kept(ch))
    text = unicodedata.normalize("NFKC", text)
    lines = (_SPACES.sub(" ", line).strip() for line in text.split("\n"))
    return _BLANK_LINES.sub("\n\n", "\n".join(lines)).strip()


class ExtractText:
    """Page-level batch UDF: clean text and its length, one output row per input row.

    Returns ``{"text": [...], "chars": [...]}``: :func:`normalize_text` of each value (null counts
    as "") and its length. Text shorter than ``min_chars`` becomes ``RecordFailure("empty text
    layer")``, which fails that page (a scan with no text layer, say) while its siblings go on.

    Args:
        min_chars: Fail rows with fewer characters (0: never fail).
        column: Name of the input text column.

    Example:
        >>> import pyarrow as pa
        >>> out = ExtractText(min_chars=3)(pa.table({"text": [" a  b ", None, "page 1"]}))
        >>> out["chars"], out["text"][0], out["text"][1].cause, out["text"][2]
        ([3, 0, 6], 'a b', 'empty text layer', 'page 1')
    """

    def __init__(self, *, min_chars: int = 0, column: str = "text") -> None:
        if min_chars < 0:
            raise ValueError(f"min_chars must be >= 0, got {min_chars!r}")
        self.min_chars = min_chars
        self.column = column

    def __call__(self, batch: pa.Table | dict[str, list[Any]]) -> dict[str, list[Any]]:
        """Clean one batch; see the class docstring."""
        values = errors.column_values(batch, self.column, "ExtractText")
        clean = [normalize_text(value or "") for value in values]
        failure = RecordFailure("empty text layer")
        texts = [failure if len(text) < self.min_chars else text for text in clean]
        return {"text": texts, "chars": [len(text) for text in clean]}
