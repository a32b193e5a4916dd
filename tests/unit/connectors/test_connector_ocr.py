"""lineage_data.connectors.ocr with the real model (RapidOCR, PP-OCRv4, in-process): lines, crops, reducers.

The model drops some spaces between words, so recognized text is compared by character error
rate (whitespace removed), line by line where the order matters.
"""

import io
import subprocess
import sys

import cv2
import numpy as np
import pyarrow as pa
import pytest
from PIL import Image, ImageDraw, ImageFont

from lineage_data._core.failures import RecordFailure
from lineage_data.connectors.errors import CorruptInputError
from lineage_data.connectors.ocr import (
    DetectLines,
    RecognizeLines,
    _gap_spaces,  # the pure rule of gap_spaces
    character_error_rate,
    document_text,
    page_text,
)
from lineage_data.connectors.pdf import PdfPages, render_pages
from lineage_data.connectors.testing.corpus import (
    make_page_image,
    make_pdf,
    make_scanned_pdf,
)
from lineage_data.connectors.testing.pdfs import _write_pdf

CER = 0.1
LINES = ["lineage data page", "the quick model report", "batch order retry", "sample window layout"]

# Two pages: a blank one, and one PDFium cannot load (its page-tree entry is a string).
UNLOADABLE_SECOND_PAGE = _write_pdf(
    [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R 4 0 R] /Count 2 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] >>",
        b"(not a page)",
    ]
)


@pytest.fixture(scope="module")
def detect():
    return DetectLines()


@pytest.fixture(scope="module")
def recognize():
    return RecognizeLines()


@pytest.fixture(scope="module")
def page():
    image, text = make_page_image(LINES, width=500, height=260)
    assert text.splitlines() == LINES  # every line fits
    return {"page_index": 0, "image": image, "error": None}


@pytest.fixture(scope="module")
def lines(detect, page):
    return list(detect(page))


def recognized(recognize, lines):
    """The page's lines with ``text`` and ``confidence``, as the pipeline's rows."""
    out = recognize(
        {"crop": [line["crop"] for line in lines], "box": [line["box"] for line in lines]}
    )
    return [
        {"box": box, "text": text, "confidence": score}
        for box, text, score in zip(out["box"], out["text"], out["confidence"], strict=True)
    ]


def assert_reads(texts, expected):
    assert len(texts) == len(expected), texts
    for got, want in zip(texts, expected, strict=True):
        assert character_error_rate(got, want) <= CER, (got, want)


def png(width, height, value=255):
    out = io.BytesIO()
    Image.new("L", (width, height), value).save(out, format="PNG")
    return out.getvalue()


# ------------------------------------------------------------------------------------- DetectLines


def test_lines_come_in_reading_order_with_boxes_scores_and_crops(lines):
    assert [line["line_index"] for line in lines] == list(range(len(LINES)))
    assert {line["line_count"] for line in lines} == {len(LINES)}
    tops = []
    for line in lines:
        x0, y0, x1, y1, x2, y2, x3, y3 = line["box"]
        assert 0 <= x0 < x1 <= 500 and 0 <= y0 < y3 <= 260  # page pixels, clockwise from top-left
        assert x2 > x3 and y1 < y2
        assert 0.5 <= line["det_score"] <= 1  # box_thresh=0.5 keeps nothing below
        crop = cv2.imdecode(np.frombuffer(line["crop"], np.uint8), cv2.IMREAD_COLOR)
        assert crop.shape[:2] == (line["crop_height"], line["crop_width"])
        tops.append(y0)
    assert tops == sorted(tops)


def test_recognized_lines_read_as_drawn_and_join_into_the_page_text(recognize, lines, page):
    rows = recognized(recognize, lines)
    assert_reads([row["text"] for row in rows], LINES)
    assert all(0 < row["confidence"] <= 1 for row in rows)
    out = page_text(page, rows)
    assert set(out) == {"page_index", "text", "lines", "confidence"}  # no image, no error
    assert out["lines"] == len(LINES)
    assert_reads(out["text"].split("\n"), LINES)
    assert out["confidence"] == pytest.approx(
        sum(r["confidence"] for r in rows) / len(rows), abs=1e-4
    )


