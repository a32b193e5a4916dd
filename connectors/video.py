"""Video connector: a video becomes ordered clips, a clip becomes sampled frames (PyAV).

Three functions, each behind the small interface lineage_data expects:

* :func:`split_clips` is an **expand** function: video bytes in, one row per clip out, in order.
* :func:`sample_frames` is a second-level **expand**: one clip in, a few JPEG frames out, in order.
* :func:`clip_audio` is a row-wise **map**: a clip row in, the same row plus audio statistics out.

A typical plan::

    clips = videos.expand_lineage(split_clips, fn_kwargs={"clip_seconds": 2.0})
    clips = clips.map(clip_audio)
    frames = clips.expand_lineage(sample_frames, fn_kwargs={"frames_per_clip": 4})

**How clips carry their bytes.** Each clip row's ``clip`` is a small standalone Matroska file that
holds the source's own compressed packets (stream copy: nothing is re-encoded, so splitting costs
a demux, not a decode). Matroska accepts nearly any codec, so the copy works whatever the source
codec is. Packets keep the source timestamps, so a clip's frames have the same times as in the
source. Compressed video can only start decoding at a keyframe, so a clip holds every group of
pictures (GOP: a keyframe and the frames up to the next one) that overlaps ``[start_s, end_s)``;
frames outside that range are decoded by :func:`sample_frames` only as references and never
returned. To avoid that overhead, each nominal boundary (every ``clip_seconds``) moves to the
nearest keyframe within ``snap_seconds``; a clip whose both ends sit on keyframes (or the ends of
the video) has ``keyframe_aligned=True`` and holds exactly its own frames.

Needs ``pip install 'lineage-data[video]'`` (PyAV, and pillow for JPEG frames); numpy, already a
dependency of Ray Data, computes audio levels. This module imports none of them until called.
"""

from __future__ import annotations

import bisect
import io
import itertools
import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from lineage_data.connectors.errors import (
    CorruptInputError,
    EmptyInputError,
    OversizedInputError,
    TruncatedInputError,
    UnsupportedInputError,
    input_bytes,
    input_name,
    sniff_format,
)

__all__ = [
    "CLIP_TIMEOUT_S",
    "clip_audio",
    "clip_bounds",
    "mp4_truncation",
    "sample_frames",
    "split_clips",
]

#: The ``timeout_s`` a stage of :func:`split_clips`, :func:`sample_frames` or :func:`clip_audio`
#: gets unless it is given one (their ``default_timeout_s``): no next clip or frame (or no audio
#: statistics for a clip) in this long is a hang in libav, and that video (or clip) fails with
#: ``TimeoutError`` instead of stalling the job. ``timeout_s=math.inf`` on the verb turns it off.
CLIP_TIMEOUT_S = 300.0

_GiB = 1 << 30
_INSTALL_HINT = "pip install 'lineage-data[video]'"
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
_EPS = 0.001


def _import_av() -> Any:
    try:
        import av
    except ImportError as exc:
        raise ImportError(f"the video connector needs PyAV: {_INSTALL_HINT}") from exc
    return av


# ------------------------------------------------------------------------------------ split_clips


@dataclass(slots=True)
class _Gop:
    """A keyframe and the video packets after it in decode order, up to the next keyframe."""

    start_s: float
    end_s: float = math.inf
    packets: list[Any] = field(default_factory=list)


@dataclass(slots=True)
class _Demuxed:
    """Everything :func:`split_clips` needs from one pass over the source's packets."""

    video: Any
    audio: Any | None
    gops: list[_Gop]
    audio_packets: list[tuple[float, float, Any]]  # (start, end, packet)
    end_s: float


