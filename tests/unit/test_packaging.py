"""What the wheel installs: the ``lineage_data`` import package only, without the test tooling."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _tracked_copy(dest: Path) -> Path:
    """The repository's tracked files (links kept as links), so no stale build output leaks in."""
    names = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, check=True, capture_output=True
    ).stdout.split(b"\0")
    for name in filter(None, names):
        source, target = ROOT / name.decode(), dest / name.decode()
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_symlink():
            target.symlink_to(source.readlink())
        elif source.is_file():
            shutil.copy2(source, target)
    return dest


def test_wheel_installs_lineage_data_only(tmp_path):
    source = _tracked_copy(tmp_path / "src")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(tmp_path / "dist"),
            str(source),
        ],
        check=True,
        capture_output=True,
    )
    (wheel,) = (tmp_path / "dist").glob("*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    packages = {
        name.split("/")[0] for name in names if not name.split("/")[0].endswith(".dist-info")
    }
    assert packages == {"lineage_data"}
    assert "lineage_data/connectors/pdf.py" in names
    assert "lineage_data/connectors/jobs/pdf.py" in names
    assert "lineage_data/connectors/echo_llm.py" in names
    assert not [name for name in names if name.startswith("lineage_data/connectors/testing")]
    entry_points = next(name for name in names if name.endswith("entry_points.txt"))
    assert (
        "lineage-data = lineage_data.connectors.cli:main"
        in zipfile.ZipFile(wheel).read(entry_points).decode()
    )


def test_connectors_has_one_import_name():
    """The folder is lineage_data.connectors; importing it as ``connectors`` fails loudly."""
    out = subprocess.run(
        [sys.executable, "-c", "import connectors"], cwd=ROOT, capture_output=True, text=True
    )
    assert out.returncode != 0
    assert "lineage_data.connectors" in out.stderr
