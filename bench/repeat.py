"""One system of the long-tail workload, run several times in one Ray: cold start apart from warm runs.

``python -m bench.repeat [--system lineage_data] [--runs 5] [--scale smoke] [--out DIR]``

At smoke scale most of a ``longtail`` wall is the start of its actor pools (the first GPU batch begins
after 3.5-5.5 s of a 5-6 s wall), so a before/after of the whole bench cannot tell a change in the
pipeline from a change in start-up. Here the first run (after the benches' usual few-task warm-up) starts
its actor pools in a fresh Ray and the others run with Ray's worker processes already there; the JSON keeps every wall (``walls_s``), the first
(``cold_s``) and the median of the rest (``warm_median_s``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from bench.common import SMOKE_PARTITIONS, code_version, log, scale_config, stamp
from bench.measure import RESULTS_DIR, results_path, start_ray, warm_up, write_json
from bench.systems import SYSTEMS, Job, clean
from bench.workload import make_corpus

GPUS = 4  # as `python -m bench` starts its Ray


def main(argv: list[str] | None = None) -> Path:
    """Run ``--system`` ``--runs`` times on the ``--scale`` long-tail corpus; write the walls as JSON."""
    parser = argparse.ArgumentParser(prog="python -m bench.repeat", description=__doc__)
    parser.add_argument("--system", default="lineage_data", choices=sorted(SYSTEMS))
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--scale", default="smoke", choices=["smoke", "small"])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=RESULTS_DIR)
    args = parser.parse_args(argv)
    if args.runs < 2:
        parser.error("--runs must be at least 2 (one cold run, then warm ones)")
    start_ray(GPUS)
    warm_up()
    parents, cost = scale_config(args.scale)
    corpus = make_corpus(parents, seed=args.seed)
    partitions = SMOKE_PARTITIONS if args.scale == "smoke" else None
    scratch = Path(tempfile.mkdtemp(prefix="bench-repeat-"))
    walls: list[float] = []
    try:
        for run in range(args.runs):
            job = Job(
                corpus, cost, scratch / f"timeline-{run}", scratch / "work", partitions=partitions
            )
            walls.append(round(SYSTEMS[args.system](job).wall_s, 3))
            log(f"{args.system} run {run + 1}/{args.runs}: {walls[-1]:.2f}s")
            clean(job.work_dir / args.system)
    finally:
        clean(scratch)
    path = results_path(args.out, f"repeat-{args.system}", args.scale, "json", stamp())
    result = {
        "bench": "repeat",
        "system": args.system,
        "scale": args.scale,
        "seed": args.seed,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "code": code_version(),
        "walls_s": walls,
        "cold_s": walls[0],
        "warm_median_s": statistics.median(walls[1:]),
    }
    write_json(path, result)
    log(f"wrote {path}")
    print(json.dumps(result))  # the last stdout line, as every bench's headline
    return path


if __name__ == "__main__":
    main()
