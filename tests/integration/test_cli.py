"""The lineage-data command: run a pipeline file, report on its output, inspect one root."""

import json
import os
import re
import subprocess
import sys
import textwrap

import pytest

from lineage_data.connectors.cli import main, summarize

PIPELINE = textwrap.dedent(
    """
    import sys
    import lineage_data as ld
    from lineage_data.connectors.shards import write_shards

    def pages(row):
        if row["n"] < 0:
            raise ValueError("negative page count")
        return ({"page": i} for i in range(row["n"]))

    items = [{"doc": f"d{i}", "n": i - 1} for i in range(6)]
    ds = ld.from_items(items, id_column="doc").expand_lineage(pages, name="pages").reduce_lineage(name="docs")
    write_shards(ds, sys.argv[1], rows_per_shard=2)
    """
)


def test_run_report_inspect(tmp_path, capsys, monkeypatch):
    script = tmp_path / "pipeline.py"
    script.write_text(PIPELINE)
    out = tmp_path / "shards"
    monkeypatch.setenv("LINEAGE_DATA_PROGRESS", "0")
    assert main(["run", str(script), str(out)]) == 0
    capsys.readouterr()

    assert main(["report", str(out), "--json", "--png", str(tmp_path / "t.png")]) == 0
    summary = json.loads(capsys.readouterr().out.split("timeline:")[0])
    assert summary["rows"] == 5
    assert summary["dead_letter_rows"] == 1
    assert summary["dead_letter_by_cause"] == {"ValueError: negative page count": 1}
    stages = {s["stage"]: s for s in summary["stages"]}
    assert stages["pages"]["children"] == sum(range(5))
    assert stages["docs"]["present"] == 5
    assert (tmp_path / "t.png").stat().st_size > 1000

    assert main(["inspect", str(out), "d3"]) == 0
    text = capsys.readouterr().out
    assert "d3: PRESENT" in text
    assert "page: [0, 1]" in text
    assert main(["inspect", str(out), "d0"]) == 0
    assert "FAILED at stage 'pages': ValueError: negative page count" in capsys.readouterr().out
    assert main(["inspect", str(out), "nope"]) == 1


def test_run_a_module_like_python_dash_m(tmp_path, monkeypatch):
    (tmp_path / "my_pipeline.py").write_text(PIPELINE)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("LINEAGE_DATA_PROGRESS", "0")
    monkeypatch.setattr(sys, "path", list(sys.path))
    out = tmp_path / "shards"
    assert main(["run", "-m", "my_pipeline", str(out)]) == 0
    assert summarize(str(out))["rows"] == 5


def test_run_refuses_what_is_not_a_file(monkeypatch):
    monkeypatch.delenv("LINEAGE_DATA_PROGRESS", raising=False)
    with pytest.raises(SystemExit, match="no pipeline file 'pdf'"):
        main(["run", "pdf"])  # examples are modules now: run -m examples.pdf_to_shards
    # a refused run changes nothing (it turned progress on for the rest of the process)
    assert "LINEAGE_DATA_PROGRESS" not in os.environ


def test_a_library_error_is_one_line_without_traceback(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("LINEAGE_DATA_PROGRESS", "0")  # `run` sets it in this process otherwise
    assert main(["report", str(tmp_path / "nothing-here")]) == 0  # an empty output is no error
    script = tmp_path / "bad_plan.py"
    script.write_text("import lineage_data as ld\nld.from_items([{'a': 1}]).reduce_lineage()\n")
    assert main(["run", str(script)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("lineage-data: PlanError: ")
    assert len(err.strip().splitlines()) == 1


SMALL = textwrap.dedent(
    """
    import sys
    import ray
    import lineage_data as ld
    from lineage_data.connectors.shards import write_shards

    ds = ld.from_items([{"n": 2}, {"n": 3}]).expand_lineage(lambda r: ({"i": i} for i in range(r["n"])))
    result = write_shards(ds.reduce_lineage(), sys.argv[1], rows_per_shard=2)
    print("ROWS", result.rows, "CPUS", int(ray.cluster_resources()["CPU"]))
    """
)


def test_a_fresh_local_ray_is_sized_for_small_machines_and_quiet(tmp_path):
    """The command starts its own Ray through ld.init: 8+ logical CPUs, no token-auth warning."""
    script = tmp_path / "small.py"
    script.write_text(SMALL)
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_AUTH_MODE")}
    env["LINEAGE_DATA_PROGRESS"] = "0"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "lineage_data.connectors.cli",
            "run",
            str(script),
            str(tmp_path / "out"),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-3000:]
    rows, cpus = re.search(r"ROWS (\d+) CPUS (\d+)", proc.stdout).groups()
    assert (int(rows), int(cpus) >= 8) == (2, True)
    assert "Token authentication" not in output
