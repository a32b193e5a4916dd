"""``make demo``: the main job end to end on this machine, then a report.

Starts a local S3 server (SeaweedFS on loopback, with keys that botocore reads from the ``AWS_*``
variables, as the Ray workers do) and local Ray, generates a small long-tailed PDF corpus, a few
short videos with some bad files, and a few scanned (image-only) PDFs, uploads them, runs the
example pipelines into Parquet shards on that S3 (PDF text layer, video, and OCR with a real model:
RapidOCR's PP-OCRv4), prints the report, and stops what it started. Its last two lines are ``shards: <uri>``
and ``parents: <N> committed, <M> failed``.

    python -m examples.demo [--pdfs 24] [--videos 4] [--bad 9] [--scans 3] [--workdir demo_out]
                            [--format parquet|webdataset|jsonl]
"""

from __future__ import annotations

import argparse
import os
import pathlib
import sys
import time

from lineage_data.connectors.formats import FORMATS

BUCKET = "corpus"


def _upload(args) -> dict:
    from lineage_data.connectors.testing.corpus import write_corpus, write_scanned_corpus

    scans = (
        write_scanned_corpus(
            f"s3://{BUCKET}/input",
            n_pdfs=args.scans,
            seed=args.seed,
            max_pages=3,
            mean_pages=2,
            dpi=100,  # scans at 72 dpi lose word spaces in OCR: word similarity 0.929 vs 0.948 at 100 (bench/README.md)
            lines=(2, 5),
        )
        if args.scans
        else {"files": []}
    )
    manifest = write_corpus(
        f"s3://{BUCKET}/input",
        n_pdfs=args.pdfs,
        n_bad=args.bad,
        n_videos=args.videos,
        seed=args.seed,
        max_pages=args.max_pages,
        mean_pages=args.mean_pages,
    )
    manifest["files"] += scans["files"]
    return manifest


def _read_back(out: str, fmt: str) -> None:
    """What a reader of ``out`` finds: committed shard rows and dead letters, from the manifest."""
    from lineage_data.connectors.shards import read_dead_letter, read_manifest, read_shards

    if fmt == "parquet":
        rows = read_shards(out).num_rows
    else:  # tar and JSONL shards are read by their own libraries; the manifest lists their roots
        rows = sum(len(entry.roots) for entry in read_manifest(out).shards)
    print(
        f"read back from {out}: {rows} {fmt} documents, {read_dead_letter(out).num_rows} dead letters"
    )


def _run(args) -> tuple[int, int]:
    from lineage_data.connectors.jobs import pdf, video
    from lineage_data.connectors.jobs._common import start_ray
    from lineage_data.connectors.shards import read_manifest, write_shards

    start_ray(None, verbose=args.verbose)
    inputs = f"s3://{BUCKET}/input"  # s3fs finds the server and the keys in the AWS_* variables
    jobs = [
        (
            "pdf",
            pdf.build([f"{inputs}/pdfs/", f"{inputs}/bad/*.pdf"], concurrency=2, batch_size=16),
        )
    ]
    if args.scans:
        ocr = pdf.build(f"{inputs}/scans/", stage="ocr", concurrency=1, batch_size=16)
        jobs.append(("ocr", ocr))
    if args.videos:
        jobs.append(
            (
                "video",
                video.build(
                    [f"{inputs}/videos/", f"{inputs}/bad/*.mp4"], concurrency=2, batch_size=16
                ),
            )
        )
    committed = failed = 0
    for name, ds in jobs:
        out = f"s3://{BUCKET}/shards/{name}"
        started = time.time()
        result = write_shards(
            ds,
            out,
            rows_per_shard=args.rows_per_shard,
            max_shard_interval_s=args.shard_interval,
            format=args.format,
        )
        print(
            f"\n== {name}: {result.rows} rows in {len(result.shards)} shard(s), "
            f"{result.dead_letter_rows} dead letter(s), {time.time() - started:.1f}s"
        )
        print(result.report.summary())
        _read_back(out, args.format)
        png = pathlib.Path(args.workdir) / f"{name}-timeline.png"
        firsts = [e.committed_at for e in read_manifest(out).shards if e.run_id == result.run_id]
        marks = {"first shard committed": min(firsts) - started} if firsts else {}
        result.report.plot_timeline(str(png), marks=marks)
        print(f"timeline: {png}")
        committed += result.rows
        failed += result.dead_letter_rows
    return committed, failed


def _mirror(server, workdir: pathlib.Path) -> pathlib.Path:
    """Copy the shards to local disk: the S3 server stops when the demo ends."""
    local = workdir / "shards"
    server.filesystem().get(f"{BUCKET}/shards", str(local), recursive=True)
    return local


def main(argv: list[str] | None = None) -> int:
    """Run the demo; non-zero exit when the counts disagree with the generated corpus."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pdfs", type=int, default=24)
    parser.add_argument("--videos", type=int, default=4)
    parser.add_argument("--bad", type=int, default=9, help="bad files (up to 9: 6 PDFs, 3 videos)")
    parser.add_argument("--scans", type=int, default=3, help="scanned PDFs for the OCR job")
    parser.add_argument("--max-pages", type=int, default=120)
    parser.add_argument("--mean-pages", type=float, default=12)
    parser.add_argument("--rows-per-shard", type=int, default=500)
    parser.add_argument(
        "--shard-interval", type=float, default=1.0, help="seconds (see write_shards)"
    )
    parser.add_argument(
        "--format",
        choices=[f for f in FORMATS if f != "lance"],  # the demo writes to S3; Lance is local only
        default="parquet",
        help="shard format (see write_shards)",
    )
    parser.add_argument("--verbose", action="store_true", help="Ray's own log lines and bars")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workdir", default="demo_out")
    args = parser.parse_args(argv)

    import ray

    from lineage_data.connectors.testing.seaweed import SeaweedServer

    workdir = pathlib.Path(args.workdir).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    with SeaweedServer(workdir / f"s3-{int(time.time())}", auth=True) as server:
        print(f"S3 server (SeaweedFS) at {server.endpoint_url}, data in {server.data_dir}")
        os.environ.update(
            server.env
        )  # botocore reads them here and in the Ray workers started below
        server.make_bucket(BUCKET)
        manifest = _upload(args)
        expected_bad = sum(1 for f in manifest["files"] if f["expected_error"])
        expected_good = len(manifest["files"]) - expected_bad
        print(
            f"corpus: {expected_good} good files, {expected_bad} bad files uploaded to s3://{BUCKET}/input"
        )
        try:
            committed, failed = _run(args)
            local = _mirror(server, workdir)
        finally:
            ray.shutdown()
    print(f"\nlocal copy of the shards: {local}")
    print(f"shards: s3://{BUCKET}/shards/")
    print(f"parents: {committed} committed, {failed} failed")
    if (committed, failed) != (expected_good, expected_bad):
        print(f"expected {expected_good} committed and {expected_bad} failed", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
