"""``python -m bench <name> [--scale smoke|small|full]``: run one benchmark (or ``all``).

The last line on stdout is one JSON object with the headline figures; progress goes to stderr; full
results (JSON, and a PNG timeline for longtail and poison) go to ``bench/results/`` (or ``--out``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from bench import (
    coordinator,
    faults,
    job,
    longtail,
    ocr,
    overhead,
    poison,
    realpdf,
    server,
    smallparents,
)
from bench.common import log
from bench.measure import RESULTS_DIR, start_ray, warm_up

BENCHES = (
    "longtail",
    "poison",
    "overhead",
    "coordinator",
    "smallparents",
    "realpdf",
    "ocr",
    "server",
)
# Not part of ``all``: faults SIGKILLs processes of the Ray instance it runs on; job runs the
# installed command, which starts a Ray of its own.
EXTRA = ("faults", "job")
GPUS = 4


def _run_one(name: str, args: argparse.Namespace) -> dict[str, Any]:
    out = Path(args.out)
    if name == "longtail":
        return longtail.run(args.scale, out, seed=args.seed, daft=not args.no_daft)
    if name == "poison":
        if args.crash:
            return poison.run_crash(args.scale, out, seed=args.seed)
        return poison.run(args.scale, out, seed=args.seed)
    if name == "overhead":
        return overhead.run(args.scale, out, seed=args.seed)
    if name == "faults":
        return faults.run(args.scale, out, seed=args.seed)
    if name == "ocr":
        return ocr.run(args.scale, out, seed=args.seed, input_dir=args.input, daft=not args.no_daft)
    if name == "realpdf":
        return realpdf.run(
            args.scale, out, seed=args.seed, input_dir=args.input, keep_images=args.keep_images
        )
    if name == "server":
        return server.run(args.scale, out, seed=args.seed)
    if name == "job":
        return job.run(args.scale, out, seed=args.seed)
    if name == "smallparents":
        return smallparents.run(args.scale, out, seed=args.seed)
    return coordinator.run(args.scale, out, seed=args.seed)


def main(argv: list[str] | None = None) -> int:
    """Parse arguments, start Ray, run, print the headline JSON last."""
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("name", choices=(*BENCHES, *EXTRA, "all"))
    parser.add_argument("--scale", choices=("smoke", "small", "full"), default="smoke")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=str(RESULTS_DIR), help="results directory")
    parser.add_argument("--no-daft", action="store_true", help="skip Daft in longtail and ocr")
    parser.add_argument("--input", default=None, help="ocr, realpdf: a directory of PDFs")
    parser.add_argument(
        "--keep-images", action="store_true", help="realpdf: page images kept in document rows"
    )
    parser.add_argument(
        "--crash", action="store_true", help="poison: crashing parents kill the GPU actor instead"
    )
    args = parser.parse_args(argv)

    started = time.time()
    owns_ray = args.name != "job" and start_ray(GPUS)  # the job starts a Ray of its own
    log(f"ray up in {time.time() - started:.1f}s")
    try:
        if args.scale != "smoke" and owns_ray:
            warm_up()
        names = BENCHES if args.name == "all" else (args.name,)
        headlines = {name: _run_one(name, args) for name in names}
    finally:
        if owns_ray:
            import ray

            ray.shutdown()
    log(f"done in {time.time() - started:.1f}s")
    result = headlines if args.name == "all" else headlines[args.name]
    sys.stdout.write(json.dumps(result, sort_keys=False) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
