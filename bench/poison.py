"""``poison``: ordinal 0 of the largest 5% of parents fails its whole group at the GPU stage.

lineage_data returns ``ld.GroupFailure("poison")``: a barrier stops the poisoned parent's siblings that were
not yet handed to the GPU function. Plain Ray Data cannot stop them: it flags the row, computes every
sibling, regroups, and filters the parent out after the regroup.

What governs the suppressed fraction: the barrier is installed when the batch holding ordinal 0 *commits*
(after its GPU time). Siblings handed to the function before that moment run anyway: the other batches in
flight on the other actors (at most ``(actors - 1) x batch`` rows, fewer when their batches also hold
other parents' children), plus batches that start on actors which finish while the poisoned batch still
runs. Siblings reach the GPU stage only as fast as the expand stage emits them, in small blocks, so for a
parent of ``n`` children roughly ``1 - (batch x actors in flight x share of that parent in those
batches) / (n - 1)`` of its siblings never reach the function. Large parents, small batches and few
actors suppress more; a parent smaller than one in-flight window suppresses little or nothing.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from bench.common import log, publish, scale_config, summarize
from bench.measure import read_timeline
from bench.systems import Job, clean, run_lineage_data, run_ray_data_tuned
from bench.workload import make_corpus, poisoned_docs

BATCH = 48
ACTORS = 4


def _sightings(
    seen: dict[str, set[int]], sizes: dict[str, int], poison: list[str]
) -> dict[str, Any]:
    per_parent: list[dict[str, Any]] = []
    for doc in poison:
        n = sizes[doc]
        ran = len(seen.get(doc, set()))
        siblings = n - 1
        per_parent.append(
            {
                "doc": doc,
                "children": n,
                "rows_seen_by_udf": ran,
                "siblings": siblings,
                "siblings_never_handed": max(0, n - ran),
                "siblings_computed_then_discarded": max(0, ran - 1),
            }
        )
    siblings = sum(p["siblings"] for p in per_parent)
    never = sum(p["siblings_never_handed"] for p in per_parent)
    return {
        "per_parent": per_parent,
        "siblings": siblings,
        "siblings_never_handed": never,
        "siblings_computed_then_discarded": sum(
            p["siblings_computed_then_discarded"] for p in per_parent
        ),
        "suppressed_frac": round(never / siblings, 4) if siblings else None,
    }


def _ratio(a: dict[str, Any], b: dict[str, Any], key: str) -> float | None:
    return round(a[key] / b[key], 4) if a.get(key) and b.get(key) else None


def _outputs(directory: Path) -> dict[str, tuple]:
    """The shards a run wrote: root -> (outcome, cause, text), each root once (else it raises)."""
    import pyarrow.parquet as pq

    import lineage_data as ld

    out: dict[str, tuple] = {}
    for shard in sorted(directory.glob("*.parquet")):
        table = pq.read_table(shard)
        cols = [  # a shard of failed rows only has no user columns
            table[c].to_pylist() if c in table.column_names else [None] * table.num_rows
            for c in (ld.ROOT, ld.OUTCOME, ld.CAUSE, "text")
        ]
        for root, outcome, cause, text in zip(*cols, strict=True):
            if root in out:
                raise AssertionError(f"root {root!r} came out twice")
            out[root] = (outcome, cause, text)
    return out


def run_crash(scale: str, out_dir: Path, *, seed: int = 0) -> dict[str, Any]:
    """``poison --crash``: 2 % of parents kill the GPU actor (SIGSEGV) on their child 0, every time.

    lineage_data only (Ray Data retries the dead actor's call without end: it never finishes), a clean
    run and a crashing run in one invocation. ``correct``: every other root PRESENT with the clean
    run's text, each root once; ``crashed_roots_failed``: the crashing roots that ended not PRESENT
    with a ``WorkerCrashedError`` cause.
    """
    n_parents, cost = scale_config(scale, batch_size=BATCH, gpus=ACTORS)
    corpus = make_corpus(n_parents, seed=seed)
    crash = poisoned_docs(corpus, frac=0.02)
    log(f"poison --crash/{scale}: {n_parents} parents; {len(crash)} crash the GPU actor")
    scratch = Path(tempfile.mkdtemp(prefix="bench-crash-"))
    runs: dict[str, Any] = {}
    outputs: dict[str, dict[str, tuple]] = {}
    try:
        for system, bad in (("lineage_data_clean", []), ("lineage_data_crash", crash)):
            job = Job(
                corpus, cost, scratch / "timeline", scratch / "work", poison=bad, failure="crash"
            )
            log(f"running {system} ...")
            result = run_lineage_data(job, system)
            outputs[system] = _outputs(job.work_dir / system)
            runs[system] = {"wall_s": round(result.wall_s, 3), **result.extra}
            log(f"{system}: wall {result.wall_s:.2f}s")
            clean(job.work_dir / system)
    finally:
        clean(scratch)
    clean_out, crash_out = outputs["lineage_data_clean"], outputs["lineage_data_crash"]
    others = set(clean_out) - set(crash)
    correct = (
        set(crash_out) == set(clean_out)
        and all(clean_out[r][0] == "PRESENT" for r in clean_out)
        and all(crash_out[r] == clean_out[r] for r in others)
    )
    failed = [
        r
        for r in crash
        if crash_out.get(r, ("PRESENT",))[0] != "PRESENT"
        and "WorkerCrashedError" in (crash_out[r][1] or "")
    ]
    headline = {
        "bench": "poison",
        "scale": scale,
        "mode": "crash",
        "correct": correct,
        "crashing_roots": len(crash),
        "crashed_roots_failed": len(failed),
        "wall_ratio_vs_clean": round(
            runs["lineage_data_crash"]["wall_s"] / runs["lineage_data_clean"]["wall_s"], 4
        ),
        "wall_s": {k: v["wall_s"] for k, v in runs.items()},
    }
    publish(
        "poison-crash",
        scale,
        seed,
        out_dir,
        f"poison --crash/{scale}: {len(crash)} of {n_parents} parents crash the GPU actor",
        [],
        {
            "corpus": {"parents": n_parents, "crashing": crash},
            "cost_model": cost.as_dict(),
            "notes": (
                "The GPU stage (SimGPU) kills its own actor process with SIGSEGV whenever a batch holds "
                "child 0 of a crashing parent, on every attempt. lineage_data journals each block; the "
                "block is retried max_crash_retries (2) times, then run row by row, and the crashing "
                "row fails alone after 3 more crashes; its parent reduces to SUPPRESSED."
            ),
            "crashed_causes": {r: crash_out.get(r) for r in crash},
            "runs": runs,
            "headline": headline,
        },
    )
    return headline


def run(scale: str, out_dir: Path, *, seed: int = 0) -> dict[str, Any]:
    """Clean vs poisoned runs of lineage_data and Ray Data; write JSON + PNG; return the headline."""
    n_parents, cost = scale_config(scale, batch_size=BATCH, gpus=ACTORS)
    corpus = make_corpus(n_parents, seed=seed)
    sizes = {r["doc"]: r["n_children"] for r in corpus}
    children = sum(sizes.values())
    poison = poisoned_docs(corpus)
    log(
        f"poison/{scale}: {n_parents} parents, {children} children; poisoned {len(poison)} parents "
        f"with {[sizes[d] for d in poison]} children; batch {BATCH}, {ACTORS} actors"
    )
    runs: dict[str, Any] = {}
    plots = []
    scratch = Path(tempfile.mkdtemp(prefix="bench-poison-"))
    try:
        plan = [
            ("lineage_data_clean", run_lineage_data, []),
            ("lineage_data_poison", run_lineage_data, poison),
            ("ray_data_clean", run_ray_data_tuned, []),
            ("ray_data_poison", run_ray_data_tuned, poison),
        ]
        for system, fn, bad in plan:
            job = Job(corpus, cost, scratch / "timeline", scratch / "work", poison=list(bad))
            log(f"running {system} ...")
            result = fn(job, system)
            timeline = read_timeline(job.timeline_dir, system)
            summary = summarize(result, timeline, cost, children)
            if bad:
                summary["poison"] = _sightings(timeline.seen, sizes, bad)
                summary["parents_out_not_poisoned"] = len(set(result.sink.commits) - set(bad))
            runs[system] = summary
            plots.append((system, timeline, result.start, result.end, result.sink.commits))
            log(f"{system}: wall {result.wall_s:.2f}s")
            clean(job.work_dir / system)
    finally:
        clean(scratch)
    ld_p, rd_p = runs["lineage_data_poison"], runs["ray_data_poison"]
    ld_ratio = round(ld_p["wall_s"] / runs["lineage_data_clean"]["wall_s"], 4)
    rd_ratio = round(rd_p["wall_s"] / runs["ray_data_clean"]["wall_s"], 4)
    outcomes = ld_p.get("parents_by_outcome", {})
    ld_c, rd_c = runs["lineage_data_clean"], runs["ray_data_clean"]
    headline = {
        "bench": "poison",
        "scale": scale,
        "suppressed_frac": ld_p["poison"]["suppressed_frac"],
        "wall_ratio_vs_clean": ld_ratio,
        # Wall includes actor start-up, which varies by seconds on a loaded 2-core machine; these two
        # compare what the GPUs did: batch seconds, and first GPU start to last GPU end.
        "gpu_work_ratio_vs_clean": _ratio(ld_p, ld_c, "gpu_work_s"),
        "gpu_span_ratio_vs_clean": _ratio(ld_p, ld_c, "gpu_span_s"),
        "ray_data_suppressed_frac": rd_p["poison"]["suppressed_frac"],
        "ray_data_wall_ratio_vs_clean": rd_ratio,
        "ray_data_gpu_work_ratio_vs_clean": _ratio(rd_p, rd_c, "gpu_work_s"),
        "siblings": ld_p["poison"]["siblings"],
        "siblings_computed_then_discarded": ld_p["poison"]["siblings_computed_then_discarded"],
        "ray_data_siblings_computed_then_discarded": rd_p["poison"][
            "siblings_computed_then_discarded"
        ],
        "poisoned_parents_suppressed": outcomes.get("SUPPRESSED", 0),
    }
    publish(
        "poison",
        scale,
        seed,
        out_dir,
        f"poison/{scale}: {len(poison)} of {n_parents} parents poisoned at ordinal 0, "
        f"batch {BATCH}, {ACTORS} actors",
        plots,
        {
            "corpus": {"parents": n_parents, "children": children, "poisoned": poison},
            "cost_model": cost.as_dict(),
            "what_governs_suppressed_frac": (__doc__ or "")
            .split("What governs the suppressed fraction: ")[-1]
            .replace("\n", " ")
            .strip(),
            "notes": (
                "Ray Data runs use the task-based sort shuffle for the groupby (ray_data_tuned in longtail); "
                "a poisoned parent's row is flagged by the GPU function and the parent filtered out after the "
                "regroup. rows_seen_by_udf counts the rows of a poisoned parent that the GPU function was "
                "handed (logged from inside it)."
            ),
            "runs": runs,
            "headline": headline,
        },
    )
    return headline
