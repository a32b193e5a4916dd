"""lineage_data.connectors.video: clips tile the video, clips stand alone, frames and audio decode."""

import io
import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

from lineage_data.connectors import errors
from lineage_data.connectors.testing.corpus import (
    BAD_FILE_ERRORS,
    bad_files,
    make_pdf,
    make_png,
    make_video,
)
from lineage_data.connectors.video import (
    clip_audio,
    clip_bounds,
    mp4_truncation,
    sample_frames,
    split_clips,
)

FPS = 12


@pytest.fixture(scope="module")
def video():
    """5 s, 12 fps, a keyframe every second, AAC audio."""
    return make_video(5, fps=FPS, seed=1)


@pytest.fixture(scope="module")
def one_gop_video():
    """5 s with a single keyframe and no audio: no boundary can be keyframe-aligned."""
    return make_video(5, fps=FPS, seed=2, audio=False, keyframe_interval_s=100)


@pytest.fixture(scope="module")
def clips(video):
    return list(split_clips({"bytes": video, "path": "v.mp4"}))


def test_clips_tile_the_duration_in_order(clips):
    assert [c["clip_index"] for c in clips] == [0, 1, 2]
    assert {c["clip_count"] for c in clips} == {3}
    assert clips[0]["start_s"] == 0.0
    assert clips[-1]["end_s"] == pytest.approx(5.0)
    for before, after in itertools.pairwise(clips):
        assert before["end_s"] == after["start_s"]
    assert [(c["start_s"], c["end_s"]) for c in clips] == [(0.0, 2.0), (2.0, 4.0), (4.0, 5.0)]


def test_clip_metadata(clips):
    for clip in clips:
        assert (clip["width"], clip["height"], clip["fps"]) == (64, 48, 12.0)
        assert clip["has_audio"] is True
        assert clip["keyframe_aligned"] is True
        assert clip["clip"][:4] == b"\x1aE\xdf\xa3"  # a Matroska file


def test_every_frame_lands_in_exactly_one_clip(clips):
    frames = [list(sample_frames(c, frames_per_clip=1000, max_frames=1000)) for c in clips]
    assert [len(f) for f in frames] == [24, 24, 12]
    times = [f["t_s"] for clip_frames in frames for f in clip_frames]
    assert times == sorted(times)
    assert len(set(times)) == 5 * FPS
    for clip, clip_frames in zip(clips, frames, strict=True):
        assert [f["frame_index"] for f in clip_frames] == list(range(len(clip_frames)))
        assert all(clip["start_s"] <= f["t_s"] < clip["end_s"] for f in clip_frames)


def test_unaligned_clips_carry_a_lead_in_but_yield_only_their_frames(one_gop_video):
    clips = list(split_clips({"bytes": one_gop_video}))
    assert [c["keyframe_aligned"] for c in clips] == [False, False, False]
    assert {c["has_audio"] for c in clips} == {False}
    counts = [len(list(sample_frames(c, frames_per_clip=100))) for c in clips]
    assert counts == [24, 24, 12]
    second = list(sample_frames(clips[1], frames_per_clip=100))
    assert (second[0]["frame_index"], second[0]["t_s"]) == (0, 2.0)


def test_sampled_frames_are_jpegs_spread_over_the_clip(clips):
    frames = list(sample_frames(clips[1], frames_per_clip=4, jpeg_quality=70))
    assert [f["frame_index"] for f in frames] == [3, 9, 15, 21]
    assert [f["t_s"] for f in frames] == pytest.approx([2.25, 2.75, 3.25, 3.75], abs=0.001)
    for frame in frames:
        image = Image.open(io.BytesIO(frame["jpeg"]))
        assert (image.format, image.size) == ("JPEG", (64, 48))
        assert (frame["width"], frame["height"]) == (64, 48)


def test_max_frames_caps_the_sample(clips):
    assert len(list(sample_frames(clips[0], frames_per_clip=10, max_frames=3))) == 3


def test_sample_frames_on_a_whole_video(video):
    frames = list(sample_frames({"bytes": video}, frames_per_clip=5))
    assert [f["t_s"] for f in frames] == pytest.approx([0.5, 1.5, 2.5, 3.5, 4.5], abs=0.05)


def test_decoded_frame_cap(clips):
    with pytest.raises(errors.OversizedInputError, match="max_decoded_frames=5"):
        list(sample_frames(clips[0], max_decoded_frames=5))


def test_clip_audio_measures_the_clip_range(clips):
    out = clip_audio(clips[0])
    assert {k: out[k] for k in clips[0]} == clips[0]  # the input row is kept
    assert (out["audio_sample_rate"], out["audio_channels"]) == (16_000, 1)
    assert out["audio_seconds"] == pytest.approx(2.0, abs=0.07)
    assert out["audio_rms"] == pytest.approx(0.3 / 2**0.5, abs=0.03)  # a 0.3-amplitude sine
    assert 0.25 < out["audio_peak"] <= 0.4
    assert clip_audio(clips[2])["audio_seconds"] == pytest.approx(1.0, abs=0.07)


