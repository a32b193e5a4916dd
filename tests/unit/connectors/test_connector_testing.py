"""lineage_data.connectors.testing: seeded generators and the corpus writer; doctests of every connector."""

import doctest
import json
import statistics

import fsspec
import pytest

import lineage_data.connectors.echo_llm
import lineage_data.connectors.errors
import lineage_data.connectors.layout
import lineage_data.connectors.ocr
import lineage_data.connectors.pdf
import lineage_data.connectors.testing.corpus
import lineage_data.connectors.testing.pdfs
import lineage_data.connectors.testing.scans
import lineage_data.connectors.testing.videos
import lineage_data.connectors.video
import lineage_data.connectors.vllm
import lineage_data.storage
from lineage_data.connectors.pdf import render_pages
from lineage_data.connectors.testing.corpus import (
    BAD_FILE_ERRORS,
    bad_files,
    long_tail_page_counts,
    make_pdf,
    write_corpus,
)


@pytest.mark.parametrize(
    "module",
    [
        lineage_data.connectors.errors,
        lineage_data.connectors.layout,
        lineage_data.connectors.ocr,
        lineage_data.connectors.pdf,
        lineage_data.connectors.testing.corpus,
        lineage_data.connectors.testing.pdfs,
        lineage_data.connectors.testing.scans,
        lineage_data.connectors.testing.videos,
        lineage_data.connectors.echo_llm,
        lineage_data.connectors.video,
        lineage_data.connectors.vllm,
        lineage_data.storage,
    ],
)
def test_doctests(module):
    result = doctest.testmod(module)
    assert result.attempted > 0
    assert result.failed == 0


def test_long_tail_counts_are_in_range_seeded_and_long_tailed():
    counts = long_tail_page_counts(2000, seed=4)
    assert counts == long_tail_page_counts(2000, seed=4)
    assert counts != long_tail_page_counts(2000, seed=5)
    assert all(1 <= c <= 427 for c in counts)
    assert 40 <= statistics.mean(counts) <= 60
    assert statistics.median(counts) < statistics.mean(counts)  # skewed: a long right tail
    assert max(counts) == 427
    assert min(counts) == 1


@pytest.mark.parametrize(("n", "max_pages", "mean"), [(0, 427, 47), (7, 1, 47), (60, 10, 3)])
def test_long_tail_counts_edges(n, max_pages, mean):
    counts = long_tail_page_counts(n, max_pages=max_pages, mean=mean)
    assert len(counts) == n
    assert all(1 <= c <= max_pages for c in counts)
    if n >= 50:
        assert max_pages in counts


def test_long_tail_counts_reject_bad_arguments():
    with pytest.raises(ValueError):
        long_tail_page_counts(-1)
    with pytest.raises(ValueError):
        long_tail_page_counts(3, mean=0)


def test_make_pdf_is_deterministic_and_seeded():
    assert make_pdf(4, seed=1, title="t") == make_pdf(4, seed=1, title="t")
    assert make_pdf(4, seed=1, title="t") != make_pdf(4, seed=2, title="t")
    with pytest.raises(ValueError):
        make_pdf(-1)


def test_make_pdf_escapes_the_title():
    pages = list(render_pages({"bytes": make_pdf(1, title=r"a (b) \ c")}, render=False))
    assert r"Document a (b) \ c page 1 of 1" in pages[0]["text"]


def test_bad_files_match_their_error_table():
    files = bad_files()
    assert list(files) == list(BAD_FILE_ERRORS)
    again = bad_files()
    # PDFs and the fixed non-videos are byte-identical; an encoded video is not promised to be (x264's
    # output moves with the machine's load), only what it decodes to
    fixed = [name for name in files if name != "truncated.mp4"]
    assert {n: files[n] for n in fixed} == {n: again[n] for n in fixed}


def test_write_corpus_locally(tmp_path):
    manifest = write_corpus(tmp_path / "c", n_pdfs=5, n_bad=12, n_videos=2, seed=9)
    assert manifest["totals"] == {
        "files": 19,
        "pdfs": 5,
        "pages": manifest["totals"]["pages"],
        "videos": 2,
        "bad": 12,
    }
    assert json.loads((tmp_path / "c" / "manifest.json").read_text()) == manifest
    for entry in manifest["files"]:
        data = (tmp_path / "c" / entry["name"]).read_bytes()
        assert len(data) == entry["bytes"]
        if entry["kind"] == "pdf" and entry["expected_error"] is None:
            pages = list(render_pages({"bytes": data}, render=False))
            assert len(pages) == entry["pages"]
    bad = [f["name"] for f in manifest["files"] if f["expected_error"]]
    assert bad[0] == "bad/00-corrupt.pdf"
    assert bad[9] == "bad/09-corrupt.pdf"
    again = write_corpus(tmp_path / "d", n_pdfs=5, n_bad=12, n_videos=2, seed=9)

    # Equal arguments give equal PDFs and bad files byte for byte; videos promise equal decoded frames
    # only (make_video's docstring), and their encoded size did vary once under load on CI.
    def sizes(m):
        return [(f["name"], f["bytes"]) for f in m["files"] if f["kind"] != "video"]

    assert sizes(again) == sizes(manifest)
    assert [f["name"] for f in again["files"]] == [f["name"] for f in manifest["files"]]


def test_write_corpus_without_videos_skips_video_bad_files(tmp_path):
    manifest = write_corpus(str(tmp_path), n_pdfs=1, n_bad=20, seed=0)
    assert {f["kind"] for f in manifest["files"]} == {"pdf"}


def test_write_corpus_through_fsspec():
    fs = fsspec.filesystem("memory")
    try:
        manifest = write_corpus("memory://corpus-test", n_pdfs=2, n_bad=1, seed=0)
        assert manifest["root"] == "memory://corpus-test"
        names = sorted(fs.find("/corpus-test"))
        assert names == [
            "/corpus-test/bad/00-corrupt.pdf",
            "/corpus-test/manifest.json",
            "/corpus-test/pdfs/doc-00000.pdf",
            "/corpus-test/pdfs/doc-00001.pdf",
        ]
        assert fs.cat("/corpus-test/pdfs/doc-00000.pdf")[:5] == b"%PDF-"
        write_corpus("corpus-test-2", n_pdfs=1, seed=0, fs=fs)
        assert fs.exists("/corpus-test-2/manifest.json")
    finally:
        for root in ("/corpus-test", "/corpus-test-2"):
            if fs.exists(root):
                fs.rm(root, recursive=True)