def test_two_boxes_on_one_row_are_read_left_to_right_and_joined_with_a_space(detect, recognize):
    image = Image.new("L", (500, 260), 255)  # the size of `page`: the same detector input shape
    draw = ImageDraw.Draw(image)
    font = ImageFont.load_default(size=14)
    draw.text(
        (300, 27), "right side", font=font, fill=0
    )  # higher: a (y, x) sort alone puts it first
    draw.text((30, 31), "left words", font=font, fill=0)
    draw.text((30, 80), "next row here", font=font, fill=0)
    data = io.BytesIO()
    image.save(data, format="PNG")
    rows = recognized(recognize, list(detect({"image": data.getvalue()})))
    assert_reads([row["text"] for row in rows], ["left words", "right side", "next row here"])
    first, second = page_text({}, rows)["text"].split("\n")
    assert character_error_rate(first, "left words right side") <= CER
    assert character_error_rate(second, "next row here") <= CER


@pytest.mark.parametrize(
    "image",
    [
        make_page_image([], width=500, height=260)[0],
        make_page_image([], width=500, height=260, image_format="JPEG")[0],
        png(1, 1),
        png(120, 80, value=0),  # all black: no text either
    ],
    ids=["white-png", "white-jpeg", "one-pixel", "black"],
)
def test_a_page_without_text_has_no_lines_and_empty_text(detect, image):
    page = {"page_index": 3, "image": image, "error": None}
    assert list(detect(page)) == []
    assert page_text(page, []) == {"page_index": 3, "text": "", "lines": 0, "confidence": None}


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ({"image": None}, "<page>: no 'image' to run OCR on"),
        ({"page_index": 0}, "<page>: no 'image' to run OCR on"),
        ({"image": None, "error": "a.pdf: page 3 cannot be loaded (x)"}, "<page>: a.pdf: page 3 "),
        (
            {"image": b"garbage", "path": "s3://b/a.pdf"},
            "s3://b/a.pdf: the page image cannot be decoded",
        ),
        ({"image": b""}, "<page>: the page image cannot be decoded"),
        ({"image": b"\x89PNG\r\n\x1a\n" + b"\0" * 40}, "<page>: the page image cannot be decoded"),
    ],
    ids=["none", "no-column", "render-error", "garbage", "empty", "png-header-only"],
)
def test_a_page_without_a_decodable_image_raises_corrupt_input(detect, row, message):
    lines = detect(row)  # a generator: the page is read on the first next()
    with pytest.raises(CorruptInputError) as caught:
        next(lines)
    assert str(caught.value).startswith(message)


def test_image_column_names_where_the_page_image_is(page):
    detect = DetectLines(image_column="png")
    assert [line["line_index"] for line in detect({"png": page["image"]})] == [0, 1, 2, 3]
    with pytest.raises(CorruptInputError, match="no 'png' to run OCR on"):
        list(detect(page))


# ---------------------------------------------------------------------------------- RecognizeLines


def test_an_undecodable_crop_fails_its_row_and_the_rest_of_the_batch_is_recognized(
    recognize, lines
):
    crops = [lines[0]["crop"], b"garbage", None, lines[2]["crop"], b"", lines[1]["crop"][:50]]
    batch = {"crop": crops, "line_index": [0, 9, 9, 2, 9, 1], "text": ["old"] * 6}
    out = recognize(batch)
    assert list(out) == ["line_index", "text", "confidence"]  # the crop is dropped, text replaced
    assert out["line_index"] == [0, 9, 9, 2, 9, 1]
    assert_reads([out["text"][0], out["text"][3]], [LINES[0], LINES[2]])
    assert out["text"][1] == RecordFailure("unreadable crop: not a PNG/JPEG image (7 bytes)")
    assert out["text"][2] == RecordFailure("unreadable crop: not a PNG/JPEG image (0 bytes)")
    assert out["text"][4] == RecordFailure("unreadable crop: not a PNG/JPEG image (0 bytes)")
    assert out["text"][5] == RecordFailure("unreadable crop: not a PNG/JPEG image (50 bytes)")
    assert [c is None for c in out["confidence"]] == [False, True, True, False, True, True]