def split_clips(
    row: dict[str, Any],
    *,
    clip_seconds: float = 2.0,
    snap_seconds: float | None = None,
    max_seconds: float | None = 600,
    max_bytes: int | None = 2 * _GiB,
) -> Iterator[dict[str, Any]]:
    """Expand one video row into consecutive clips that cover it, in order.

    Reads ``row["bytes"]`` (a video file: MP4, Matroska/WebM, AVI, ...) and ``row.get("path")``
    (only to name the input in errors). Yields, for clip ``i`` of ``n``::

        {"clip_index": i, "clip_count": n, "start_s": float, "end_s": float,
         "keyframe_aligned": bool, "has_audio": bool, "width": int, "height": int,
         "fps": float, "clip": bytes}

    ``start_s``/``end_s`` are seconds on the source's timeline (0 at the start of a typical MP4);
    the clips tile the video: clip 0 starts at the first keyframe, each clip ends where the next
    starts, and the last ends with the last frame. ``clip`` is a standalone Matroska file (see the
    module docstring) with the video packets and the audio packets (of the first audio stream)
    that overlap ``[start_s, end_s)``; ``has_audio`` says whether there are any. ``fps`` is the
    stream's average frame rate. The whole source is demuxed (not decoded) before the first clip
    is yielded, so every check below happens before any clip is in flight; all its packets stay
    in memory until the iterator ends.

    Args:
        row: The input row, with ``bytes`` and optionally ``path``.
        clip_seconds: Nominal clip length.
        snap_seconds: How far a boundary may move to reach a keyframe (default ``clip_seconds/4``;
            0 disables snapping).
        max_seconds: Reject longer videos (None: no cap).
        max_bytes: Reject larger files (None: no cap).

    Returns:
        An iterator of clip rows.

    Raises:
        EmptyInputError: Zero bytes, or a video stream without frames.
        UnsupportedInputError: Not a video (an image, a PDF, text, audio only, ...).
        TruncatedInputError: The container says more data follows than the bytes hold.
        CorruptInputError: A video container that FFmpeg cannot demux.
        OversizedInputError: Longer than ``max_seconds`` or larger than ``max_bytes``.
        ImportError: PyAV is not installed.

    Example:
        >>> from lineage_data.connectors.testing.corpus import make_video
        >>> clips = list(split_clips({"bytes": make_video(3, seed=0)}, clip_seconds=1))
        >>> [(c["clip_index"], c["start_s"], c["end_s"]) for c in clips]
        [(0, 0.0, 1.0), (1, 1.0, 2.0), (2, 2.0, 3.0)]
    """
    if not clip_seconds > 0:
        raise ValueError(f"clip_seconds must be > 0, got {clip_seconds!r}")
    snap = clip_seconds / 4 if snap_seconds is None else snap_seconds
    if snap < 0:
        raise ValueError(f"snap_seconds must be >= 0 or None, got {snap_seconds!r}")
    return _iter_clips(row, clip_seconds, snap, max_seconds, max_bytes)


def _iter_clips(
    row: dict[str, Any],
    clip_seconds: float,
    snap: float,
    max_seconds: float | None,
    max_bytes: int | None,
) -> Iterator[dict[str, Any]]:
    """The generator behind :func:`split_clips`."""
    av = _import_av()
    name = input_name(row, kind="video")
    data = _checked_bytes(row, "bytes", name, max_bytes)
    with _open_container(av, data, name) as container:
        demuxed = _demux(av, container, name, max_seconds)
        video = demuxed.video
        info = {
            "width": int(video.codec_context.width),
            "height": int(video.codec_context.height),
            "fps": _fps(video, demuxed),
        }
        keyframes = [gop.start_s for gop in demuxed.gops]
        bounds = clip_bounds(keyframes, demuxed.end_s, clip_seconds=clip_seconds, snap=snap)
        aligned = set(keyframes) | {demuxed.end_s}
        for index, (start, end) in enumerate(itertools.pairwise(bounds)):
            clip, has_audio = _mux_clip(av, demuxed, start, end)
            yield {
                "clip_index": index,
                "clip_count": len(bounds) - 1,
                "start_s": round(start, 6),
                "end_s": round(end, 6),
                "keyframe_aligned": start in aligned and end in aligned,
                "has_audio": has_audio,
                **info,
                "clip": clip,
            }


