"""What the installed jobs share: options, a quiet Ray, the shard write and its summary."""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import logging
import os
import shlex
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from lineage_data.connectors.formats import FORMATS
from lineage_data.connectors.shards import DEFAULT_SHARD_INTERVAL_S


def common_args(parser: argparse.ArgumentParser) -> None:
    """Options every job takes: the input, the output, the model stage's pool, the shards."""
    parser.add_argument("input", help="input files: a folder, a file or a glob, local or s3://")
    parser.add_argument("output", help="shard folder, local or s3:// (a rerun resumes there)")
    parser.add_argument(
        "--address", default=None, help="Ray cluster address (default: RAY_ADDRESS, else local)"
    )
    parser.add_argument(
        "--concurrency", type=int, default=2, help="actors of the model stage (default 2)"
    )
    parser.add_argument(
        "--num-gpus", type=float, default=0, help="GPUs per model actor (default 0: CPU)"
    )
    parser.add_argument(
        "--batch-size", type=int, default=16, help="rows per model batch (default 16)"
    )
    parser.add_argument(
        "--rows-per-shard", type=int, default=500, help="most rows per shard (default 500)"
    )
    parser.add_argument(
        "--shard-interval",
        type=float,
        default=DEFAULT_SHARD_INTERVAL_S,
        metavar="SECONDS",
        help="commit a shard this long after its first row at the latest "
        f"(default {DEFAULT_SHARD_INTERVAL_S:g})",
    )
    parser.add_argument(
        "--format",
        choices=FORMATS,
        default="parquet",
        help="shard files: Parquet (default), WebDataset tar (a sample per document), "
        "gzip JSON lines of Dolma-style documents, or a Lance dataset (local output only)",
    )
    parser.add_argument(
        "--retry-failed", action="store_true", help="run the dead-lettered inputs again"
    )
    parser.add_argument(
        "--create-bucket", action="store_true", help="create a missing S3 output bucket"
    )
    parser.add_argument(
        "--verbose", action="store_true", help="show Ray's own log lines and progress bars"
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


def require(extra: str, modules: Sequence[str]) -> None:
    """Exit with one line naming the extra to install when a module it brings is missing.

    Checked before Ray starts: a missing package found in a Ray worker is a page of tracebacks.
    """
    if missing := [m for m in modules if importlib.util.find_spec(m) is None]:
        raise SystemExit(
            f"lineage-data: this job needs {', '.join(missing)}: "
            f"pip install 'lineage-data[{extra}]'"
        )


def quiet(verbose: bool) -> None:
    """Ray's own chatter off unless ``verbose``: its INFO lines, notices, bars and C++ log lines.

    Ray's C++ core (a ``core_worker.cc`` ERROR line per restartable actor pool) reads its level
    from ``RAY_BACKEND_LOG_LEVEL`` when it starts. Our own progress line stays.
    """
    if verbose:
        return
    os.environ.setdefault("RAY_BACKEND_LOG_LEVEL", "fatal")
    os.environ.setdefault("RAY_DEDUP_LOGS", "1")
    os.environ.setdefault("LINEAGE_DATA_PROGRESS", "1")
    os.environ.setdefault("LINEAGE_DATA_PROGRESS_INTERVAL_S", "5")  # a log too sees a job move
    for name in ("ray", "ray.data", "ray.serve", "ray.util"):
        logging.getLogger(name).setLevel(logging.ERROR)


def start_ray(address: str | None, *, verbose: bool = False) -> None:
    """Connect to a cluster, or start local Ray (``ld.init`` sizes it for small machines)."""
    import ray

    import lineage_data as ld

    quiet(verbose)
    if verbose:
        ld.init(address, include_dashboard=False)
        return
    with _stderr_kept_unless_failed():  # Ray's C++ core says at start that we set its log level
        import ray.data  # (its import's output held back too)

        ld.init(address, include_dashboard=False, log_to_driver=False, logging_level=logging.ERROR)
    ray.data.DataContext.get_current().enable_progress_bars = False
    for name in ("ray", "ray.data"):  # ray.init added its handlers: keep them quiet too
        logging.getLogger(name).setLevel(logging.ERROR)


@contextlib.contextmanager
def _stderr_kept_unless_failed() -> Iterator[None]:
    """What the process writes to fd 2 in the block is dropped, or printed if the block raises.

    Ray's C++ core writes to fd 2 itself, around ``sys.stderr``: only the descriptor holds it back.
    """
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as held:
        os.dup2(held.fileno(), 2)
        try:
            yield
        except BaseException:
            os.dup2(saved, 2)
            held.seek(0)
            sys.stderr.write(held.read().decode(errors="replace"))
            raise
        finally:
            os.dup2(saved, 2)
            os.close(saved)


def run_job(
    args: argparse.Namespace,
    needs: tuple[str, Sequence[str]],
    plan: Callable[[], Any],
    *,
    unit: str,
) -> int:
    """A job's command: the extra checked, Ray started quietly, the plan written, one summary.

    ``needs`` is the extra and the modules it brings; ``plan()`` builds the lineage plan once Ray is up.
    """
    from lineage_data.connectors.shards import write_shards

    require(*needs)
    if args.input.startswith("s3://") or args.output.startswith("s3://"):
        require("s3", ["s3fs"])
    start_ray(args.address, verbose=args.verbose)
    result = write_shards(
        plan(),
        args.output,
        rows_per_shard=args.rows_per_shard,
        max_shard_interval_s=args.shard_interval,
        retry_failed=args.retry_failed,
        create_bucket=args.create_bucket,
        format=args.format,
        source=args.input,
    )
    argv = getattr(args, "argv", None) or sys.argv[1:]
    print(summary(result, args.output, unit=unit, argv=argv), file=sys.stderr)
    return 0


def summary(result: Any, output: str, *, unit: str, argv: Sequence[str]) -> str:
    """The end of a job: documents done and failed by cause, rate, where things are, how to resume."""
    report = result.report
    lines = []
    if report is None or report.parents.height == 0:
        lines.append(f"nothing to do: all {result.skipped_roots} inputs are committed in {output}")
    else:
        parents = report.parents
        failed = parents.filter(parents["outcome"] != "PRESENT")
        lines.append(
            f"done: {parents.height - failed.height} documents written, {failed.height} failed, "
            f"in {report.wall_s:.1f} s"
            + (f" ({result.skipped_roots} committed before)" if result.skipped_roots else "")
        )
        children = [c for c in report.stages["children"].to_list() if c is not None]
        if children and report.wall_s > 0:
            lines.append(f"{unit}: {children[0]} ({children[0] / report.wall_s:.1f}/s)")
        if failed.height:
            by_cause = failed.group_by("cause").len().sort("len", descending=True)
            for row in by_cause.head(10).iter_rows(named=True):
                lines.append(f"  failed {row['len']:>4}  {row['cause']}")
    shards = output.rstrip("/")
    lines.append(f"shards: {shards} ({len(result.shards)} new, {result.rows} rows)")
    lines.append(f"dead letters: {shards}/_dead_letter ({result.dead_letter_rows} new)")
    lines.append(f"resume or rerun: {shlex.join(['lineage-data', *argv])}")
    return "\n".join(lines)
