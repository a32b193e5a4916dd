import subprocess
import sys

import pytest


@pytest.mark.parametrize(
    "module",
    [
        "lineage_data",
        "lineage_data.dataset",
        "lineage_data._core",
        "lineage_data._core.local",
        "lineage_data._core.physical",
        "lineage_data.connectors.pdf",
        "lineage_data.connectors.video",
        "lineage_data.connectors.testing",
        "lineage_data.connectors.s3",
        "lineage_data.connectors.vllm",
    ],
)
def test_import_loads_no_ray(module):
    code = (
        f"import sys, {module}\n"
        "bad = sorted(m for m in sys.modules if m == 'ray' or m.startswith('ray.'))\n"
        "print(bad[:5]); sys.exit(1 if bad else 0)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("module", ["lineage_data._ray.coordinator", "lineage_data._ray.holders"])
def test_a_helper_actors_module_loads_none_of_the_user_apis_dependencies(module):
    # a helper actor starts in a fresh process per run: what it imports is start-up time (pandas:
    # ~0.3 s, loaded by the first Arrow array a process builds)
    code = (
        f"import sys, {module}\n"
        "heavy = ('ray.data', 'polars', 'fsspec', 'lineage_data.dataset', 'pandas')\n"
        "bad = sorted(m for m in sys.modules if m in heavy)\n"
        "print(bad); sys.exit(1 if bad else 0)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
