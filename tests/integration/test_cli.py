"""The lineage-data command: run a pipeline file, report on its output, inspect one root."""

import json
import textwrap

from connectors.cli import main

PIPELINE = textwrap.dedent(
    '''
    import sys
    import lineage_data as ld
    from connectors.shards import write_shards

    def pages(row):
        if row["n"] < 0:
            raise ValueError("negative page count")
        return ({"page": i} for i in range(row["n"]))

    items = [{"doc": f"d{i}", "n": i - 1} for i in range(6)]
    ds = ld.from_items(items, id_column="doc").expand_lineage(pages, name="pages").reduce_lineage(name="docs")
    write_shards(ds, sys.argv[1], rows_per_shard=2)
    '''
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
