"""Your own video pipeline in a page: clips, frames, a captioner per batch, two reduces, shards.

    python examples/video_to_shards.py INPUT OUTPUT        # or: lineage-data run examples/video_to_shards.py INPUT OUTPUT

The installed job ``lineage-data video`` (:mod:`lineage_data.connectors.jobs.video`) does this with a vLLM model
and more options; here the "captioner" is a stand-in that names each frame's size and time.
"""

from __future__ import annotations

import sys

from ray.data import ActorPoolStrategy

import lineage_data as ld
from lineage_data.connectors.shards import write_shards
from lineage_data.connectors.video import sample_frames, split_clips


class Caption:
    """A stand-in for a model: one caption per frame (replace with your model's batch call)."""

    def __call__(self, batch: dict) -> dict:
        return {
            "caption": [
                f"{len(j)} bytes at {t:.1f}s"
                for j, t in zip(batch["jpeg"], batch["t_s"], strict=True)
            ]
        }


def main(input_path: str, output: str) -> None:
    ld.init(include_dashboard=False)
    videos = (
        ld.read_files(input_path, file_extensions=["mp4", "mkv", "webm", "mov"])
        .expand_lineage(split_clips, name="clips")
        .expand_lineage(sample_frames, name="frames")
        .map_batches(
            Caption, name="caption", batch_size=16, compute=ActorPoolStrategy(size=2), num_cpus=0.25
        )
        .reduce_lineage(
            lambda clip, frames: {"captions": [f["caption"] for f in frames]}, name="clip"
        )
        .reduce_lineage(
            lambda video, clips: {"clips": len(clips), "captions": [c["captions"] for c in clips]},
            name="video",
        )
    )
    result = write_shards(videos, output)
    print(result.report.summary())
    print(f"shards: {output}")


if __name__ == "__main__":
    main(*sys.argv[1:3])