def clip_bounds(
    keyframes: list[float], end_s: float, *, clip_seconds: float, snap: float
) -> list[float]:
    """Clip boundaries: ``keyframes[0]``, then every ``clip_seconds``, moved to nearby keyframes.

    A nominal boundary moves to the nearest keyframe at most ``snap`` seconds away (and after the
    previous boundary). A last piece shorter than ``clip_seconds / 4`` joins the clip before it.

    Args:
        keyframes: Sorted keyframe times in seconds; the first one is where the video starts.
        end_s: Where the last frame ends.
        clip_seconds: Nominal clip length.
        snap: How far a boundary may move to reach a keyframe.

    Returns:
        Sorted boundaries, first ``keyframes[0]`` and last ``end_s``; clip ``i`` is
        ``[bounds[i], bounds[i + 1])``.

    Example:
        >>> clip_bounds([0.0, 1.9, 4.0], 5.0, clip_seconds=2, snap=0.5)
        [0.0, 1.9, 4.0, 5.0]
        >>> clip_bounds([0.0], 4.2, clip_seconds=2, snap=0.5)
        [0.0, 2.0, 4.2]
    """
    start = keyframes[0]
    bounds = [start]
    k = 1
    while (nominal := start + k * clip_seconds) < end_s - clip_seconds / 4:
        at = bisect.bisect_left(keyframes, nominal)
        near = [kf for kf in keyframes[max(0, at - 1) : at + 1] if abs(kf - nominal) <= snap]
        moved = min(near, key=lambda kf: abs(kf - nominal)) if near else nominal
        if moved > bounds[-1] + _EPS:
            bounds.append(moved)
        k += 1
    bounds.append(end_s)
    return bounds


def _checked_bytes(row: dict[str, Any], key: str, name: str, max_bytes: int | None) -> bytes:
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

    Walks the top-level boxes: a box that declares more bytes than remain, or a file with no
    ``moov`` box (the index, which FFmpeg writes last by default), means the file was truncated.

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


def _open_container(av: Any, data: bytes, name: str, *, require_video: bool = True) -> Any:
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


def _seconds(packet: Any) -> float | None:
    ts = packet.pts if packet.pts is not None else packet.dts
    return None if ts is None else float(ts * packet.time_base)


def _demux(av: Any, container: Any, name: str, max_seconds: float | None) -> _Demuxed:
    """Read every packet of the first video and audio streams, grouped for clipping."""
    video = container.streams.video[0]
    audio = container.streams.audio[0] if container.streams.audio else None
    declared = container.duration / 1_000_000 if container.duration else None
    _check_duration(name, declared, max_seconds)
    gops: list[_Gop] = []
    audio_packets: list[tuple[float, float, Any]] = []
    end_s = -math.inf
    streams = [video] if audio is None else [video, audio]
    try:
        for packet in container.demux(streams):
            t = _seconds(packet)
            if t is None or packet.size == 0:
                continue
            if packet.stream is audio:
                audio_packets.append((t, t + _packet_seconds(packet), packet))
                continue
            if packet.is_keyframe:
                gops.append(_Gop(start_s=t))
            if gops:  # packets before the first keyframe cannot be decoded: skip them
                gops[-1].packets.append(packet)
                end_s = max(end_s, t + (_packet_seconds(packet) or _frame_seconds(video)))
    except av.error.FFmpegError as exc:
        raise CorruptInputError.for_input(name, f"demuxing failed ({exc})") from exc
    if not gops:
        raise EmptyInputError.for_input(name, "the video stream has no decodable frames")
    for gop, following in itertools.pairwise(gops):
        gop.end_s = following.start_s
    gops[-1].end_s = end_s
    _check_complete(name, declared, end_s, audio_packets)
    _check_duration(name, end_s - gops[0].start_s, max_seconds)
    return _Demuxed(video, audio if audio_packets else None, gops, audio_packets, end_s)


def _packet_seconds(packet: Any) -> float:
    return float((packet.duration or 0) * packet.time_base)


def _frame_seconds(video: Any) -> float:
    rate = video.average_rate or video.guessed_rate
    return float(1 / rate) if rate else 0.04


