"""``faults``: the longtail workload on lineage_data, once clean and once with random worker SIGKILLs.

Both runs are in one invocation, on one Ray instance, with the corpus, cost model and pipeline of
``longtail``'s ``lineage_data`` system (:func:`bench.systems.lineage_pipeline`), each consumed with
``iter_batches`` and written as shards as batches arrive. During the faulted run a thread SIGKILLs
:data:`KILLS` random busy ``ray::`` processes of this Ray instance (task workers, pool actors, the
library's helper actors; never Ray's own internal actors or idle workers), spread over the run: the
i-th kill is due once the faulted run has done ``KILL_FRACS[i]`` (+- a seeded jitter) of the clean run's
number of GPU batches (counted from the timeline files the simulated GPUs write), and goes to a random
one of the busy processes found from then on. A
small unmeasured warm-up run comes first, so neither measured run pays for starting worker processes. Correct = the faulted output equals the clean output: every root
exactly once, with the same outcome, cause and user values.
"""

from __future__ import annotations

import hashlib
import random
import re
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from bench.common import log, publish, scale_config, summarize
from bench.measure import MemorySampler, ShardSink, read_timeline
from bench.processes import is_internal, ray_workers, sigkill
from bench.systems import Job, SystemRun, clean, lineage_pipeline
from bench.workload import make_corpus

KILLS = 3
KILL_FRACS = (0.25, 0.5, 0.75)
JITTER_FRAC = 0.05
POLL_S = 0.02
ANSI = re.compile(r"\x1b\[[0-9;]*m")


# Ray's own processes (Ray core, Ray Data): never killed.
def _gpu_batches(timeline_dir: Path, system: str) -> int:
    """GPU batches logged so far by ``system``'s simulated GPUs (one ``B`` line each)."""
    count = 0
    for file in timeline_dir.glob(f"{system}-*.tsv"):
        try:
            text = file.read_text()
        except OSError:
            continue
        count += sum(1 for line in text.splitlines() if line.startswith("B\t"))
    return count


class Killer(threading.Thread):
    """SIGKILLs one random busy ``ray::`` process each time the run's GPU progress passes a mark.

    ``marks`` are GPU batch counts of the faulted run (read from its timeline files), so the kills are
    spread over the GPU work whatever the start-up time; each kill goes to a random busy process found
    from its mark on.
    """

    def __init__(self, marks: Iterable[int], timeline_dir: Path, system: str, seed: int) -> None:
        super().__init__(daemon=True, name="bench-faults-killer")
        self.marks = sorted(marks)
        self.timeline_dir, self.system = timeline_dir, system
        self.rng = random.Random(seed)
        self.kills: list[dict[str, Any]] = []
        self._stop_event = threading.Event()
        self._t0 = 0.0
        self._before: dict[int, str] = {}

    def begin(self) -> None:
        """The faulted run starts now."""
        self._before = ray_workers()
        self._t0 = time.time()
        self.start()

    def run(self) -> None:
        for mark in self.marks:
            while not self._stop_event.is_set():
                if _gpu_batches(self.timeline_dir, self.system) >= mark and self._kill_one(mark):
                    break
                self._stop_event.wait(POLL_S)

    def _kill_one(self, mark: int) -> bool:
        busy = {
            pid: title
            for pid, title in ray_workers().items()
            if not is_internal(title) and self._before.get(pid) != title
        }
        if not busy:
            return False
        pid = self.rng.choice(sorted(busy))
        at = time.time() - self._t0
        if not sigkill(pid):
            return False
        self.kills.append(
            {"at_s": round(at, 3), "after_gpu_batches": mark, "pid": pid, "title": busy[pid]}
        )
        log(f"faults: killed {busy[pid]} (pid {pid}) at {at:.2f}s, after {mark} GPU batches")
        return True

    def stop(self) -> None:
        """The run is over: no more kills."""
        self._stop_event.set()
        if self.is_alive():
            self.join(timeout=15)


# -- one run ---------------------------------------------------------------------------------------


def _digest(row: dict[str, Any]) -> str:
    user = sorted(
        (k, repr(v)) for k, v in row.items() if not k.startswith("_lineage_") and v is not None
    )
    return hashlib.sha1(repr(user).encode()).hexdigest()[:16]


def _run(job: Job, system: str, killer: Killer | None = None) -> dict[str, Any]:
    """One consumption of the lineage_data pipeline; never raises for a failed run."""
    import lineage_data as ld

    sampler = MemorySampler()
    sampler.start()
    start = time.time()
    ds = lineage_pipeline(job, system)
    sink = ShardSink(job.work_dir / system, start, key=ld.ROOT)
    outputs: dict[str, tuple[str, str | None, str]] = {}
    seen: Counter[str] = Counter()
    error = None
    if killer is not None:
        killer.begin()
    try:
        for batch in ds.iter_batches(batch_size=None, batch_format="pyarrow"):
            sink.write(batch)
            for row in batch.to_pylist():
                root = row[ld.ROOT]
                seen[root] += 1
                outputs[root] = (row[ld.OUTCOME], row.get(ld.CAUSE), _digest(row))
    except Exception as exc:  # noqa: BLE001 - a faulted run may fail; that is the measurement
        text = " ".join(ANSI.sub("", str(exc)).split())
        error = f"{type(exc).__module__}.{type(exc).__name__}: {text[:500]}"
    finally:
        end = time.time()
        memory = sampler.stop()
        if killer is not None:
            killer.stop()
    try:
        report = ds.report()
    except Exception:  # noqa: BLE001 - no report after a failed run
        report = None
    repaired = getattr(report, "repaired_roots", None) if report is not None else None
    if repaired is not None and not isinstance(repaired, int | float):
        repaired = len(repaired)
    return {
        "run": SystemRun(system, start, end, sink, memory),
        "outputs": outputs,
        "duplicated": sorted(r for r, c in seen.items() if c > 1),
        "error": error,
        "repaired_roots": repaired,
    }