def test_an_arrow_batch_keeps_its_columns_and_with_keep_crop_its_crops(lines):
    crops = [line["crop"] for line in lines]
    batch = pa.table(
        {"crop": pa.array([*crops, None], pa.binary()), "page": [7] * (len(crops) + 1)}
    )
    out = RecognizeLines(keep_crop=True)(batch)
    assert list(out) == ["crop", "page", "text", "confidence"]
    assert out["crop"] == [*crops, None]
    assert out["page"] == [7] * (len(crops) + 1)
    assert_reads(out["text"][:-1], LINES)
    assert out["text"][-1].cause == "unreadable crop: not a PNG/JPEG image (0 bytes)"


def test_chunks_of_crops_padded_together_keep_the_batch_order(lines):
    crops = [line["crop"] for line in reversed(lines)]  # widths out of order: the model sorts them
    out = RecognizeLines(chunk_size=3)({"crop": crops})
    assert_reads(out["text"], LINES[::-1])


def line_of(ink):
    """A crop drawn as one column per character of ``ink`` ("#" ink, " " blank), and the
    centre of each ink run (one per recognized character)."""
    empty = [c == " " for c in ink]
    centres, start = [], None
    for x, c in enumerate(ink + " "):
        if c != " " and start is None:
            start = x
        elif c == " " and start is not None:
            centres.append((start + x - 1) / 2)
            start = None
    return centres, empty


@pytest.mark.parametrize(
    ("text", "ink", "expected"),
    [
        ("themime", "# # #     # # # #", "the mime"),  # a lost word space comes back
        ("the mime", "# # #     # # # #", "the mime"),  # the model's own space is kept
        ("•abc", "#    # # #", "• abc"),  # a bullet and its item
        # monospace: letters stand apart everywhere, so a gap as wide as theirs is no space
        ("asn1_node", "#   #   #   #   #   #   #   #   #", "asn1_node"),
        ("x=1", "#     #     #", "x=1"),  # punctuation gaps are glyph shapes, not spaces
        ("ASN.1", "# # # #    #", "ASN.1"),
        ("a", "#", "a"),
    ],
)
def test_gap_spaces_puts_back_only_clear_word_gaps_between_letters(text, ink, expected):
    centres, empty = line_of(ink)
    if " " in text:  # the model's space has no ink: it sits between the two letters around it
        k = text.index(" ")
        centres.insert(k, (centres[k - 1] + centres[k]) / 2)
    assert _gap_spaces(text, centres, empty, height=12) == expected


def test_gap_spaces_puts_back_the_space_the_model_drops_and_changes_nothing_else(lines):
    crops = [line["crop"] for line in lines]
    model = RecognizeLines(gap_spaces=False)({"crop": crops})["text"]
    assert model[2] == "batch orderretry"  # PP-OCRv4 on Pillow's font
    assert RecognizeLines()({"crop": crops})["text"] == LINES


def test_a_batch_without_the_crop_column_raises_key_error(recognize):
    with pytest.raises(KeyError, match="RecognizeLines: the batch has no 'crop' column"):
        recognize({"image": [b"x"]})


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: DetectLines(device="gpu"), r"device must be one of \['cpu', 'cuda'\], got 'gpu'"),
        (lambda: DetectLines(threads=0), "threads must be >= 1 or None"),
        (lambda: RecognizeLines(device="tpu"), "device must be one of"),
        (lambda: RecognizeLines(threads=-1), "threads must be >= 1 or None"),
        (lambda: RecognizeLines(chunk_size=0), "chunk_size must be >= 1, got 0"),
        (lambda: RecognizeLines(device="cuda", chunk_size=-3), "chunk_size must be >= 1, got -3"),
    ],
    ids=["detect-device", "detect-threads", "rec-device", "rec-threads", "chunk", "cuda-chunk"],
)
def test_bad_options_raise_value_error_when_the_stage_is_built(build, message):
    with pytest.raises(ValueError, match=message):
        build()


# ------------------------------------------------------------------ render_pages(page_errors=...)


def test_render_pages_checks_page_errors_when_called():
    with pytest.raises(ValueError, match="page_errors must be 'raise' or 'keep', got 'skip'"):
        render_pages({}, page_errors="skip")
    with pytest.raises(ValueError, match="page_errors"):
        PdfPages(page_errors="Keep")


