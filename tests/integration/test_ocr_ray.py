"""The three-level OCR pipeline on local Ray, with the real model (RapidOCR) on image-only PDFs.

Documents -> pages -> lines -> recognized lines -> page text -> document text: every root comes
back once, the text is the text the PDF shows (character error rate against the generator's), in
page order, and bad input (a cut file, a page PDFium cannot load, an unreadable crop) is the
outcome of its own document only.
"""

import re

import pytest
from ray.data import ActorPoolStrategy
from reference import by_root, status

import lineage_data as ld
from lineage_data.connectors.jobs.pdf import build_ocr
from lineage_data.connectors.ocr import (
    DetectLines,
    RecognizeLines,
    character_error_rate,
    document_text,
    page_text,
)
from lineage_data.connectors.pdf import PdfPages
from lineage_data.connectors.testing.corpus import (
    bad_files,
    make_scanned_pdf,
    write_scanned_corpus,
)
from lineage_data.connectors.testing.pdfs import _write_pdf

DPI = 50  # 425 x 550 px pages: ~0.4 s of detection each on one core, and still no character lost
CER = 0.1
POOL = ActorPoolStrategy(size=1)  # one model per stage: 2 cores, and a model loads in ~1 s
MARKER = re.compile(r"<!-- page (\d+) -->\n")

# A page PDFium cannot load (its page-tree entry is a string, not a page), after a blank page.
UNLOADABLE_PAGE = _write_pdf(
    [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R 4 0 R] /Count 2 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] >>",
        b"(not a page)",
    ]
)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """Three seeded scans (1, 1 and 3 pages), one with a blank middle page, and two bad files.

    Returns the folder and the true page texts by path (None for the bad files).
    """
    root = tmp_path_factory.mktemp("ocr")
    manifest = write_scanned_corpus(
        root, n_pdfs=3, max_pages=3, mean_pages=2, dpi=DPI, lines=(2, 3)
    )
    scans = root / "scans"
    pages = {f["path"]: f["text"].split("\n\n") for f in manifest["files"]}
    data, texts = make_scanned_pdf(
        [["first page of the report", "table figure"], [], ["last page", "the end of it"]], dpi=DPI
    )
    (scans / "blank-middle.pdf").write_bytes(data)
    pages[str(scans / "blank-middle.pdf")] = texts
    (scans / "truncated.pdf").write_bytes(bad_files(video=False)["truncated.pdf"])
    (scans / "unloadable-page.pdf").write_bytes(UNLOADABLE_PAGE)
    pages[str(scans / "truncated.pdf")] = pages[str(scans / "unloadable-page.pdf")] = None
    return scans, pages


def markdown_pages(markdown):
    """``[(page number, text), ...]`` of a :func:`document_text` markdown."""
    parts = MARKER.split(markdown)
    assert parts[0] == ""
    return [
        (int(n), text.removesuffix("\n\n"))
        for n, text in zip(parts[1::2], parts[2::2], strict=True)
    ]


def test_every_scan_is_read_in_page_order_and_bad_files_fail_alone(corpus):
    scans, truth = corpus
    ds = build_ocr(ld.read_files(str(scans)), concurrency=1, batch_size=8, dpi=DPI)
    out = by_root(ds.take_all(), ds.report())
    assert set(out) == set(truth)  # one row per file, none twice (by_root checks)
    for path, texts in truth.items():
        if texts is None:
            continue
        row = out[path]
        assert row["_lineage_outcome"] == "PRESENT", status(row)
        assert row["path"] == path
        assert row["pages"] == len(texts)
        assert character_error_rate(row["text"], "\n\n".join(texts)) <= CER
        sections = markdown_pages(row["markdown"])
        assert [n for n, _ in sections] == list(range(1, len(texts) + 1))
        for (_, got), want in zip(sections, texts, strict=True):
            assert character_error_rate(got, want) <= CER, (got, want)
            assert (got == "") == (want == "")

    blank = out[str(scans / "blank-middle.pdf")]
    assert [text for _, text in markdown_pages(blank["markdown"])][1] == ""

    outcome, cause, stage = status(out[str(scans / "truncated.pdf")])
    assert (outcome, stage) == ("FAILED", "render_pages")
    assert cause.startswith("TruncatedInputError: ")
    assert "no %%EOF marker" in cause

    # page 1 fails in detect_lines with render_pages' own reason; its document is SUPPRESSED
    bad_page = str(scans / "unloadable-page.pdf")
    assert status(out[bad_page]) == (
        "SUPPRESSED",
        f"CorruptInputError: <page>: {bad_page}: page 1 cannot be loaded (Failed to load page.)",
        "detect_lines",
    )

    stages = {r["stage"]: r for r in ds.report().stages.iter_rows(named=True)}
    assert stages["detect_lines"]["failed"] == 1