def test_clip_audio_without_audio(one_gop_video):
    out = clip_audio(next(split_clips({"bytes": one_gop_video})))
    assert out["audio_sample_rate"] is None
    assert out["audio_rms"] is None
    assert out["audio_seconds"] == 0.0


@pytest.mark.parametrize("name", [n for n in BAD_FILE_ERRORS if n.endswith(".mp4")])
def test_every_bad_video_raises_its_typed_error(name):
    with pytest.raises(BAD_FILE_ERRORS[name], match=f"^videos/{name}: "):
        list(split_clips({"bytes": bad_files()[name], "path": f"videos/{name}"}))


@pytest.mark.parametrize(
    ("data", "looks_like"), [(make_png(), "PNG image"), (make_pdf(1), "PDF document")]
)
def test_other_file_types_are_unsupported(data, looks_like):
    with pytest.raises(errors.UnsupportedInputError, match=looks_like):
        list(split_clips({"bytes": data}))


@settings(max_examples=25, deadline=None)
@given(cut=st.floats(0.05, 0.995))
def test_any_truncated_mp4_is_rejected(video, cut):
    data = video[: max(16, int(len(video) * cut))]
    assert mp4_truncation(data) is not None
    with pytest.raises(errors.TruncatedInputError):
        list(split_clips({"bytes": data}))


def test_caps_on_seconds_and_bytes(video):
    with pytest.raises(errors.OversizedInputError, match="max_seconds=4"):
        list(split_clips({"bytes": video}, max_seconds=4))
    with pytest.raises(errors.OversizedInputError, match="max_bytes=1000"):
        next(split_clips({"bytes": video}, max_bytes=1000))


def test_bad_options():
    with pytest.raises(ValueError):
        split_clips({"bytes": b""}, clip_seconds=0)
    with pytest.raises(ValueError):
        sample_frames({"bytes": b""}, frames_per_clip=0)
    with pytest.raises(ValueError):
        sample_frames({"bytes": b""}, jpeg_quality=100)


def test_clip_bounds_snap_to_nearby_keyframes():
    keyframes = [0.0, 1.5, 3.1, 4.5, 7.0]
    assert clip_bounds(keyframes, 8.0, clip_seconds=2, snap=0.5) == [0.0, 1.5, 4.5, 6.0, 8.0]
    assert clip_bounds(keyframes, 8.0, clip_seconds=2, snap=0) == [0.0, 2.0, 4.0, 6.0, 8.0]
    assert clip_bounds([0.0], 0.1, clip_seconds=2, snap=0.5) == [0.0, 0.1]


@given(
    gaps=st.lists(st.floats(0.05, 5), min_size=1, max_size=30),
    tail=st.floats(0.01, 5),
    clip_seconds=st.floats(0.2, 4),
    snap_share=st.floats(0, 0.5),
)
def test_clip_bounds_tile_the_video(gaps, tail, clip_seconds, snap_share):
    keyframes = list(itertools.accumulate([0.0, *gaps[:-1]]))
    end = keyframes[-1] + tail
    snap = snap_share * clip_seconds
    bounds = clip_bounds(keyframes, end, clip_seconds=clip_seconds, snap=snap)
    assert bounds[0] == 0.0
    assert bounds[-1] == end
    assert all(a < b for a, b in itertools.pairwise(bounds))
    for bound in bounds[1:-1]:
        off_grid = abs(bound - round(bound / clip_seconds) * clip_seconds)
        assert off_grid <= (snap if bound in keyframes else 0) + 1e-9


def _pixels(data):
    import av

    with av.open(io.BytesIO(data)) as container:
        stream = container.streams.video[0]
        stream.codec_context.thread_count = 1  # one decoding thread: nothing depends on scheduling
        return [frame.to_ndarray(format="rgb24").tobytes() for frame in container.decode(stream)]


def _distance(a, b):
    """Per frame, the mean absolute difference of two decodings' pixels (0-255)."""
    import numpy as np

    assert len(a) == len(b)
    return [
        float(np.abs(np.frombuffer(x, np.uint8).astype(int) - np.frombuffer(y, np.uint8)).mean())
        for x, y in zip(a, b, strict=True)
    ]


def test_make_video_is_deterministic_per_seed():
    # Equal in almost every run; x264 gave a frame a few levels apart in ~1 of 300 encodes while
    # other processes loaded the cores (measured), so equal seeds are compared within 5 levels.
    same = _distance(_pixels(make_video(1, seed=5)), _pixels(make_video(1, seed=5)))
    other = _distance(_pixels(make_video(1, seed=5)), _pixels(make_video(1, seed=6)))
    assert max(same) < 5.0
    assert min(other) > 10.0  # another seed: other colours and motion (31-58 levels apart)