def _compare(clean_out: dict, faulted: dict) -> dict[str, Any]:
    got = faulted["outputs"]
    missing = sorted(set(clean_out) - set(got))
    lost_failed = sorted(
        r
        for r, (outcome, cause, _) in got.items()
        if r in clean_out and outcome == "FAILED" and str(cause or "").startswith("LostError")
    )
    changed = sorted(r for r in set(clean_out) & set(got) if clean_out[r] != got[r])
    unknown = sorted(set(got) - set(clean_out))
    lost = sorted(set(missing) | set(lost_failed))
    return {
        "lost": lost,
        "missing": missing,
        "changed": changed,
        "unknown": unknown,
        "correct": faulted["error"] is None
        and not faulted["duplicated"]
        and not missing
        and not changed
        and not unknown,
    }


def run(scale: str, out_dir: Path, *, seed: int = 0) -> dict[str, Any]:
    """Clean vs faulted lineage_data runs on the longtail corpus; write JSON + PNG; return the headline."""
    n_parents, cost = scale_config(scale)
    corpus = make_corpus(n_parents, seed=seed)
    children = sum(r["n_children"] for r in corpus)
    log(
        f"faults/{scale}: {n_parents} parents, {children} children, {cost.gpus} GPUs, {KILLS} kills"
    )
    scratch = Path(tempfile.mkdtemp(prefix="bench-faults-"))
    runs: dict[str, Any] = {}
    plots = []
    try:
        job = Job(corpus, cost, scratch / "timeline", scratch / "work")
        # Both measured runs find the pipeline's worker processes already started.
        log("warming up (4 parents, not measured) ...")
        _run(Job(corpus[:4], cost, scratch / "timeline", scratch / "work"), "warmup")
        log("running lineage_data_clean ...")
        clean_run = _run(job, "lineage_data_clean")
        wall_clean = clean_run["run"].wall_s
        if clean_run["error"] is not None:
            raise RuntimeError(f"the clean run failed: {clean_run['error']}")
        # Kills are spread over the GPU work: marks at KILL_FRACS of the clean run's GPU batches.
        clean_batches = len(read_timeline(job.timeline_dir, "lineage_data_clean").batches)
        rng = random.Random(seed)
        due = [
            max(1, round((frac + rng.uniform(-JITTER_FRAC, JITTER_FRAC)) * clean_batches))
            for frac in KILL_FRACS[:KILLS]
        ]
        killer = Killer(due, job.timeline_dir, "lineage_data_faulted", seed=seed)
        log(f"running lineage_data_faulted (kills after GPU batches {due} of {clean_batches}) ...")
        faulted = _run(job, "lineage_data_faulted", killer)
        for name, res in (("lineage_data_clean", clean_run), ("lineage_data_faulted", faulted)):
            timeline = read_timeline(job.timeline_dir, name)
            summary = summarize(res["run"], timeline, cost, children)
            summary.update(error=res["error"], duplicated_roots=res["duplicated"][:20])
            runs[name] = summary
            r = res["run"]
            plots.append((name, timeline, r.start, r.end, r.sink.commits))
            log(f"{name}: wall {r.wall_s:.2f}s, error {res['error']}")
        clean(job.work_dir)
    finally:
        clean(scratch)
    cmp = _compare(clean_run["outputs"], faulted)
    wall_faulted = faulted["run"].wall_s
    last_gpu_end = runs["lineage_data_faulted"].get("last_gpu_end_s")
    headline = {
        "bench": "faults",
        "scale": scale,
        "correct": cmp["correct"],
        "lost_roots": len(cmp["lost"]),
        "repaired_roots": faulted["repaired_roots"],
        "kills": len(killer.kills),
        "kills_before_last_gpu_batch": sum(
            1 for k in killer.kills if last_gpu_end is not None and k["at_s"] < last_gpu_end
        ),
        "duplicated_roots": len(faulted["duplicated"]),
        "changed_roots": len(cmp["changed"]),
        "error": faulted["error"][:300] if faulted["error"] else None,
        "wall_clean_s": round(wall_clean, 3),
        "wall_faulted_s": round(wall_faulted, 3),
        "wall_ratio_vs_clean": round(wall_faulted / wall_clean, 4) if wall_clean > 0 else None,
    }
    publish(
        "faults",
        scale,
        seed,
        out_dir,
        f"faults/{scale}: {n_parents} parents, {children} children; clean vs {len(killer.kills)} "
        "random ray:: worker SIGKILLs",
        plots,
        {
            "corpus": {"parents": n_parents, "children": children},
            "cost_model": cost.as_dict(),
            "notes": (__doc__ or "").strip().replace("\n", " "),
            "kill_marks_gpu_batches": due,
            "clean_gpu_batches": clean_batches,
            "killed": killer.kills,
            "lost_root_ids": cmp["lost"][:50],
            "missing_root_ids": cmp["missing"][:50],
            "changed_root_ids": cmp["changed"][:50],
            "unknown_root_ids": cmp["unknown"][:50],
            "runs": runs,
            "headline": headline,
        },
    )
    return headline
