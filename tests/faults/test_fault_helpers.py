"""Killing each helper actor the library starts, mid-run: the output must equal the clean run's.

Helper actors are found without knowing the implementation: the actors that are ALIVE after the
first row arrives and were not ALIVE before the run, minus Ray Data's pool actors (``MapWorker...``)
and Ray's internal actors. For each helper class, one run kills one of its instances (seeded choice)
right after the first row: ``ray.kill(..., no_restart=True)`` (through ``ray.get_actor`` when the actor
is named, else through a handle from its id) or SIGKILL of its process. Each run checks that the actor
really died (Ray's actor table) and that parents were still being reduced afterwards.
"""

import random
import time

import faultkit
import pytest

pytestmark = [pytest.mark.faults, pytest.mark.timeout(240)]


def _faulted_run(tmp_path, method, target_class, rng, pipeline=faultkit.pipeline):
    """One run that kills an instance of ``target_class`` (None: the first class found) at row 1."""
    before = faultkit.alive_actors()
    ds = pipeline(tmp_path)
    seen: dict = {}

    def on_row(n):
        if n != 1:
            return
        helpers = faultkit.helpers_started(before)
        seen["helpers"] = sorted({a.class_name for a in helpers.values()})
        cls = target_class or (seen["helpers"][0] if seen["helpers"] else None)
        instances = sorted(
            (a for a in helpers.values() if a.class_name == cls), key=lambda a: a.actor_id
        )
        seen["instances"] = len(instances)
        if not instances:
            return
        victim = rng.choice(instances)
        seen["victim"] = victim
        seen["how"] = faultkit.kill_actor(victim, method)
        seen["at"] = time.time()
        seen["gone"] = faultkit.actor_gone(victim)

    run = faultkit.consume(ds, on_row)
    return run, seen


@pytest.mark.parametrize("method", ["ray_kill", "sigkill"])
def test_each_helper_actor_killed_mid_run_gives_the_clean_output(tmp_path, clean_reference, method):
    rng = random.Random(7)
    classes: list[str] | None = None
    results: dict[str, str] = {}
    index = 0
    while classes is None or index < len(classes):
        target = classes[index] if classes else None
        run, seen = _faulted_run(tmp_path / f"run{index}", method, target, rng)
        if classes is None:
            classes = seen.get("helpers", [])
            assert classes, (
                "no helper actor of the library was found after the first row "
                f"(error: {run.error and faultkit.describe_error(run.error)})"
            )
            target = classes[0]
        results[target] = _verdict(run, seen, clean_reference, tmp_path / f"run{index}")
        index += 1
    print(f"helper classes {classes}: " + " || ".join(f"{c}: {v}" for c, v in results.items()))
    bad = {cls: v for cls, v in results.items() if not v.startswith("ok")}
    assert not bad, f"helper classes {classes}; failures: " + " || ".join(
        f"{cls}: {v}" for cls, v in bad.items()
    )


def test_the_holder_both_reduces_share_killed_mid_run_gives_the_clean_output(tmp_path):
    import ray

    from lineage_data._ray.holders import CPUS_PER_HOLDER, MAX_HOLDERS

    run, seen = _faulted_run(
        tmp_path, "ray_kill", "GroupHolder", random.Random(3), pipeline=faultkit.nested_pipeline
    )
    # the two reduce stages share the plan's holders: one set, not one per stage
    cpus = int(ray.cluster_resources().get("CPU", 1))
    assert seen.get("instances") == max(1, min(MAX_HOLDERS, cpus // CPUS_PER_HOLDER)), seen
    verdict = _verdict(run, seen, faultkit.nested_expected(), tmp_path)
    assert verdict.startswith("ok"), verdict


def _verdict(run, seen, reference, log_dir) -> str:
    victim = seen.get("victim")
    if victim is None:
        return f"no instance to kill after the first row (helpers then: {seen.get('helpers')})"
    what = f"{seen['how']} of {victim.class_name} (pid {victim.pid})"
    if not seen.get("gone"):
        return f"{what}: the actor was still alive afterwards"
    if run.error is not None:
        return f"{what}: {faultkit.describe_error(run.error)}"
    got, duplicated = faultkit.comparable(run.rows)
    problem = faultkit.diff(reference, got, duplicated)
    if problem:
        return f"{what}: output differs from the clean run: {problem}"
    reduces = faultkit.log_times(log_dir, "reduce")
    if not reduces or reduces[-1] <= seen["at"]:
        return f"{what}: no parent was reduced after the kill (not mid-run)"
    return f"ok ({what}; {sum(t > seen['at'] for t in reduces)} parents reduced afterwards)"