def test_keep_adds_error_none_to_every_good_page_and_raise_adds_no_column():
    data = make_pdf(3, seed=1)
    kept = list(render_pages({"bytes": data}, render=False, page_errors="keep"))
    plain = list(render_pages({"bytes": data}, render=False))
    assert [p.pop("error") for p in kept] == [None, None, None]
    assert kept == plain


def test_a_page_pdfium_cannot_load_keeps_its_reason_and_detect_lines_fails_it_alone(detect):
    row = {"bytes": UNLOADABLE_SECOND_PAGE, "path": "scan.pdf"}
    with pytest.raises(CorruptInputError, match="scan.pdf: page 1 cannot be loaded"):
        list(render_pages(row, dpi=20))
    first, second = render_pages(row, dpi=20, page_errors="keep")
    assert first["error"] is None and first["image"] is not None
    assert second == {
        "page_index": 1,
        "page_count": 2,
        "width": None,
        "height": None,
        "image": None,
        "text": "",
        "error": "scan.pdf: page 1 cannot be loaded (Failed to load page.)",
    }
    assert list(detect(first)) == []
    with pytest.raises(CorruptInputError) as caught:
        list(detect(second))
    assert str(caught.value) == f"<page>: {second['error']}"


def test_a_scanned_pdf_reads_back_page_by_page_with_its_blank_page(detect, recognize):
    data, texts = make_scanned_pdf([["scanned text line", "second row"], []], dpi=50)
    pages = []
    for page in render_pages({"bytes": data}, dpi=50, page_errors="keep"):
        assert page["error"] is None and page["text"] == ""  # an image only: no text layer
        found = list(detect(page))
        pages.append(page_text(page, recognized(recognize, found) if found else []))
    assert [p["lines"] for p in pages] == [2, 0]
    assert_reads(pages[0]["text"].split("\n"), texts[0].split("\n"))
    assert pages[1]["text"] == ""
    doc = document_text({"path": "scan.pdf", "size": len(data), "bytes": data}, pages)
    assert doc["markdown"] == f"<!-- page 1 -->\n{pages[0]['text']}\n\n<!-- page 2 -->\n"
    assert character_error_rate(doc["text"], "\n\n".join(texts)) <= CER


# ---------------------------------------------------------------------------------------- reducers


def box(x, y, width=10, height=10):
    return [x, y, x + width, y, x + width, y + height, x, y + height]


@pytest.mark.parametrize(
    ("boxes", "text"),
    [
        ([box(0, 0), box(20, 4)], "a b"),  # tops 4 apart, half a line height is 5: one row
        ([box(0, 0), box(20, 5)], "a\nb"),
        ([box(0, 0), box(0, 5, height=12)], "a b"),  # the taller line sets the height
        ([box(0, 0), box(0, 20), box(30, 22)], "a\nb c"),
        ([box(0, 20), box(0, 0)], "a\nb"),  # reading order is the children's order, not the boxes'
    ],
)
def test_page_text_joins_lines_of_a_row_with_a_space_and_rows_with_a_newline(boxes, text):
    lines = [{"text": t, "box": b} for t, b in zip("abc", boxes, strict=False)]
    assert page_text({}, lines)["text"] == text


def test_page_text_of_two_columns_puts_a_newline_between_lines_of_different_columns():
    # column 1: a b; column 2: c d e, a and c (b and d) at one height. A title t above both.
    boxes = {
        "t": box(0, 0, width=200),
        "a": box(0, 30, width=90),
        "c": box(110, 30, width=90),
        "d": box(110, 45, width=90),
        "e": box(110, 60, width=90),
        "b": box(0, 45, width=90),
    }
    lines = [{"text": t, "box": boxes[t]} for t in "tabcde"]  # DetectLines' order
    assert page_text({}, lines)["text"] == "t\na\nb\nc\nd\ne"
    # the same lines in the old top-to-bottom order: a c and b d at one height are still no rows
    lines = [{"text": t, "box": boxes[t]} for t in "tacbde"]
    assert page_text({}, lines)["text"] == "t\na\nc\nb\nd\ne"