# ------------------------------------------------------------------------- an unreadable line crop


def corrupt_line(target, index):
    """A batch stage that replaces the crop of line ``index`` of ``target``'s pages with noise."""

    def corrupt(batch):
        rows = batch.to_pylist()
        for row in rows:
            if row["path"] == target and row["line_index"] == index:
                row["crop"] = b"\x89PNG but not really"
        return {name: [row[name] for row in rows] for name in batch.column_names}

    return corrupt


def ocr_with_corrupt_crop(scans, target, *, on_child_failure):
    """``build_ocr``'s stages, with ``path`` carried down to the lines for ``corrupt_line``."""
    pages = ld.read_files(str(scans)).expand_lineage(
        PdfPages, name="render_pages", carry=["path"], fn_constructor_kwargs={"dpi": DPI}
    )
    lines = pages.expand_lineage(
        DetectLines, name="detect_lines", carry=["path"], compute=POOL, num_cpus=0.25
    )
    lines = lines.map_batches(
        corrupt_line(target, 1), name="corrupt", batch_format="pyarrow", num_cpus=0.25
    )
    text = lines.map_batches(
        RecognizeLines,
        name="recognize_lines",
        batch_size=8,
        compute=POOL,
        num_cpus=0.25,
    )
    return text.reduce_lineage(page_text, on_child_failure=on_child_failure).reduce_lineage(
        document_text
    )


@pytest.fixture(scope="module")
def two_scans(tmp_path_factory):
    scans = tmp_path_factory.mktemp("crop")
    truth = {}
    for name, lines in {
        "a.pdf": ["window layout column", "header and footer", "sample value"],
        "b.pdf": ["training corpus word", "number system"],
    }.items():
        data, (text,) = make_scanned_pdf([lines], dpi=DPI)
        (scans / name).write_bytes(data)
        truth[str(scans / name)] = text.splitlines()
    return scans, truth


@pytest.mark.parametrize("on_child_failure", ["fail", "skip"])
def test_an_unreadable_crop_fails_its_line_and_only_its_document(two_scans, on_child_failure):
    scans, truth = two_scans
    target, other = str(scans / "a.pdf"), str(scans / "b.pdf")
    ds = ocr_with_corrupt_crop(scans, target, on_child_failure=on_child_failure)
    out = by_root(ds.take_all(), ds.report())
    assert set(out) == {target, other}
    assert out[other]["_lineage_outcome"] == "PRESENT"
    assert character_error_rate(out[other]["text"], "\n".join(truth[other])) <= CER
    stages = {r["stage"]: r for r in ds.report().stages.iter_rows(named=True)}
    assert stages["recognize_lines"]["failed"] == 1
    if on_child_failure == "fail":
        cause = "unreadable crop: not a PNG/JPEG image (19 bytes)"
        assert status(out[target]) == ("SUPPRESSED", cause, "recognize_lines")
    else:  # the page is reduced without line 1
        kept = [line for i, line in enumerate(truth[target]) if i != 1]
        assert out[target]["_lineage_outcome"] == "PRESENT"
        assert out[target]["text"].count("\n") == len(kept) - 1
        assert character_error_rate(out[target]["text"], "\n".join(kept)) <= CER
