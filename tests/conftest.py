"""Shared fixtures: one local Ray per test session (used by integration and e2e tests)."""

import os
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def ray_session():
    """Local Ray with 8 logical CPUs and 4 simulated GPUs, shared by the whole session.

    Fractional-CPU actor pools next to 1-CPU task steps deadlock on 2 real cores unless Ray gets
    logical resources. Test folders go on the workers' path so module-level UDFs unpickle there.
    """
    import logging

    import ray

    logging.getLogger("ray.data").setLevel(logging.WARNING)

    paths = [
        str(ROOT),
        str(ROOT / "tests"),
        str(ROOT / "tests" / "integration"),
        str(ROOT / "tests" / "e2e"),
    ]
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(paths + ([old] if old else []))
    if not ray.is_initialized():
        import lineage_data as ld

        ld.init(num_gpus=4, include_dashboard=False, log_to_driver=False)  # 8+ logical CPUs
    ray.data.DataContext.get_current().enable_progress_bars = False
    yield ray
    ray.shutdown()
