"""The ``lineage-data`` command: the PDF and video jobs, your own pipelines, reports on outputs.

lineage-data pdf s3://corpus/pdfs/ s3://corpus/shards/pdf [--stage text|ocr|vlm|server]
lineage-data video s3://corpus/videos/ s3://corpus/shards/video
lineage-data run my_pipeline.py --my-flag        # a pipeline file of yours, run as __main__
lineage-data report s3://corpus/shards/pdf --png timeline.png
lineage-data inspect s3://corpus/shards/pdf s3://corpus/pdfs/a.pdf

A library error (``LineageError``: refused S3 credentials, a missing bucket, a plan error ...) is
printed as one line on stderr, with exit status 1.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import re
import runpy
import sys
from collections import Counter
from collections.abc import Sequence
from typing import Any

from lineage_data import LineageError
from lineage_data.connectors.shards import REPORTS_DIR
from lineage_data.storage import resolve_filesystem, s3_errors


def cmd_run(target: str, args: Sequence[str], *, module: bool = False) -> int:
    """Run a pipeline file (or, with ``module``, a module as ``python -m`` does) as ``__main__``."""
    if not module and not pathlib.Path(target).is_file():
        raise SystemExit(f"lineage-data: no pipeline file {target!r} (a module: run -m NAME)")
    os.environ.setdefault("LINEAGE_DATA_PROGRESS", "1")
    if module and "" not in sys.path:
        sys.path.insert(0, "")  # as python -m: modules of the working directory are found
    sys.argv = [target, *args]
    try:
        if module:
            runpy.run_module(target, run_name="__main__", alter_sys=True)
        else:
            runpy.run_path(target, run_name="__main__")
    except SystemExit as exc:
        return int(exc.code or 0) if not isinstance(exc.code, str) else 1
    return 0


def _fs(path: str) -> Any:
    return resolve_filesystem(path)[0]


def load_reports(path: str, fs: Any) -> list[dict]:
    """Run reports saved beside the shards, oldest first."""
    base = f"{path.rstrip('/')}/{REPORTS_DIR}"
    with s3_errors(path, fs):
        try:
            names = sorted(fs.glob(f"{fs._strip_protocol(base)}/*.json"))
        except FileNotFoundError:
            return []
        return [json.loads(fs.cat_file(name)) for name in names]


def summarize(path: str) -> dict[str, Any]:
    """Shards, rows, dead letters by cause and per-stage counts of the runs that wrote ``path``."""
    from lineage_data.connectors.shards import read_dead_letter, read_manifest

    fs = _fs(path)
    manifest = read_manifest(path, filesystem=fs)
    dead = read_dead_letter(path, filesystem=fs)
    by_cause = Counter(cause or "(none)" for cause in dead["cause"].to_pylist())
    reports = load_reports(path, fs)
    return {
        "shards": len(manifest.shards),
        "rows": sum(e.rows for e in manifest.shards),
        "bytes": sum(e.bytes for e in manifest.shards),
        "dead_letter_rows": dead.num_rows,
        "dead_letter_by_cause": dict(by_cause.most_common()),
        "runs": len(reports),
        "stages": _stage_totals(reports),
    }


def _stage_totals(reports: list[dict]) -> list[dict]:
    totals: dict[str, dict] = {}
    for report in reports:
        for stage in report["stages"]:
            row = totals.setdefault(
                stage["stage"], {k: 0 for k in stage if k not in ("stage", "kind")}
            )
            row["kind"] = stage["kind"]
            for key, value in stage.items():
                if key not in ("stage", "kind") and value is not None:
                    row[key] = (row.get(key) or 0) + value
    return [{"stage": name, **row} for name, row in totals.items()]


def cmd_report(path: str, *, png: str | None, as_json: bool) -> int:
    """Print the summary of a finished output; optionally save the commit timeline as PNG."""
    summary = summarize(path)
    if as_json:
        print(json.dumps(summary, indent=2))
    else:
        print(f"output: {path}")
        print(f"shards: {summary['shards']} ({summary['rows']} rows, {summary['bytes']} bytes)")
        print(f"dead letters: {summary['dead_letter_rows']}")
        for cause, n in list(summary["dead_letter_by_cause"].items())[:20]:
            print(f"  {n:>5}  {cause}")
        print(f"runs: {summary['runs']}")
        for stage in summary["stages"]:
            counts = ", ".join(
                f"{k}={v}" for k, v in stage.items() if k not in ("stage", "kind") and v
            )
            print(f"  {stage['kind']:<8} {stage['stage']:<20} {counts}")
    if png:
        _plot(path, png)
        print(f"timeline: {png}")
    return 0


def _plot(path: str, png: str) -> None:
    from lineage_data.report import RunReport

    reports = load_reports(path, _fs(path))
    if not reports:
        raise SystemExit(f"no run report under {path}/{REPORTS_DIR}: nothing to plot")
    RunReport.from_dict(reports[-1]).plot_timeline(png)


def cmd_inspect(path: str, root: str) -> int:
    """Where one root ended: its shard row or dead-letter row, and its commit time in the last run."""
    from lineage_data.connectors.shards import read_dead_letter, read_manifest, read_shards

    fs = _fs(path)
    manifest = read_manifest(path, filesystem=fs)
    found = [e for e in manifest.shards if root in e.roots]
    dead = [r for r in read_dead_letter(path, filesystem=fs).to_pylist() if r["root"] == root]
    timing = [p for r in load_reports(path, fs) for p in r["parents"] if p["root"] == root]
    if not (found or dead):
        print(f"{root}: not committed under {path}")
        return 1
    for entry in found:
        table = read_shards(path, filesystem=fs)
        row = next(r for r in table.to_pylist() if r["_lineage_root"] == root)
        print(f"{root}: PRESENT in {entry.file}")
        for key, value in row.items():
            text = repr(value)
            print(f"  {key}: {text[:200]}{'…' if len(text) > 200 else ''}")
    for row in dead:
        print(f"{root}: {row['outcome']} at stage {row['stage']!r}: {row['cause']}")
    for p in timing[-1:]:
        print(f"  committed {p['committed_s']:.2f}s after the start of its run")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``lineage-data`` console script."""
    from lineage_data.connectors.jobs import pdf, video

    parser = argparse.ArgumentParser(
        prog="lineage-data",
        description=__doc__.splitlines()[0],
        epilog="`lineage-data JOB --help` lists a job's options.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    jobs = {"pdf": pdf, "video": video}
    for name, job in jobs.items():
        doc = job.__doc__ or name
        about = doc.splitlines()[0].split(": ", 1)[-1]  # the module's first line
        job.add_arguments(
            sub.add_parser(
                name,
                help=about,
                description=re.sub(r":\w+:|``", "", doc),
                formatter_class=argparse.RawDescriptionHelpFormatter,
            )
        )
    run = sub.add_parser("run", help="run a pipeline file of yours, or a module with -m")
    run.add_argument("-m", dest="module", action="store_true", help="TARGET is a module name")
    run.add_argument("target")
    run.add_argument("args", nargs=argparse.REMAINDER)
    report = sub.add_parser("report", help="summarize a finished output")
    report.add_argument("path")
    report.add_argument(
        "--png", default=None, help="save the commit timeline of the last run as PNG"
    )
    report.add_argument("--json", action="store_true")
    inspect = sub.add_parser("inspect", help="show where one root ended")
    inspect.add_argument("path")
    inspect.add_argument("root")
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    args.argv = argv  # the summary prints the command that resumes
    try:
        if args.command in jobs:
            return int(jobs[args.command].run(args))
        if args.command == "run":
            return cmd_run(args.target, args.args, module=args.module)
        if args.command == "report":
            return cmd_report(args.path, png=args.png, as_json=args.json)
        return cmd_inspect(args.path, args.root)
    except LineageError as exc:  # a message written for people: no traceback
        print(f"lineage-data: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