def _fps(video: Any, demuxed: _Demuxed) -> float:
    rate = video.average_rate or video.guessed_rate
    if rate:
        return round(float(rate), 6)
    frames = sum(len(gop.packets) for gop in demuxed.gops)
    span = demuxed.end_s - demuxed.gops[0].start_s
    return round(frames / span, 6) if span > 0 else 0.0


def _check_duration(name: str, seconds: float | None, max_seconds: float | None) -> None:
    if seconds is not None and max_seconds is not None and seconds > max_seconds:
        raise OversizedInputError.for_input(
            name, f"{seconds:.1f} s of video exceed max_seconds={max_seconds}"
        )


def _check_complete(
    name: str, declared: float | None, end_s: float, audio: list[tuple[float, float, Any]]
) -> None:
    """Raise if the packets stop well before the duration the container header declares."""
    if declared is None:
        return
    last = max([end_s, *(u for _, u, _ in audio[-1:])])
    if declared - last > max(1.0, 0.1 * declared):
        raise TruncatedInputError.for_input(
            name, f"packets stop at {last:.2f} s but the container declares {declared:.2f} s"
        )


def _mux_clip(av: Any, demuxed: _Demuxed, start: float, end: float) -> tuple[bytes, bool]:
    """A standalone Matroska file with the GOPs overlapping ``[start, end)`` and its audio.

    Returns the file and whether it has audio.
    """
    gops = [g for g in demuxed.gops if g.start_s < end - _EPS and g.end_s > start + _EPS]
    # Audio packets overlapping the range: one packet may go to two clips; clip_audio trims.
    sound = [p for t, u, p in demuxed.audio_packets if t < end - _EPS and u > start + _EPS]
    out_bytes = io.BytesIO()
    with av.open(out_bytes, mode="w", format="matroska") as out:
        video = out.add_stream_from_template(demuxed.video)
        audio = out.add_stream_from_template(demuxed.audio) if sound else None
        for gop in gops:
            for packet in gop.packets:
                packet.stream = video
                out.mux(packet)
        for packet in sound:
            packet.stream = audio
            out.mux(packet)
    return out_bytes.getvalue(), bool(sound)


# ---------------------------------------------------------------------------------- sample_frames


def _clip_input(row: dict[str, Any], max_bytes: int | None) -> tuple[bytes, str]:
    """The bytes to decode (``clip``, else ``bytes``) and the name to use in errors."""
    key = "clip" if "clip" in row else "bytes"
    name = input_name(row, kind="video")
    if "clip_index" in row:
        name = f"{name} clip {row['clip_index']}"
    return _checked_bytes(row, key, name, max_bytes), name


def _time_range(row: dict[str, Any], container: Any, stream: Any) -> tuple[float, float | None]:
    """``[start_s, end_s)`` from the row, else from the container (end None when unknown)."""
    start, end = row.get("start_s"), row.get("end_s")
    if start is None:
        start = float(stream.start_time * stream.time_base) if stream.start_time is not None else 0
    if end is None and container.duration:
        end = float(start) + container.duration / 1_000_000
    return float(start), None if end is None else float(end)


