"""``bench.splice``: a long-tailed corpus cut from real PDFs (what ``realpdf --input`` reads)."""

from __future__ import annotations

import random

import pypdfium2
import pytest

from bench.splice import page_counts, splice
from lineage_data.connectors.testing.corpus import write_corpus


def _texts(path) -> list[str]:
    doc = pypdfium2.PdfDocument(str(path))
    try:
        return [doc[i].get_textpage().get_text_range() for i in range(len(doc))]
    finally:
        doc.close()


def test_page_counts_have_the_asked_shape():
    counts = page_counts(195, 7236, 1370, random.Random(7))
    assert len(counts) == 195 and max(counts) == 1370 and min(counts) >= 1
    assert abs(sum(counts) - 7236) < 7236 * 0.05
    assert sorted(counts)[97] < 50  # most documents are short: a long tail
    assert page_counts(1, 10, 4, random.Random(0)) == [4]
    with pytest.raises(ValueError):
        page_counts(0, 10, 4, random.Random(0))


def test_splice_copies_runs_of_source_pages(tmp_path):
    manifest = write_corpus(tmp_path / "src", n_pdfs=2, seed=3, max_pages=9, mean_pages=6)
    sources = [f["path"] for f in manifest["files"]]
    known = {text for path in sources for text in _texts(path)}
    counts = splice(tmp_path / "out", sources, pdfs=6, pages=20, max_pages=7, seed=1)
    written = sorted((tmp_path / "out").glob("*.pdf"))
    assert len(written) == 6 and max(counts) == 7
    for path, count in zip(written, counts, strict=True):
        texts = _texts(path)
        assert len(texts) == count
        assert set(texts) <= known  # every page is a copy of a source page, text layer and all
    again = splice(tmp_path / "again", sources, pdfs=6, pages=20, max_pages=7, seed=1)
    assert again == counts
    assert [_texts(p) for p in sorted((tmp_path / "again").glob("*.pdf"))] == [
        _texts(p) for p in written
    ]
