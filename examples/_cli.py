"""Shared command-line plumbing of the example pipelines: Ray start-up and S3 filesystems."""

from __future__ import annotations

import argparse
import os
from typing import Any


def common_args(parser: argparse.ArgumentParser) -> None:
    """Options every example takes."""
    parser.add_argument("--input", required=True, help="files, a folder or a prefix (local or s3://)")
    parser.add_argument("--output", required=True, help="shard folder (local or s3://)")
    parser.add_argument("--address", default=None, help="Ray cluster address (default: RAY_ADDRESS or local)")
    parser.add_argument("--concurrency", type=int, default=2, help="actors of the model stage")
    parser.add_argument("--num-gpus", type=float, default=0, help="GPUs per model actor (0: CPU)")
    parser.add_argument("--batch-size", type=int, default=16, help="rows per model batch")
    parser.add_argument("--rows-per-shard", type=int, default=500)


def start_ray(address: str | None) -> None:
    """Connect to a cluster, or start local Ray with logical resources that suit small machines.

    On a laptop, fractional-CPU actor pools beside 1-CPU task steps can starve each other, so local
    Ray gets at least 8 logical CPUs.
    """
    import lineage_data as ld

    address = address or os.environ.get("RAY_ADDRESS")
    if address:
        ld.init(address)
    else:
        ld.init(num_cpus=max(8, 2 * (os.cpu_count() or 1)), include_dashboard=False)


def filesystem(path: str) -> Any:
    """The fsspec filesystem for ``path`` (S3 settings from the standard AWS_* variables)."""
    from connectors.s3 import resolve_filesystem

    return resolve_filesystem(path)[0]


def write_and_report(ds: Any, args: argparse.Namespace) -> int:
    """Write ``ds`` as shards to ``args.output``, print the run report and where the shards are."""
    from connectors.shards import write_shards

    result = write_shards(ds, args.output, rows_per_shard=args.rows_per_shard, filesystem=filesystem(args.output))
    print(result.report.summary())
    print(f"shards: {args.output}")
    return 0
