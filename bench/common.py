"""Shared pieces of the benchmarks: scales, the per-system summary, logging to stderr."""

from __future__ import annotations

import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from bench.measure import Timeline, gpu_metrics, plot_timelines, results_path, write_json
from bench.systems import SystemRun
from bench.workload import CostModel

# Smoke: a few seconds per system on 2 cores (startup dominates; ratios mean little), so 2 simulated GPUs
# (fewer actors to start) and Ray Data's groupby on a few partitions (its default 200 took ~60 s to start
# here). Smoke walls are never compared; other scales use 4 GPUs and Ray Data's default partitions.
# Small/full: a 32-row GPU batch costs 0.36 s, long enough that the simulated GPUs, not the two real
# cores running Ray Data's scheduling, are the bottleneck (as with a real OCR/VLM stage). Small is
# ~60 s of GPU work per system (~15 s on 4 GPUs).
SMOKE_COST = CostModel(
    expand_s_per_child=0.0002,
    gpu_s_per_batch=0.010,
    gpu_s_per_item=0.0005,
    reduce_s_per_parent=0.001,
    reduce_s_per_child=0.00001,
    gpus=2,
)
SMOKE_PARTITIONS = 4
GPU_BOUND_COST = CostModel(gpu_s_per_batch=0.100, gpu_s_per_item=0.008)
SCALES: dict[str, dict[str, Any]] = {
    "smoke": {"parents": 16, "cost": SMOKE_COST},
    "small": {"parents": 120, "cost": GPU_BOUND_COST},
    "full": {"parents": 1000, "cost": GPU_BOUND_COST},
}


def scale_config(scale: str, **cost_overrides: Any) -> tuple[int, CostModel]:
    """Parents and cost model of a scale, with cost fields overridden."""
    if scale not in SCALES:
        raise SystemExit(f"unknown scale {scale!r}: choose one of {sorted(SCALES)}")
    conf = SCALES[scale]
    return conf["parents"], replace(conf["cost"], **cost_overrides)


def log(message: str) -> None:
    """Progress goes to stderr: stdout's last line is the headline JSON."""
    sys.stderr.write(f"[bench {time.strftime('%H:%M:%S')}] {message}\n")
    sys.stderr.flush()


def stamp() -> str:
    """A timestamp for result file names."""
    return time.strftime("%Y%m%d-%H%M%S")


def summarize(run: SystemRun, timeline: Timeline, cost: CostModel, children: int) -> dict[str, Any]:
    """The per-system measures of one run."""
    wall = run.wall_s
    commits = sorted(run.sink.commits.values())
    out: dict[str, Any] = {
        "wall_s": round(wall, 3),
        "children": children,
        "children_per_s": round(children / wall, 1) if wall > 0 else None,
        "first_output_s": round(run.sink.first_output_s, 3)
        if run.sink.first_output_s is not None
        else None,
        "first_commit_frac": round(run.sink.first_output_s / wall, 4)
        if run.sink.first_output_s is not None and wall > 0
        else None,
        "parents_out": len(commits),
        "commit_p50_frac": round(statistics.median(commits) / wall, 4) if commits else None,
        "output_rows": run.sink.rows,
        "output_shards": run.sink.shards,
        "output_bytes": run.sink.bytes,
        **run.memory,
    }
    out.update(gpu_metrics(timeline, run.start, run.end, cost.gpus))
    ideal = cost.ideal_gpu_work_s(children)
    out["gpu_ideal_work_s"] = round(ideal, 3)
    out["gpu_ideal_busy_frac"] = round(ideal / (cost.gpus * wall), 4) if wall > 0 else None
    out.update(run.extra)
    return out


def code_version() -> dict[str, str | None]:
    """The git HEAD and a hash of lineage_data's sources as they are now (the tree may be uncommitted)."""
    import hashlib
    import subprocess

    root = Path(__file__).resolve().parents[1]
    digest = hashlib.sha1()
    for path in sorted((root / "lineage_data").rglob("*.py")):
        digest.update(path.relative_to(root).as_posix().encode())
        digest.update(path.read_bytes())
    try:
        head = (
            subprocess.run(
                ["git", "rev-parse", "--short", "HEAD"],
                cwd=root,
                capture_output=True,
                text=True,
                check=False,
            ).stdout.strip()
            or None
        )
    except OSError:
        head = None
    return {"git_head": head, "lineage_data_sources_sha1": digest.hexdigest()[:12]}


def ensure_dir(path: Path) -> Path:
    """``mkdir -p``."""
    path.mkdir(parents=True, exist_ok=True)
    return path


def publish(
    name: str, scale: str, seed: int, out_dir: Path, title: str, plots: Any, body: dict[str, Any]
) -> Path:
    """Save the timeline PNG and the results JSON (common envelope + ``body``); return the JSON path."""
    when = stamp()
    png = results_path(out_dir, name, scale, "png", when)
    plot_timelines(png, title, plots)
    data = {
        "bench": name,
        "scale": scale,
        "seed": seed,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "code": code_version(),
        **body,
        "plot": str(png) if png.exists() else None,
    }
    path = results_path(out_dir, name, scale, "json", when)
    write_json(path, data)
    log(f"wrote {path} and {png}")
    return path
