"""``lineage-data video IN OUT``: videos -> clips -> frames -> captions -> clips -> videos -> shards.

    lineage-data video s3://corpus/videos/ s3://corpus/shards/video

The caption stage is :class:`lineage_data.connectors.vllm.VllmStage` over each sampled frame (``--model`` a local
vLLM model path; without it the CPU stand-in ``EchoLLM`` answers).
"""

from __future__ import annotations

import argparse
import functools
from typing import Any

import lineage_data as ld
from lineage_data.connectors.jobs._common import common_args, model_args, run_job
from lineage_data.connectors.video import CLIP_TIMEOUT_S, sample_frames, split_clips

# What the video job reads from a folder (PyAV opens more; name them in a glob to read those).
VIDEO_EXTENSIONS = ("mp4", "mkv", "webm", "mov", "avi", "m4v", "mpg", "mpeg", "ts")


def summarize_clip(clip: dict, frames: list[dict]) -> dict:
    """A clip row from its captioned frames, in time order."""
    return {
        "clip_index": clip["clip_index"],
        "start_s": clip["start_s"],
        "end_s": clip["end_s"],
        "captions": [f["caption"] for f in frames],
    }


def summarize_video(video: dict, clips: list[dict]) -> dict:
    """A video row from its clips, in time order."""
    return {
        "path": video["path"],
        "size": video["size"],
        "clips": len(clips),
        "seconds": max((c["end_s"] for c in clips), default=0.0),
        "clip_starts": [c["start_s"] for c in clips],
        "captions": [c["captions"] for c in clips],
    }


def build(
    input_path: str | list[str],
    *,
    model: str | None = None,
    concurrency: int = 2,
    num_gpus: float = 0,
    batch_size: int = 16,
    clip_seconds: float = 2.0,
    frames_per_clip: int = 2,
    filesystem: Any = None,
) -> ld.LineageDataset:
    """The lineage plan (nothing runs until it is consumed)."""
    from lineage_data.connectors.echo_llm import EchoLLM
    from lineage_data.connectors.vllm import VllmStage

    return (
        ld.read_files(input_path, filesystem=filesystem, file_extensions=VIDEO_EXTENSIONS)
        .expand_lineage(
            functools.partial(split_clips, clip_seconds=clip_seconds),
            name="clips",
            timeout_s=CLIP_TIMEOUT_S,
        )
        .expand_lineage(
            functools.partial(sample_frames, frames_per_clip=frames_per_clip),
            name="frames",
            timeout_s=CLIP_TIMEOUT_S,
        )
        .map_batches(
            VllmStage,
            name="caption",
            fn_constructor_kwargs={
                "model": model or "echo",
                "prompt_template": "Describe the frame at {t_s:.1f}s.",
                "image_column": "jpeg",
                "text_columns": ("t_s",),
                "output_column": "caption",
                "llm_factory": None if model else EchoLLM,
            },
            **model_args(concurrency, num_gpus, batch_size),
        )
        .reduce_lineage(summarize_clip, name="clip")
        .reduce_lineage(summarize_video, name="video")
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The video job's options."""
    common_args(parser)
    parser.add_argument(
        "--model", default=None, help="vLLM model path (default: the CPU stand-in EchoLLM)"
    )
    parser.add_argument(
        "--clip-seconds", type=float, default=2.0, help="clip length in seconds (default 2)"
    )
    parser.add_argument(
        "--frames-per-clip", type=int, default=2, help="frames captioned per clip (default 2)"
    )


def run(args: argparse.Namespace) -> int:
    """The command: check the extras, start Ray quietly, write the shards, print the summary."""
    return run_job(
        args,
        ("video", ["av", "PIL"]),
        lambda: build(
            args.input,
            model=args.model,
            concurrency=args.concurrency,
            num_gpus=args.num_gpus,
            batch_size=args.batch_size,
            clip_seconds=args.clip_seconds,
            frames_per_clip=args.frames_per_clip,
        ),
        unit="clips",
    )
