"""``longtail``: every system on the same long-tailed corpus, in one Ray instance, one invocation."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from bench.common import SMOKE_PARTITIONS, log, publish, scale_config, summarize
from bench.measure import read_timeline
from bench.systems import SYSTEMS, Job, clean, import_daft
from bench.workload import make_corpus

ORDER = (
    "floor",
    "ray_data",
    "ray_data_tuned",
    "lineage_data",
    "lineage_data_shards",
    "per_document",
    "daft",
    "floor",  # again, last: the floor counts as the best of its two runs (see run)
)
# Parents of the untimed warm-up run (the floor) before the measured ones.
WARM_UP_PARENTS = 8
# Smoke keeps to what the headline needs (a few seconds each; Ray start-up dominates there).
SMOKE_ORDER = ("floor", "ray_data", "lineage_data", "lineage_data_shards")


def _daft_status() -> str | None:
    """None when Daft can be imported, else why not."""
    try:
        import_daft()
    except Exception as exc:  # noqa: BLE001 - any import failure means "not run"
        return f"not run: {type(exc).__name__}: {exc}"
    return None


def run(scale: str, out_dir: Path, *, seed: int = 0, daft: bool = True) -> dict[str, Any]:
    """Run the long-tail comparison; write JSON + PNG; return the headline figures."""
    n_parents, cost = scale_config(scale)
    corpus = make_corpus(n_parents, seed=seed)
    children = sum(r["n_children"] for r in corpus)
    counts = sorted(r["n_children"] for r in corpus)
    log(
        f"longtail/{scale}: {n_parents} parents, {children} children (max {counts[-1]}), "
        f"{cost.gpus} GPUs, batch {cost.batch_size}"
    )
    results: dict[str, Any] = {}
    plots: list[Any] = []
    skipped: dict[str, str] = {}
    warm_up: dict[str, Any] | None = None
    scratch = Path(tempfile.mkdtemp(prefix="bench-longtail-"))
    try:
        if scale != "smoke":
            # The first pipeline in a fresh Ray starts its worker pool and pays their imports: in
            # longtail-small-20261205-062058.json the floor, first, began its GPU batches at 9.1 s,
            # lineage_data at 4.7 s. A warm-up takes that cost; the floor then runs first and last
            # and its best run counts, so no place in the order gives it a start the others lack.
            warm = Job(corpus[:WARM_UP_PARENTS], cost, scratch / "warm", scratch / "warm-work")
            started = SYSTEMS["floor"](warm)
            warm_up = {"system": "floor", "parents": WARM_UP_PARENTS, "wall_s": started.wall_s}
            log(f"warm-up, untimed: floor on {WARM_UP_PARENTS} parents, {started.wall_s:.1f}s")
            clean(warm.work_dir)
        for index, system in enumerate(SMOKE_ORDER if scale == "smoke" else ORDER):
            if system == "daft":
                reason = _daft_status() if daft else "not run: disabled with --no-daft"
                if reason is not None:
                    skipped[system] = reason
                    log(f"daft: {reason}")
                    continue
            partitions = SMOKE_PARTITIONS if scale == "smoke" else None
            timelines = scratch / f"timeline-{index}"  # a run's own: the floor runs twice
            job = Job(corpus, cost, timelines, scratch / "work", partitions=partitions)
            log(f"running {system} ...")
            try:
                result = SYSTEMS[system](job)
            except Exception as exc:
                if system != "daft":
                    raise
                skipped[system] = f"not run: {type(exc).__name__}: {str(exc)[:300]}"
                log(f"daft: {skipped[system]}")
                continue
            timeline = read_timeline(job.timeline_dir, system)
            summary = summarize(result, timeline, cost, children)
            earlier = results.get(system)
            walls = [*(earlier or {}).get("walls_s", []), round(result.wall_s, 3)]
            if earlier is None or summary["wall_s"] < earlier["wall_s"]:
                results[system] = summary
                plot = (system, timeline, result.start, result.end, result.sink.commits)
                at = next((i for i, p in enumerate(plots) if p[0] == system), len(plots))
                plots[at : at + 1] = [plot]
            results[system]["walls_s"] = walls
            log(f"{system}: wall {result.wall_s:.2f}s, first output {result.sink.first_output_s}")
            clean(job.work_dir / system)
    finally:
        clean(scratch)
    ref = results["ray_data"]["wall_s"]
    floor = results["floor"]["wall_s"]
    tuned = results.get("ray_data_tuned", {}).get("wall_s")
    for res in results.values():
        res["wall_ratio_vs_ray_data"] = round(res["wall_s"] / ref, 4)
        res["wall_ratio_vs_floor"] = round(res["wall_s"] / floor, 4)
        if tuned:
            res["wall_ratio_vs_ray_data_tuned"] = round(res["wall_s"] / tuned, 4)
    ld = results["lineage_data"]
    headline = {
        "bench": "longtail",
        "scale": scale,
        "wall_ratio_vs_ray_data": ld["wall_ratio_vs_ray_data"],
        "wall_ratio_vs_floor": ld["wall_ratio_vs_floor"],
        "first_commit_frac": ld["first_commit_frac"],
        "tail_frac": ld["tail_frac"],
        "gpu_busy_frac": ld["gpu_busy_frac"],
        "wall_s": {name: res["wall_s"] for name, res in results.items()},
        "coordinator_calls_per_1000_children": ld.get("coordinator_calls_per_1000_children"),
    }
    if "wall_ratio_vs_ray_data_tuned" in ld:
        headline["wall_ratio_vs_ray_data_tuned"] = ld["wall_ratio_vs_ray_data_tuned"]
    shards = results.get("lineage_data_shards")
    if shards is not None:  # the product's own writer, beside the driver-side one
        headline["shards"] = {
            "wall_ratio_vs_floor": shards["wall_ratio_vs_floor"],
            "wall_ratio_vs_ray_data": shards["wall_ratio_vs_ray_data"],
            "first_shard_s": shards.get("first_shard_s"),
            "first_commit_frac": shards["first_commit_frac"],
            "tail_frac": shards.get("tail_frac"),
        }
    publish(
        "longtail",
        scale,
        seed,
        out_dir,
        f"longtail/{scale}: {n_parents} parents, {children} children, "
        f"{cost.gpus} simulated GPUs, batch {cost.batch_size}",
        plots,
        {
            "corpus": {
                "parents": n_parents,
                "children": children,
                "mean_children": round(children / n_parents, 2),
                "max_children": counts[-1],
                "median_children": counts[len(counts) // 2],
            },
            "cost_model": cost.as_dict(),
            "warm_up": warm_up,
            "notes": (
                "All systems share one Ray instance (8 logical CPUs, N logical GPUs) and the same stage "
                "functions and costs (time.sleep). Ray Data pipelines split expanded children into "
                "blocks of one GPU batch as lineage_data does, so the comparison isolates the regroup. ray_data uses "
                "Ray Data's default groupby (hash shuffle, 200 partitions); ray_data_tuned the task-based "
                "sort shuffle. lineage_data writes shards on the driver as batches arrive; "
                "lineage_data_shards writes through lineage_data.connectors.shards.write_shards (Ray write tasks, "
                "manifest; first_output_s = first committed shard). Smoke runs floor, ray_data, "
                "lineage_data and lineage_data_shards only. Beyond smoke the floor runs once untimed on "
                "a few parents first (warm_up), then first and last in the order; its best run counts "
                "(walls_s lists both). wall_s runs "
                "from building the pipeline to the last shard written on the driver (actor start-up "
                "included). gpu_busy_frac = measured GPU batch seconds / N / wall; gpu_ideal_busy_frac "
                "uses the least GPU work (full batches). tail = end - last GPU batch end."
            ),
            "systems": results,
            "skipped": skipped,
            "headline": headline,
        },
    )
    return headline
