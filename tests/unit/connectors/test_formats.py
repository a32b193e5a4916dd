"""Shard formats: each read back by its own library (no Ray; Ray Data's reader is in integration)."""

from __future__ import annotations

import gzip
import io
import json

import fsspec
import pyarrow as pa
import pytest
from PIL import Image

from lineage_data._core import columns as C
from lineage_data.connectors.formats import sample_key
from lineage_data.connectors.shards import ShardWriter, read_manifest


def _png(seed: int) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (4, 3), (seed, 0, 0)).save(out, format="PNG")
    return out.getvalue()


def documents(roots):
    return pa.table(
        {
            C.ROOT: roots,
            C.OUTCOME: ["PRESENT"] * len(roots),
            "path": [f"s3://corpus/{r}" for r in roots],
            "pages": list(range(len(roots))),
            "markdown": [f"# {r}\n\ntext of {r}" for r in roots],
            "images": [[_png(i), _png(i + 1)] for i in range(len(roots))],
        }
    )


def write(tmp_path, fmt, roots=("a.pdf", "b.pdf", "c.pdf"), **options):
    (tmp_path / "_manifest").mkdir(exist_ok=True)  # as write_shards makes it
    w = ShardWriter(
        fsspec.filesystem("file"),
        str(tmp_path),
        run_id="run-1",
        rows_per_shard=2,
        format=fmt,
        **options,
    )
    w.add(documents(list(roots)))
    return w.close()


def test_webdataset_shards_read_back_with_the_webdataset_package(tmp_path):
    import webdataset as wds

    entries = write(tmp_path, "webdataset")
    assert [e.file.endswith(".tar") for e in entries] == [True, True]
    urls = [str(tmp_path / e.file) for e in read_manifest(str(tmp_path)).shards]
    samples = list(wds.WebDataset(urls, shardshuffle=False, empty_check=False))
    assert [s["__key__"] for s in samples] == [sample_key(r) for r in ("a.pdf", "b.pdf", "c.pdf")]
    first = samples[0]
    assert first["txt"].decode() == "# a.pdf\n\ntext of a.pdf"
    meta = json.loads(first["json"])
    assert meta == {"id": "a.pdf", "path": "s3://corpus/a.pdf", "pages": 0}
    assert Image.open(io.BytesIO(first["1.png"])).size == (4, 3)
    assert set(first) >= {"0.png", "1.png"}
    assert not list(tmp_path.glob("_staging/*"))  # staged files were moved into place


def test_jsonl_shards_are_dolma_documents(tmp_path):
    entries = write(tmp_path, "jsonl", source="corpus")
    docs = []
    for entry in entries:
        with gzip.open(tmp_path / entry.file, "rt") as f:
            docs += [json.loads(line) for line in f]
    assert [d["id"] for d in docs] == ["a.pdf", "b.pdf", "c.pdf"]
    assert docs[1] == {
        "id": "b.pdf",
        "text": "# b.pdf\n\ntext of b.pdf",
        "source": "corpus",
        "metadata": {"path": "s3://corpus/b.pdf", "pages": 1, "images": [None, None]},
    }


def test_an_unknown_format_is_refused(tmp_path):
    with pytest.raises(ValueError, match="format must be one of"):
        write(tmp_path, "csv")


def test_lance_shards_are_one_lance_dataset_once_rolled_forward(tmp_path):
    import lance

    from lineage_data.connectors import lance_format

    fs = fsspec.filesystem("file")
    entries = write(tmp_path, "lance", row_group_rows=1)  # a shard of two batches: one fragment
    assert [e.file.startswith("data/") and e.file.endswith(".lance") for e in entries] == [True] * 2
    assert not list(tmp_path.glob("_versions"))  # written and in the manifest, not in Lance yet
    lance_format.roll_forward(fs, str(tmp_path))
    lance_format.roll_forward(fs, str(tmp_path))  # idempotent: nothing appended twice
    dataset = lance.dataset(str(tmp_path))
    table = dataset.to_table()
    assert table[C.ROOT].to_pylist() == ["a.pdf", "b.pdf", "c.pdf"]
    assert table.column_names == [C.ROOT, "path", "pages", "markdown", "images"]
    assert table["images"][0].as_py()[0] == _png(0)
    assert dataset.version == 1
    assert not list(tmp_path.glob("_staging/*"))  # the staged rows became the fragment


def test_lance_reconcile_commits_a_fragment_lance_lacks_and_removes_uncommitted_ones(tmp_path):
    import lance

    from lineage_data.connectors import lance_format

    fs = fsspec.filesystem("file")
    write(tmp_path, "lance", roots=("a.pdf", "b.pdf"))
    lance_format.roll_forward(fs, str(tmp_path))
    # a run killed after its manifest entry, before the Lance commit ...
    write(tmp_path, "lance", roots=("c.pdf",))
    # ... and one killed after its fragment, before the entry: no entry names it
    (uncommitted,) = write(tmp_path, "lance", roots=("d.pdf",))
    (tmp_path / "_manifest" / f"{uncommitted.entry}.json").unlink()
    lost = tmp_path / uncommitted.file
    assert lost.exists()  # written but uncommitted: invisible to Lance, removed by reconcile

    lance_format.reconcile(fs, str(tmp_path))
    lance_format.reconcile(fs, str(tmp_path))
    roots = lance.dataset(str(tmp_path)).to_table()[C.ROOT].to_pylist()
    assert sorted(roots) == ["a.pdf", "b.pdf", "c.pdf"]
    assert not lost.exists()
    assert len(list(tmp_path.glob("_fragments/*.json"))) == len(list(tmp_path.glob("data/*.lance")))


def test_lance_shards_keep_the_first_shards_schema(tmp_path):
    from lineage_data.connectors.shards import ShardError

    write(tmp_path, "lance", roots=("a.pdf", "b.pdf"))
    w = ShardWriter(
        fsspec.filesystem("file"), str(tmp_path), run_id="run-2", rows_per_shard=2, format="lance"
    )
    w.add(documents(["c.pdf"]).append_column("extra", pa.array([1])))
    with pytest.raises(ShardError, match="extra"):
        w.close()