def test_a_two_column_page_is_read_column_by_column(detect, recognize):
    left = ["first column one", "first column two", "first column three"]
    right = ["second column one", "second column two", "second column three"]
    image = Image.new("L", (500, 260), 255)
    draw = ImageDraw.Draw(image)
    font = ImageFont.load_default(size=14)
    draw.text((150, 20), "a title across both", font=font, fill=0)
    for k, (a, b) in enumerate(zip(left, right, strict=True)):
        draw.text((20, 70 + 25 * k), a, font=font, fill=0)
        draw.text((270, 70 + 25 * k), b, font=font, fill=0)
    draw.text((230, 220), "page 1", font=font, fill=0)
    data = io.BytesIO()
    image.save(data, format="PNG")
    rows = recognized(recognize, list(detect({"image": data.getvalue()})))
    expected = ["a title across both", *left, *right, "page 1"]
    assert_reads([row["text"] for row in rows], expected)
    assert_reads(page_text({}, rows)["text"].split("\n"), expected)


def test_page_text_keeps_the_page_columns_and_averages_known_confidences():
    parent = {"page_index": 2, "page_count": 5, "image": b"png", "error": None, "text": "layer"}
    lines = [
        {"text": "a", "box": box(0, 0), "confidence": 0.5},
        {"text": None, "box": box(0, 20), "confidence": None},
        {"text": "c", "box": box(0, 40), "confidence": 1.0},
    ]
    assert page_text(parent, lines) == {
        "page_index": 2,
        "page_count": 5,
        "text": "a\n\nc",
        "lines": 3,
        "confidence": 0.75,
    }


def test_document_text_marks_each_page_from_one_in_page_order():
    parent = {"path": "a.pdf", "size": 10, "bytes": b"x", "pages": "?"}
    pages = [{"text": "one"}, {"text": ""}, {"text": None}, {"text": "two\nlines"}]
    assert document_text(parent, pages) == {
        "path": "a.pdf",
        "size": 10,
        "pages": 4,
        "text": "one\n\n\n\n\n\ntwo\nlines",
        "markdown": (
            "<!-- page 1 -->\none\n\n<!-- page 2 -->\n\n\n<!-- page 3 -->\n\n\n"
            "<!-- page 4 -->\ntwo\nlines"
        ),
    }


def test_document_text_of_no_pages():
    assert document_text({}, []) == {"pages": 0, "text": "", "markdown": ""}


@pytest.mark.parametrize(
    ("hypothesis", "reference", "rate"),
    [
        ("", "", 0.0),
        (" \n", "\t", 0.0),  # whitespace only is empty
        ("x", "", 1.0),
        ("", "abcd", 1.0),
        ("Lineage  Data", "lineage\ndata", 0.0),
        ("abcx", "abcd", 0.25),
        ("abdc", "abcd", 0.5),  # a swap is two edits
        ("abcdabcd", "abcd", 1.0),
        ("aXbXcXdXe", "a", 8.0),  # insertions: the rate is not capped at 1
        ("ÉCOLE", "école", 0.0),
    ],
)
def test_character_error_rate(hypothesis, reference, rate):
    assert character_error_rate(hypothesis, reference) == pytest.approx(rate)


def test_importing_the_connector_loads_no_model_runtime_and_no_ray():
    code = (
        "import sys, lineage_data.connectors.ocr\n"
        "heavy = ('ray', 'rapidocr_onnxruntime', 'onnxruntime', 'cv2', 'Levenshtein')\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in heavy)\n"
        "print(bad[:5]); sys.exit(1 if bad else 0)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_stages_build_their_sessions_with_onnxruntime_s_memory_arena_on(detect, recognize):
    from rapidocr_onnxruntime.utils.infer_engine import OrtInferSession

    sessions = [detect._ocr.text_det.infer.session, recognize._ocr.text_rec.session.session]
    assert [s.get_session_options().enable_cpu_mem_arena for s in sessions] == [True, True]
    assert [s.get_session_options().intra_op_num_threads for s in sessions] == [1, 1]
    # the package's own default is left as it was for anyone else building a RapidOCR
    assert OrtInferSession._init_sess_opts({}).enable_cpu_mem_arena is False
