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
