"""PyAV access shared by the video connector's functions: the import, the checks, the clock.

Opening a video turns FFmpeg's refusals into the typed errors of
:mod:`lineage_data.connectors.errors`; timestamps are seconds as floats.
"""

from __future__ import annotations

import io
from typing import Any

from lineage_data.connectors.errors import (
    CorruptInputError,
    OversizedInputError,
    TruncatedInputError,
    UnsupportedInputError,
    input_bytes,
    sniff_format,
)

#: The ``timeout_s`` of the video stages unless given one: no next clip or frame in this long is a
#: hang in libav, and that input fails with ``TimeoutError``. ``timeout_s=math.inf`` turns it off.
CLIP_TIMEOUT_S = 300.0

GiB = 1 << 30
INSTALL_HINT = "pip install 'lineage-data[video]'"
_VIDEO_KINDS = {
    "MP4/QuickTime video",
    "Matroska/WebM video",
    "AVI video",
    "FLV video",
    "MPEG-TS video",
    "MPEG-PS video",
    "Ogg media",
}
# Timestamps pass through Matroska's millisecond clock; compare times with this slack.
EPS = 0.001


def import_av() -> Any:
    try:
        import av
    except ImportError as exc:
        raise ImportError(f"the video connector needs PyAV: {INSTALL_HINT}") from exc
    return av


def checked_bytes(row: dict[str, Any], key: str, name: str, max_bytes: int | None) -> bytes:
    """``row[key]`` as ``bytes``, after the checks that need no demuxer."""
    data = input_bytes(row, key, name, max_bytes)
    kind = sniff_format(data)
    if kind not in _VIDEO_KINDS and kind not in ("text", "unknown binary"):
        raise UnsupportedInputError.for_input(name, f"not a video (looks like {kind})")
    if kind == "MP4/QuickTime video" and (cut := mp4_truncation(data)):
        raise TruncatedInputError.for_input(name, cut)
    return data


def mp4_truncation(data: bytes) -> str | None:
    """Why an ISO-BMFF (MP4/MOV) file looks cut short, or None if its top-level boxes are whole.

    A box that declares more bytes than remain, or no ``moov`` box (the index, written last).

    Example:
        >>> box = (16).to_bytes(4, "big") + b"ftypisom" + bytes(4)
        >>> mp4_truncation(box + (8).to_bytes(4, "big") + b"moov")
        >>> mp4_truncation(box + (99).to_bytes(4, "big") + b"mdat")
        "box 'mdat' at offset 16 declares 99 bytes, but only 8 remain"
    """
    pos, n, seen = 0, len(data), set()
    while pos + 8 <= n:
        size, kind = int.from_bytes(data[pos : pos + 4], "big"), data[pos + 4 : pos + 8]
        header = 8
        if size == 1 and pos + 16 <= n:
            size, header = int.from_bytes(data[pos + 8 : pos + 16], "big"), 16
        elif size == 0:
            size = n - pos
        label = kind.decode("latin-1")
        if size < header:
            return None  # not a box layout we understand; let the demuxer judge
        if pos + size > n:
            return f"box {label!r} at offset {pos} declares {size} bytes, but only {n - pos} remain"
        seen.add(kind)
        pos += size
    if pos < n:
        return f"{n - pos} stray bytes at offset {pos} where a box header should start"
    return None if b"moov" in seen else "no 'moov' box (the index): the file was cut before it"


def open_container(av: Any, data: bytes, name: str, *, require_video: bool = True) -> Any:
    """Open ``data`` with FFmpeg, turning refusals into typed errors."""
    try:
        container = av.open(io.BytesIO(data), mode="r")
    except av.error.FFmpegError as exc:
        kind = sniff_format(data)
        if kind in _VIDEO_KINDS:
            cause = f"FFmpeg cannot open this {kind} ({exc})"
            raise CorruptInputError.for_input(name, cause) from exc
        cause = f"not a video container (looks like {kind})"
        raise UnsupportedInputError.for_input(name, cause) from exc
    fmt = container.format.name
    image_like = fmt.endswith("_pipe") or fmt in ("image2", "tty")
    if image_like or (require_video and not container.streams.video):
        found = [s.type for s in container.streams] or ["none"]
        container.close()
        raise UnsupportedInputError.for_input(
            name, f"no video stream (format {fmt!r}, streams: {', '.join(found)})"
        )
    return container


def seconds(packet: Any) -> float | None:
    ts = packet.pts if packet.pts is not None else packet.dts
    return None if ts is None else float(ts * packet.time_base)


def packet_seconds(packet: Any) -> float:
    return float((packet.duration or 0) * packet.time_base)


def frame_seconds(video: Any) -> float:
    rate = video.average_rate or video.guessed_rate
    return float(1 / rate) if rate else 0.04


def check_duration(name: str, seconds: float | None, max_seconds: float | None) -> None:
    if seconds is not None and max_seconds is not None and seconds > max_seconds:
        raise OversizedInputError.for_input(
            name, f"{seconds:.1f} s of video exceed max_seconds={max_seconds}"
        )
