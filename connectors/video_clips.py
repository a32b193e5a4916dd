"""Reading one clip of :func:`~lineage_data.connectors.video.split_clips` (or a whole video).

:func:`sample_frames` and :func:`clip_audio` are described with the connector, in
:mod:`lineage_data.connectors.video`, and importable from there.
"""

from __future__ import annotations

import bisect
import io
import math
from collections.abc import Iterator
from typing import Any

from lineage_data.connectors import _av
from lineage_data.connectors._av import CLIP_TIMEOUT_S
from lineage_data.connectors.errors import (
    CorruptInputError,
    EmptyInputError,
    OversizedInputError,
    input_name,
)

__all__ = ["clip_audio", "sample_frames"]


def _clip_input(row: dict[str, Any], max_bytes: int | None) -> tuple[bytes, str]:
    """The bytes to decode (``clip``, else ``bytes``) and the name to use in errors."""
    key = "clip" if "clip" in row else "bytes"
    name = input_name(row, kind="video")
    if "clip_index" in row:
        name = f"{name} clip {row['clip_index']}"
    return _av.checked_bytes(row, key, name, max_bytes), name


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
    max_bytes: int | None = 2 * _av.GiB,
) -> Iterator[dict[str, Any]]:
    """Expand one clip row into evenly spaced frames, in time order, as JPEG.

    Reads ``clip`` (else ``bytes``, a whole video) over ``[start_s, end_s)`` (default: all of it).
    Yields, in time order::

        {"frame_index": j, "t_s": float, "jpeg": bytes, "width": int, "height": int}

    The range is cut into ``min(frames_per_clip, max_frames)`` equal slots and the frame nearest
    each slot's middle is taken, each frame at most once. ``frame_index`` is the frame's position
    among the clip's own frames and ``t_s`` its source time.

    Args:
        row: The clip row.
        frames_per_clip: How many frames to sample.
        max_frames: Hard cap on frames yielded per row, whatever ``frames_per_clip`` says.
        jpeg_quality: JPEG quality, 1..95.
        max_decoded_frames: Reject a clip once this many frames were decoded (lead-in included).
        max_bytes: Reject larger clips.

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
    av = _av.import_av()
    data, name = _clip_input(row, max_bytes)
    with _av.open_container(av, data, name) as container:
        stream = container.streams.video[0]
        start, end = _time_range(row, container, stream)
        step = _av.frame_seconds(stream)
        span = (end - start) if end is not None else count * step
        targets = [start + (i + 0.5) * span / count for i in range(count)]
        picked = 0  # targets[:picked] have their frame
        last: tuple[int, float, Any] | None = None
        for index, t, frame in _frames_in_range(av, container, name, start, end, max_decoded):
            reached = bisect.bisect_left(targets, t + step / 2, lo=picked)
            if reached > picked:
                yield _frame_row(index, t, frame, quality)
            last = None if reached > picked else (index, t, frame)
            picked = reached
        if last is None and picked == 0:
            raise EmptyInputError.for_input(name, f"no frames in [{start:.3f}, {end}) s")
        if last is not None and picked < count:
            yield _frame_row(*last, quality)


def _frames_in_range(
    av: Any, container: Any, name: str, start: float, end: float | None, max_decoded: int
) -> Iterator[tuple[int, float, Any]]:
    """``(index, time, frame)`` for each decoded frame in ``[start, end)``, index from 0."""
    step = _av.frame_seconds(container.streams.video[0])
    index = 0
    try:
        for decoded, frame in enumerate(container.decode(video=0), start=1):
            if decoded > max_decoded:
                cause = f"more than max_decoded_frames={max_decoded} frames to decode"
                raise OversizedInputError.for_input(name, cause)
            t = float(frame.time) if frame.time is not None else start + (decoded - 1) * step
            if t < start - _av.EPS:
                continue
            if end is not None and t >= end - _av.EPS:
                break
            yield index, t, frame
            index += 1
    except av.error.FFmpegError as exc:
        raise CorruptInputError.for_input(name, f"decoding failed ({exc})") from exc


def _frame_row(index: int, t: float, frame: Any, quality: int) -> dict[str, Any]:
    try:
        image = frame.to_image()
    except ImportError as exc:
        raise ImportError(f"JPEG frames need pillow: {_av.INSTALL_HINT}") from exc
    out = io.BytesIO()
    image.save(out, format="JPEG", quality=quality)
    return {
        "frame_index": index,
        "t_s": round(t, 6),
        "jpeg": out.getvalue(),
        "width": int(frame.width),
        "height": int(frame.height),
    }


def clip_audio(
    row: dict[str, Any], *, max_seconds: float | None = 600, max_bytes: int | None = 2 * _av.GiB
) -> dict[str, Any]:
    """Row-wise map: the row plus statistics of its audio in ``[start_s, end_s)``.

    Reads ``clip`` (else ``bytes``). Returns a new dict: every key of ``row`` plus

    * ``audio_sample_rate`` (int) and ``audio_channels`` (int), None without audio;
    * ``audio_seconds`` (float): decoded audio in the range, 0.0 without audio;
    * ``audio_rms`` and ``audio_peak`` (float, full scale = 1.0), None without audio.

    Args:
        row: The clip row.
        max_seconds: Reject inputs with more audio than this (None: no cap).
        max_bytes: Reject larger inputs.

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
    av = _av.import_av()
    data, name = _clip_input(row, max_bytes)
    with _av.open_container(av, data, name, require_video=False) as container:
        if not container.streams.audio:
            stats: dict[str, Any] = {"audio_sample_rate": None, "audio_channels": None}
            return {**row, **stats, "audio_seconds": 0.0, "audio_rms": None, "audio_peak": None}
        start, end = _time_range(row, container, container.streams.audio[0])
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
            # The samples that lie in [start, end): the frame's first one is at t.
            first = max(0, round((start - t) * rate))
            last = None if end is None else max(0, round((end - t) * rate))
            for converted in resampler.resample(frame):
                values = converted.to_ndarray().astype(np.float64)[:, first:last]
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


for _native in (sample_frames, clip_audio):  # see CLIP_TIMEOUT_S
    setattr(_native, "default_timeout_s", CLIP_TIMEOUT_S)  # noqa: B010 - a function attribute
