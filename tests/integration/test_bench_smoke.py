"""Smoke runs of every benchmark: ``python -m bench all --scale smoke`` once, ``faults`` on its own.

Each subprocess starts (and stops) its own local Ray, so nothing is shared with the test session's Ray.
Only the shape and sanity of the results are checked, never timings.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from children import child_env

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


def _bench(name: str, out: Path) -> dict:
    """Run ``python -m bench NAME --scale smoke`` (``all``: every bench of ``bench all``, one Ray)."""
    env = child_env()
    proc = subprocess.run(
        [sys.executable, "-m", "bench", name, "--scale", "smoke", "--out", str(out)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, f"bench {name} failed:\n{proc.stderr[-4000:]}"
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    assert lines, f"bench {name} printed nothing on stdout:\n{proc.stderr[-2000:]}"
    return json.loads(lines[-1])


@pytest.fixture(scope="module")
def smoke_all(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, Path]:
    """``bench all --scale smoke`` once (one process, one Ray) for every bench of ``all``."""
    out = tmp_path_factory.mktemp("bench-all")
    return _bench("all", out), out


def _headline(name: str, run: tuple[dict, Path]) -> dict:
    headlines, out = run
    headline = headlines[name]
    assert headline["bench"] == name
    assert headline["scale"] == "smoke"
    results = list(out.glob(f"{name}-smoke-*.json"))
    assert len(results) == 1, results
    assert json.loads(results[0].read_text())["headline"] == headline
    return headline


def _run_bench(name: str, out: Path) -> dict:
    return _headline(name, ({name: _bench(name, out)}, out))


def _frac(value: float, *, zero_ok: bool = False) -> None:
    assert isinstance(value, int | float)
    assert (value >= 0 if zero_ok else value > 0) and value <= 1, value


def test_longtail_smoke(smoke_all: tuple[dict, Path]) -> None:
    h = _headline("longtail", smoke_all)
    assert h["wall_ratio_vs_ray_data"] > 0
    assert h["wall_ratio_vs_floor"] > 0
    _frac(h["first_commit_frac"])
    _frac(h["tail_frac"], zero_ok=True)
    _frac(h["gpu_busy_frac"])
    assert set(h["wall_s"]) >= {"floor", "ray_data", "lineage_data", "lineage_data_shards"}
    assert h["shards"]["first_shard_s"] > 0
    assert list(smoke_all[1].glob("longtail-smoke-*.png"))


def test_poison_smoke(smoke_all: tuple[dict, Path]) -> None:
    h = _headline("poison", smoke_all)
    _frac(h["suppressed_frac"], zero_ok=True)
    assert h["wall_ratio_vs_clean"] > 0
    # Semantics, not timing: Ray Data cannot stop siblings; every poisoned parent ends SUPPRESSED.
    assert h["ray_data_suppressed_frac"] == 0
    assert h["ray_data_siblings_computed_then_discarded"] == h["siblings"]
    assert h["poisoned_parents_suppressed"] >= 1
    assert 0 <= h["siblings_computed_then_discarded"] <= h["siblings"]
    assert list(smoke_all[1].glob("poison-smoke-*.png"))


def test_overhead_smoke(smoke_all: tuple[dict, Path]) -> None:
    h = _headline("overhead", smoke_all)
    assert h["overhead_ratio"] > 0
    assert h["overhead_ratio_from_ray"] > 0
    assert h["median_rep_ratio"] > 0 and h["median_rep_ratio_from_ray"] > 0
    assert h["rows"] > 0


def test_coordinator_smoke(smoke_all: tuple[dict, Path]) -> None:
    h = _headline("coordinator", smoke_all)
    assert h["events_per_s"] > 0
    assert h["bytes_per_in_flight_parent"] > 0
    assert h["call_ms"] > 0 and h["call_ms_ray"] > 0
    assert 0 < h["bytes_per_root_kept_to_the_end"] < 1000


def test_smallparents_smoke(smoke_all: tuple[dict, Path]) -> None:
    h = _headline("smallparents", smoke_all)
    assert h["wall_ratio_vs_floor"] > 0
    assert h["wall_ratio_vs_ray_data"] > 0
    assert h["median_rep_ratio_vs_floor"] > 0 and h["median_rep_ratio_vs_ray_data"] > 0
    assert set(h["wall_s"]) == {"floor", "ray_data", "lineage_data", "floor_flat_map"}
    assert h["children"] >= h["parents"] > 0


def test_faults_smoke(tmp_path: Path) -> None:
    # Shape only: whether the faulted output is correct is what tests/faults checks.
    h = _run_bench("faults", tmp_path)
    assert isinstance(h["correct"], bool)
    assert h["kills"] >= 1
    assert isinstance(h["lost_roots"], int) and h["lost_roots"] >= 0
    assert "repaired_roots" in h
    assert h["wall_clean_s"] > 0 and h["wall_faulted_s"] > 0
    assert h["wall_ratio_vs_clean"] > 0
    assert list(tmp_path.glob("faults-smoke-*.png"))


def test_realpdf_smoke(smoke_all: tuple[dict, Path]) -> None:
    h = _headline("realpdf", smoke_all)
    assert h["keep_images"] is False
    assert h["wall_ratio_vs_floor"] > 0 and h["wall_ratio_vs_ray_data"] > 0
    assert h["peak_object_store_ratio_vs_ray_data"] >= 0
    assert set(h["wall_s"]) == {"floor", "ray_data", "lineage_data"}
    assert set(h["spilled_mib"]) == set(h["wall_s"])
    _frac(h["first_doc_frac"]["lineage_data"])
    assert h["pages"] > 0


def test_ocr_smoke(smoke_all: tuple[dict, Path]) -> None:
    # The model really ran, in order: the text comes from page images only.
    h = _headline("ocr", smoke_all)
    assert 0 <= h["cer"] <= 0.10
    assert h["wall_ratio_vs_floor"] > 0 and h["wall_ratio_vs_ray_data"] > 0
    assert h["pages_per_s_vs_limit"] > 0
    assert set(h["wall_s"]) >= {"floor", "ray_data", "lineage_data", "limit"}
    assert h["peak_driver_rss_mib"] > 0
    results = json.loads(next(smoke_all[1].glob("ocr-smoke-*.json")).read_text())
    assert all(results["same_text_as_lineage_data"].values())


def test_repeat_smoke(tmp_path: Path):
    """``python -m bench.repeat``: one cold run and warm ones of a system, every wall kept."""
    proc = subprocess.run(
        [sys.executable, "-m", "bench.repeat", "--runs", "2", "--out", str(tmp_path)],
        cwd=REPO,
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    headline = json.loads(proc.stdout.splitlines()[-1])
    (written,) = tmp_path.glob("repeat-lineage_data-smoke-*.json")
    assert json.loads(written.read_text()) == headline
    assert len(headline["walls_s"]) == 2 and all(w > 0 for w in headline["walls_s"])
    assert headline["cold_s"] == headline["walls_s"][0]
    assert headline["warm_median_s"] == headline["walls_s"][1]
