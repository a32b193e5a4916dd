"""Synthetic test corpora: long-tailed PDFs, short videos and known-bad files.

Everything here is generated locally and deterministically from a seed, so tests, the demo and
the benchmarks see the same bytes on every machine and never download anything. PDFs are written
by hand (PDF 1.4 object syntax, Helvetica text and one small RGB image per page) and need no
optional dependency; videos need PyAV (``pip install 'lineage-data[video]'``).

Example:
    >>> counts = long_tail_page_counts(5, seed=1)
    >>> len(counts), all(1 <= c <= 427 for c in counts)
    (5, True)
    >>> make_pdf(2, seed=0, title="t")[:8]
    b'%PDF-1.4'
"""

from __future__ import annotations

import io
import itertools
import json
import math
import os
import random
import struct
import zlib
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
_VIDEO_HINT = "pip install 'lineage-data[video]'"


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


# --------------------------------------------------------------------------------------------- PDF


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


# ------------------------------------------------------------------------------------------- video


def _first_encoder(av: Any, names: tuple[str, ...]) -> str:
    """The first of ``names`` that this FFmpeg build can encode with."""
    for name in names:
        try:
            av.codec.Codec(name, "w")
        except ValueError:
            continue
        return name
    raise RuntimeError(f"this FFmpeg build has none of the encoders {names}")


def make_video(
    seconds: float,
    *,
    fps: int = 12,
    size: tuple[int, int] = (64, 48),
    audio: bool = True,
    seed: int = 0,
    keyframe_interval_s: float = 1.0,
) -> bytes:
    """Encode a short synthetic MP4: a moving pattern, and a sine tone when ``audio``.

    Video is H.264 (libx264, with B-frames, one keyframe every ``keyframe_interval_s``) or MPEG-4
    Part 2 where libx264 is missing; audio is 16 kHz mono AAC (MP2 as a fallback). Encoding is
    single-threaded and muxing bit-exact, so the decoded frames depend on the arguments and the
    FFmpeg build (byte identity of the file is not promised): equal in almost every call, but ~1 in
    300 encodes under heavy CPU load gave a frame a few levels apart (measured, cause not found).
    A 5 s video takes well under a second.

    Args:
        seconds: Duration; ``round(seconds * fps)`` frames.
        fps: Frame rate.
        size: ``(width, height)``, both even.
        audio: Add an audio track.
        seed: Seed of the colours, the pattern speed and the tone's pitch.
        keyframe_interval_s: Seconds between keyframes (a large value gives one keyframe).

    Returns:
        The MP4 file as bytes (index at the end, as FFmpeg writes it by default).

    Example:
        >>> data = make_video(1, seed=3)
        >>> data[4:8], len(data) > 1000
        (b'ftyp', True)
    """
    try:
        import av
        import numpy as np
    except ImportError as exc:
        raise ImportError(f"make_video needs PyAV and numpy: {_VIDEO_HINT}") from exc
    width, height = size
    if seconds <= 0 or fps < 1 or width % 2 or height % 2:
        raise ValueError(f"need seconds > 0, fps >= 1 and even sizes; got {seconds}, {fps}, {size}")
    rng = random.Random(f"video:{seed}")
    out_bytes = io.BytesIO()
    # bitexact: no creation time or encoder version in the header, so equal arguments give equal bytes
    with av.open(out_bytes, mode="w", format="mp4", options={"fflags": "+bitexact"}) as out:
        video = _add_video_stream(av, out, fps, size, max(1, round(keyframe_interval_s * fps)))
        sound = _add_audio_stream(av, out) if audio else None
        colour = np.array([rng.randrange(256) for _ in range(3)], dtype=np.uint8)
        speed = rng.randrange(1, 4)
        for index in range(round(seconds * fps)):
            frame = av.VideoFrame.from_ndarray(_pattern(np, index, speed, colour, size), "rgb24")
            frame.pts = index
            out.mux(video.encode(frame))
        out.mux(video.encode())
        if sound is not None:
            _encode_tone(av, np, out, sound, seconds, 220.0 * (1 + seed % 4))
    return out_bytes.getvalue()


def _add_video_stream(av: Any, out: Any, fps: int, size: tuple[int, int], keyint: int) -> Any:
    codec = _first_encoder(av, ("libx264", "mpeg4"))
    options = {"threads": "1"}
    if codec == "libx264":
        # x264's own thread settings: with only FFmpeg's "threads", 3 of 60 encodes of the same
        # arguments differed while other processes loaded the cores (0 of 120 with these)
        threads = "threads=1:lookahead-threads=1:sliced-threads=0"
        options |= {"preset": "veryfast", "x264-params": f"keyint={keyint}:scenecut=0:{threads}"}
    stream = out.add_stream(codec, rate=fps, options=options)
    stream.width, stream.height = size
    stream.pix_fmt = "yuv420p"
    stream.codec_context.gop_size = keyint
    stream.codec_context.thread_count = 1
    return stream


def _pattern(np: Any, index: int, speed: int, colour: Any, size: tuple[int, int]) -> Any:
    """Frame ``index``: a tinted gradient with a white bar moving right."""
    width, height = size
    image = np.empty((height, width, 3), dtype=np.uint8)
    image[:] = colour
    image[..., 1] = (np.arange(width, dtype=np.uint16) * 4 + index * 2) % 256
    x = (index * speed) % width
    image[:, x : x + max(2, width // 10)] = 255
    return image


def _add_audio_stream(av: Any, out: Any) -> Any:
    stream = out.add_stream(_first_encoder(av, ("aac", "mp2")), rate=16_000)
    stream.layout = "mono"
    return stream


def _encode_tone(av: Any, np: Any, out: Any, stream: Any, seconds: float, pitch: float) -> None:
    rate = 16_000
    total = round(seconds * rate)
    chunk = 1024
    for start in range(0, total, chunk):
        t = np.arange(start, min(total, start + chunk)) / rate
        samples = (0.3 * np.sin(2 * np.pi * pitch * t)).astype(np.float32).reshape(1, -1)
        frame = av.AudioFrame.from_ndarray(samples, format="fltp", layout="mono")
        frame.sample_rate, frame.pts = rate, start
        out.mux(stream.encode(frame))
    out.mux(stream.encode())


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


# ------------------------------------------------------------------------ scanned (image-only) PDFs

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