def sample_frames(
    row: dict[str, Any],
    *,
    frames_per_clip: int = 4,
    max_frames: int = 64,
    jpeg_quality: int = 85,
    max_decoded_frames: int = 20_000,
    max_bytes: int | None = 2 * _GiB,
) -> Iterator[dict[str, Any]]:
    """Expand one clip row into evenly spaced frames, in time order, as JPEG.

    Reads ``row["clip"]`` (as :func:`split_clips` yields it; a row with only ``bytes``, a whole
    video, works too) and ``row.get("start_s")``/``row.get("end_s")`` (default: the whole
    container). Yields, in time order::

        {"frame_index": j, "t_s": float, "jpeg": bytes, "width": int, "height": int}

    The range is cut into ``min(frames_per_clip, max_frames)`` equal slots and the frame nearest
    each slot's middle is taken; a frame nearest to two slots is yielded once, so a clip shorter
    than the sample count yields each of its frames once. ``frame_index`` is the frame's position
    among the clip's own frames (those in ``[start_s, end_s)``) and ``t_s`` its source time.
    Frames before ``start_s`` (the keyframe lead-in) are decoded only as references.

    Args:
        row: The clip row.
        frames_per_clip: How many frames to sample.
        max_frames: Hard cap on frames yielded per row, whatever ``frames_per_clip`` says.
        jpeg_quality: JPEG quality, 1..95.
        max_decoded_frames: Reject a clip once this many frames were decoded (lead-in included).
        max_bytes: Reject larger clips.

    Returns:
        An iterator of frame rows.

    Raises:
        EmptyInputError: No frame falls in ``[start_s, end_s)``.
        CorruptInputError: FFmpeg cannot decode the clip.
        OversizedInputError: More than ``max_decoded_frames`` frames had to be decoded.
        UnsupportedInputError, TruncatedInputError: As for :func:`split_clips`.

    Example:
        >>> from lineage_data.connectors.testing.corpus import make_video
        >>> clip = next(split_clips({"bytes": make_video(2, seed=0)}))
        >>> [f["frame_index"] for f in sample_frames(clip, frames_per_clip=4)]
        [3, 9, 15, 21]
    """
    if frames_per_clip < 1 or max_frames < 1 or max_decoded_frames < 1:
        raise ValueError("frames_per_clip, max_frames and max_decoded_frames must be >= 1")
    if not 1 <= jpeg_quality <= 95:
        raise ValueError(f"jpeg_quality must be in 1..95, got {jpeg_quality!r}")
    caps = (min(frames_per_clip, max_frames), jpeg_quality, max_decoded_frames, max_bytes)
    return _iter_frames(row, *caps)


def _iter_frames(
    row: dict[str, Any], count: int, quality: int, max_decoded: int, max_bytes: int | None
) -> Iterator[dict[str, Any]]:
    """The generator behind :func:`sample_frames`."""
    av = _import_av()
    data, name = _clip_input(row, max_bytes)
    with _open_container(av, data, name) as container:
        stream = container.streams.video[0]
        start, end = _time_range(row, container, stream)
        step = _frame_seconds(stream)
        span = (end - start) if end is not None else count * step
        targets = [start + (i + 0.5) * span / count for i in range(count)]
        picked = 0
        last: tuple[int, float, Any] | None = None
        for index, t, frame in _frames_in_range(av, container, name, start, end, max_decoded):
            taken = False
            while picked < count and targets[picked] < t + step / 2:
                picked, taken = picked + 1, True
            if taken:
                yield _frame_row(index, t, frame, quality)
            last = None if taken else (index, t, frame)
        if last is None and picked == 0:
            raise EmptyInputError.for_input(name, f"no frames in [{start:.3f}, {end}) s")
        if last is not None and picked < count:
            yield _frame_row(*last, quality)


def _frames_in_range(
    av: Any, container: Any, name: str, start: float, end: float | None, max_decoded: int
) -> Iterator[tuple[int, float, Any]]:
    """``(index, time, frame)`` for each decoded frame in ``[start, end)``, index from 0."""
    step = _frame_seconds(container.streams.video[0])
    index = 0
    try:
        for decoded, frame in enumerate(container.decode(video=0), start=1):
            if decoded > max_decoded:
                cause = f"more than max_decoded_frames={max_decoded} frames to decode"
                raise OversizedInputError.for_input(name, cause)
            t = float(frame.time) if frame.time is not None else start + (decoded - 1) * step
            if t < start - _EPS:
                continue
            if end is not None and t >= end - _EPS:
                break
            yield index, t, frame
            index += 1
    except av.error.FFmpegError as exc:
        raise CorruptInputError.for_input(name, f"decoding failed ({exc})") from exc


def _frame_row(index: int, t: float, frame: Any, quality: int) -> dict[str, Any]:
    try:
        image = frame.to_image()
    except ImportError as exc:
        raise ImportError(f"JPEG frames need pillow: {_INSTALL_HINT}") from exc
    out = io.BytesIO()
    image.save(out, format="JPEG", quality=quality)
    return {
        "frame_index": index,
        "t_s": round(t, 6),
        "jpeg": out.getvalue(),
        "width": int(frame.width),
        "height": int(frame.height),
    }


