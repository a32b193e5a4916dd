"""Scanned documents: image-only PDFs whose text only OCR can recover, and the text they show.

Pages are drawn with Pillow (``pip install pillow``), imported when a page is made.
:mod:`.corpus` re-exports the generators; :func:`.corpus.write_scanned_corpus` writes a corpus
of them.
"""

from __future__ import annotations

import io
import random

from lineage_data.connectors.testing.pdfs import _LOREM

__all__ = ["make_page_image", "make_scanned_pdf", "scanned_pages"]

# order matters: a seed draws words by index, so reordering changes every scanned corpus
_WORDS = (
    *_LOREM,
    *[
        "the",
        "of",
        "and",
        "to",
        "in",
        "is",
        "that",
        "for",
        "with",
        "on",
        "as",
        "by",
        "from",
        "at",
        "an",
        "be",
        "this",
        "which",
        "or",
        "are",
        "it",
        "was",
        "not",
    ],
    *[
        "model",
        "image",
        "table",
        "figure",
        "section",
        "result",
        "value",
        "method",
        "paper",
        "training",
        "corpus",
        "word",
    ],
    *[
        "number",
        "system",
        "report",
        "source",
        "review",
        "sample",
        "window",
        "layout",
        "column",
        "header",
        "footer",
    ],
)
_PILLOW_HINT = "pip install pillow"


def scanned_pages(
    num_pages: int, *, seed: int = 0, lines: tuple[int, int] = (4, 12), blank_every: int = 17
) -> list[list[str]]:
    """The text lines of a seeded scanned document: ``pages[i]`` is page ``i``'s lines.

    Each page has between ``lines[0]`` and ``lines[1]`` lines of 2 to 8 words from a small
    English vocabulary. Page ``i`` with ``i % blank_every == blank_every - 1`` is blank (no
    lines), so a long document exercises pages without text.

    Example:
        >>> pages = scanned_pages(17, seed=3, lines=(2, 2))
        >>> len(pages), len(pages[0]), pages[16]
        (17, 2, [])
    """
    lo, hi = lines
    if not 0 <= lo <= hi or num_pages < 0 or blank_every < 1:
        raise ValueError(
            f"need 0 <= lines[0] <= lines[1], num_pages >= 0; got {lines}, {num_pages}"
        )
    rng = random.Random(f"scanned:{seed}")
    pages: list[list[str]] = []
    for i in range(num_pages):
        if i % blank_every == blank_every - 1:
            pages.append([])
            continue
        n = rng.randint(lo, hi)
        pages.append([" ".join(rng.choices(_WORDS, k=rng.randint(2, 8))) for _ in range(n)])
    return pages


def make_page_image(
    lines: list[str],
    *,
    width: int = 850,
    height: int = 1100,
    font_size: int | None = None,
    image_format: str = "PNG",
) -> tuple[bytes, str]:
    r"""A white page image with ``lines`` printed top to bottom, and the text it shows.

    Text is drawn in black with Pillow's bundled FreeType font (no system font is needed), one
    line every 2.2 font heights from a margin of 6 % of the width; lines that do not fit are not
    drawn and not returned. ``font_size`` defaults to ``width / 42`` (about 14 pt on a letter page).

    Returns:
        ``(encoded image, the drawn lines joined with "\n")``.

    Example:
        >>> png, text = make_page_image(["hello world"], width=200, height=80)
        >>> png[:4], text
        (b'\x89PNG', 'hello world')
    """
    try:
        from PIL import Image, ImageDraw, ImageFont
    except ImportError as exc:
        raise ImportError(f"scanned pages need pillow: {_PILLOW_HINT}") from exc
    size = font_size or max(8, round(width / 42))
    font = ImageFont.load_default(size=size)
    image = Image.new("L", (width, height), 255)
    draw = ImageDraw.Draw(image)
    margin = round(width * 0.06)
    step = round(size * 2.2)
    drawn = []
    for i, line in enumerate(lines):
        top = margin + i * step
        if (
            top + step > height - margin // 2
            or draw.textlength(line, font=font) > width - 2 * margin
        ):
            continue
        draw.text((margin, top), line, fill=0, font=font)
        drawn.append(line)
    out = io.BytesIO()
    image.save(out, format=image_format)
    return out.getvalue(), "\n".join(drawn)


def make_scanned_pdf(
    pages: list[list[str]], *, dpi: float = 100, size_in: tuple[float, float] = (8.5, 11)
) -> tuple[bytes, list[str]]:
    """An image-only PDF (no text layer) of ``pages``, and the text each page shows.

    Every page is one grayscale image of :func:`make_page_image` at ``dpi`` on a page of
    ``size_in`` inches, so rendering it back at the same dpi gives the same pixels. A PDF with
    zero pages cannot be written; ``pages`` must not be empty.

    Example:
        >>> data, texts = make_scanned_pdf([["one line"], []], dpi=40)
        >>> data[:8], texts
        (b'%PDF-1.4', ['one line', ''])
    """
    if not pages:
        raise ValueError("a PDF needs at least one page")
    from PIL import Image

    width, height = round(size_in[0] * dpi), round(size_in[1] * dpi)
    images, texts = [], []
    for lines in pages:
        png, text = make_page_image(lines, width=width, height=height)
        images.append(Image.open(io.BytesIO(png)))
        texts.append(text)
    out = io.BytesIO()
    images[0].save(out, format="PDF", save_all=True, append_images=images[1:], resolution=dpi)
    return out.getvalue(), texts
