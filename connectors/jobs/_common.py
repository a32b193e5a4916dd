"""Shared command-line plumbing of the example pipelines: options, Ray start-up, shard output."""

from __future__ import annotations

import argparse
from typing import Any


def common_args(parser: argparse.ArgumentParser) -> None:
    """Options every example takes."""
    parser.add_argument(
        "--input", required=True, help="files, a folder or a prefix (local or s3://)"
    )
    parser.add_argument("--output", required=True, help="shard folder (local or s3://)")
    parser.add_argument(
        "--address", default=None, help="Ray cluster address (default: RAY_ADDRESS or local)"
    )
    parser.add_argument("--concurrency", type=int, default=2, help="actors of the model stage")
    parser.add_argument("--num-gpus", type=float, default=0, help="GPUs per model actor (0: CPU)")
    parser.add_argument("--batch-size", type=int, default=16, help="rows per model batch")
    parser.add_argument("--rows-per-shard", type=int, default=500)
    parser.add_argument(
        "--create-bucket", action="store_true", help="create a missing S3 output bucket"
    )


def model_args(concurrency: int, num_gpus: float, batch_size: int) -> dict[str, Any]:
    """The model stage's ``map_batches`` arguments: an actor pool of ``concurrency`` actors."""
    from ray.data import ActorPoolStrategy

    args: dict[str, Any] = {
        "compute": ActorPoolStrategy(size=concurrency),
        "batch_size": batch_size,
        "num_cpus": 0.25,
    }
    if num_gpus:
        args["num_gpus"] = num_gpus
    return args


def start_ray(address: str | None) -> None:
    """Connect to a cluster, or start local Ray (``ld.init`` sizes it for small machines)."""
    import lineage_data as ld

    ld.init(address, include_dashboard=False)


def write_and_report(ds: Any, args: argparse.Namespace) -> int:
    """Write ``ds`` as shards to ``args.output``, print the run report and where the shards are."""
    from connectors.shards import write_shards

    result = write_shards(
        ds, args.output, rows_per_shard=args.rows_per_shard, create_bucket=args.create_bucket
    )
    if result.report is not None:  # None when a rerun found every root already committed
        print(result.report.summary())
    print(f"shards: {args.output}")
    return 0