# ------------------------------------------------------------------------------------- clip_audio


def clip_audio(
    row: dict[str, Any], *, max_seconds: float | None = 600, max_bytes: int | None = 2 * _GiB
) -> dict[str, Any]:
    """Row-wise map: the row plus statistics of its audio in ``[start_s, end_s)``.

    Reads ``row["clip"]`` (or ``row["bytes"]``) and ``row.get("start_s")``/``row.get("end_s")``.
    Returns a new dict: every key of ``row`` plus

    * ``audio_sample_rate`` (int) and ``audio_channels`` (int), None without audio;
    * ``audio_seconds`` (float): decoded audio in the range, 0.0 without audio;
    * ``audio_rms`` and ``audio_peak`` (float, full scale = 1.0), None without audio.

    Args:
        row: The clip row.
        max_seconds: Reject inputs with more audio than this (None: no cap).
        max_bytes: Reject larger inputs.

    Returns:
        The extended row.

    Raises:
        CorruptInputError: FFmpeg cannot decode the audio.
        OversizedInputError: More than ``max_seconds`` of audio.
        EmptyInputError, UnsupportedInputError, TruncatedInputError: As for :func:`split_clips`.

    Example:
        >>> from lineage_data.connectors.testing.corpus import make_video
        >>> clip = next(split_clips({"bytes": make_video(1, seed=0)}))
        >>> out = clip_audio(clip)
        >>> out["audio_sample_rate"], out["audio_channels"], round(out["audio_seconds"], 1)
        (16000, 1, 1.0)
    """
    av = _import_av()
    data, name = _clip_input(row, max_bytes)
    with _open_container(av, data, name, require_video=False) as container:
        if not container.streams.audio:
            stats: dict[str, Any] = {"audio_sample_rate": None, "audio_channels": None}
            return {**row, **stats, "audio_seconds": 0.0, "audio_rms": None, "audio_peak": None}
        stream = container.streams.audio[0]
        start, end = _time_range(row, container, stream)
        return {**row, **_audio_stats(av, container, name, start, end, max_seconds)}


def _audio_stats(
    av: Any, container: Any, name: str, start: float, end: float | None, cap: float | None
) -> dict[str, Any]:
    """Decode the first audio stream over ``[start, end)`` and measure it."""
    import numpy as np

    stream = container.streams.audio[0]
    resampler = av.AudioResampler(format="fltp")
    samples, squares, peak = 0, 0.0, 0.0
    rate, channels = int(stream.rate), int(stream.codec_context.channels)
    try:
        for frame in container.decode(stream):
            t = float(frame.time) if frame.time is not None else start
            for converted in resampler.resample(frame):
                values = _trim(converted.to_ndarray().astype(np.float64), t, rate, start, end)
                samples += values.shape[1]
                squares += float(np.square(values).sum())
                peak = max(peak, float(np.abs(values).max(initial=0.0)))
            if cap is not None and samples > cap * rate:
                raise OversizedInputError.for_input(name, f"more than max_seconds={cap} s of audio")
    except av.error.FFmpegError as exc:
        raise CorruptInputError.for_input(name, f"audio decoding failed ({exc})") from exc
    total = samples * channels
    return {
        "audio_sample_rate": rate,
        "audio_channels": channels,
        "audio_seconds": samples / rate if rate else 0.0,
        "audio_rms": math.sqrt(squares / total) if total else 0.0,
        "audio_peak": peak,
    }


def _trim(values: Any, t: float, rate: int, start: float, end: float | None) -> Any:
    """The samples (columns) of ``values``, starting at ``t`` s, that lie in ``[start, end)``."""
    first = max(0, round((start - t) * rate))
    last = values.shape[1] if end is None else max(0, round((end - t) * rate))
    return values[:, first:last]


for _native in (split_clips, sample_frames, clip_audio):  # see CLIP_TIMEOUT_S
    setattr(_native, "default_timeout_s", CLIP_TIMEOUT_S)  # noqa: B010 - a function attribute
