"""Video connector: a video becomes ordered clips, a clip becomes sampled frames (PyAV).

:func:`split_clips` is an **expand** function (a video in, clips out), :func:`sample_frames` a
second-level **expand** (a clip in, JPEG frames out) and :func:`clip_audio` a row-wise **map**
(audio statistics); the video connector guide shows a plan.

A clip row's ``clip`` is a standalone Matroska file with the source's own packets and timestamps
(a stream copy: splitting costs a demux, not a decode). Decoding starts at a keyframe, so a clip
holds every group of pictures that overlaps ``[start_s, end_s)``, and :func:`sample_frames`
decodes frames outside that range only as references; a clip with both ends on keyframes (see
``snap_seconds``) has ``keyframe_aligned=True`` and holds exactly its own frames.

Needs ``pip install 'lineage-data[video]'`` (PyAV, and pillow for JPEG frames), imported when
first called; numpy (a Ray Data dependency) computes audio levels.
"""

from __future__ import annotations

import bisect
import io
import itertools
import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from lineage_data.connectors import _av
from lineage_data.connectors._av import CLIP_TIMEOUT_S, mp4_truncation
from lineage_data.connectors.errors import (
    CorruptInputError,
    EmptyInputError,
    TruncatedInputError,
    input_name,
)
from lineage_data.connectors.video_clips import clip_audio, sample_frames

__all__ = [
    "CLIP_TIMEOUT_S",
    "clip_audio",
    "clip_bounds",
    "mp4_truncation",
    "sample_frames",
    "split_clips",
]


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
    max_bytes: int | None = 2 * _av.GiB,
) -> Iterator[dict[str, Any]]:
    """Expand one video row (``bytes``, and ``path`` to name it in errors) into clips, in order.

    Yields, for clip ``i`` of ``n``::

        {"clip_index": i, "clip_count": n, "start_s": float, "end_s": float,
         "keyframe_aligned": bool, "has_audio": bool, "width": int, "height": int,
         "fps": float, "clip": bytes}

    ``start_s``/``end_s`` are seconds on the source's timeline; the clips tile the video from the
    first keyframe to the last frame. ``clip`` holds the video and first audio stream's packets
    that overlap ``[start_s, end_s)``. The whole source is demuxed (and held in memory) before the
    first clip, so every check below happens before any clip is in flight.

    Args:
        row: The input row, with ``bytes`` and optionally ``path``.
        clip_seconds: Nominal clip length.
        snap_seconds: How far a boundary may move to reach a keyframe (default ``clip_seconds/4``;
            0 disables snapping).
        max_seconds: Reject longer videos (None: no cap).
        max_bytes: Reject larger files (None: no cap).

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
    av = _av.import_av()
    name = input_name(row, kind="video")
    data = _av.checked_bytes(row, "bytes", name, max_bytes)
    with _av.open_container(av, data, name) as container:
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
    """Clip boundaries from ``keyframes[0]`` to ``end_s``: clip i is ``[bounds[i], bounds[i+1])``.

    A boundary every ``clip_seconds`` moves to the nearest keyframe at most ``snap`` seconds away
    (and after the previous one). A last piece shorter than ``clip_seconds / 4`` joins the one
    before. ``keyframes`` are sorted, in seconds.

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
        moved = min(near, key=lambda kf: abs(kf - nominal), default=nominal)
        if moved > bounds[-1] + _av.EPS:
            bounds.append(moved)
        k += 1
    bounds.append(end_s)
    return bounds


def _demux(av: Any, container: Any, name: str, max_seconds: float | None) -> _Demuxed:
    """Read every packet of the first video and audio streams, grouped for clipping."""
    video = container.streams.video[0]
    audio = container.streams.audio[0] if container.streams.audio else None
    declared = container.duration / 1_000_000 if container.duration else None
    _av.check_duration(name, declared, max_seconds)
    gops: list[_Gop] = []
    audio_packets: list[tuple[float, float, Any]] = []
    end_s = -math.inf
    streams = [video] if audio is None else [video, audio]
    try:
        for packet in container.demux(streams):
            t = _av.seconds(packet)
            if t is None or packet.size == 0:
                continue
            if packet.stream is audio:
                audio_packets.append((t, t + _av.packet_seconds(packet), packet))
                continue
            if packet.is_keyframe:
                gops.append(_Gop(start_s=t))
            if gops:  # packets before the first keyframe cannot be decoded: skip them
                gops[-1].packets.append(packet)
                end_s = max(end_s, t + (_av.packet_seconds(packet) or _av.frame_seconds(video)))
    except av.error.FFmpegError as exc:
        raise CorruptInputError.for_input(name, f"demuxing failed ({exc})") from exc
    if not gops:
        raise EmptyInputError.for_input(name, "the video stream has no decodable frames")
    for gop, following in itertools.pairwise(gops):
        gop.end_s = following.start_s
    gops[-1].end_s = end_s
    _check_complete(name, declared, end_s, audio_packets)
    _av.check_duration(name, end_s - gops[0].start_s, max_seconds)
    return _Demuxed(video, audio, gops, audio_packets, end_s)


def _fps(video: Any, demuxed: _Demuxed) -> float:
    rate = video.average_rate or video.guessed_rate
    if rate:
        return round(float(rate), 6)
    frames = sum(len(gop.packets) for gop in demuxed.gops)
    span = demuxed.end_s - demuxed.gops[0].start_s
    return round(frames / span, 6) if span > 0 else 0.0


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
    """A standalone Matroska file of the GOPs overlapping ``[start, end)``; whether it has audio."""
    gops = [g for g in demuxed.gops if g.start_s < end - _av.EPS and g.end_s > start + _av.EPS]
    # Audio packets overlapping the range: one packet may go to two clips; clip_audio trims.
    sound = [p for t, u, p in demuxed.audio_packets if t < end - _av.EPS and u > start + _av.EPS]
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


setattr(split_clips, "default_timeout_s", CLIP_TIMEOUT_S)  # noqa: B010 - see CLIP_TIMEOUT_S
