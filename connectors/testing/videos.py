"""Short synthetic MP4s: a moving pattern and a sine tone, encoded with PyAV.

Needs PyAV and numpy (``pip install 'lineage-data[video]'``), imported when a video is made, so
importing this module costs nothing. :mod:`.corpus` re-exports :func:`make_video`.
"""

from __future__ import annotations

import io
import random
from typing import Any

__all__ = ["make_video"]

_VIDEO_HINT = "pip install 'lineage-data[video]'"


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
