"""lineage_data.connectors.pdf: page expansion, rendering caps, typed errors, ExtractText."""

import functools
import io
import math
import unicodedata

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st
from PIL import Image

from lineage_data._core.failures import RecordFailure
from lineage_data.connectors import errors
from lineage_data.connectors.pdf import (
    ExtractText,
    PdfPages,
    normalize_text,
    render_pages,
    render_scale,
)
from lineage_data.connectors.testing.corpus import BAD_FILE_ERRORS, bad_files, make_pdf


@pytest.fixture(scope="module")
def seven_pages():
    return make_pdf(7, seed=3, title="report")


def test_pages_come_in_order_with_count_size_and_text(seven_pages):
    pages = list(render_pages({"bytes": seven_pages, "path": "a.pdf"}, render=False))
    assert [p["page_index"] for p in pages] == list(range(7))
    assert {p["page_count"] for p in pages} == {7}
    assert {(p["width"], p["height"]) for p in pages} == {(612.0, 792.0)}
    for p in pages:
        assert p["image"] is None
        assert f"Document report page {p['page_index'] + 1} of 7" in p["text"]
        assert "\r" not in p["text"]


def test_a_400_page_document_keeps_every_page_in_order():
    pages = list(render_pages({"bytes": make_pdf(400, seed=1)}, render=False))
    assert [p["page_index"] for p in pages] == list(range(400))
    assert all(f"page {i + 1} of 400" in p["text"] for i, p in enumerate(pages))


def test_png_at_72_dpi_is_one_pixel_per_point(seven_pages):
    page = next(render_pages({"bytes": seven_pages}))
    image = Image.open(io.BytesIO(page["image"]))
    assert image.format == "PNG"
    assert image.size == (612, 792)
    # The page image is drawn in colour at (72..216, 168..312) px; the rest is white.
    assert image.convert("RGB").getpixel((144, 240)) != (255, 255, 255)
    assert image.convert("RGB").getpixel((500, 700)) == (255, 255, 255)


def test_png_respects_max_pixels_and_aspect_ratio(seven_pages):
    page = next(render_pages({"bytes": seven_pages}, dpi=300, max_pixels=100_000))
    width, height = Image.open(io.BytesIO(page["image"])).size
    assert width * height <= 100_000
    assert width * height > 90_000
    assert width / height == pytest.approx(612 / 792, rel=0.01)


def test_jpeg_format(seven_pages):
    page = next(render_pages({"bytes": seven_pages}, image_format="jpeg", dpi=36))
    image = Image.open(io.BytesIO(page["image"]))
    assert (image.format, image.size) == ("JPEG", (306, 396))


@given(
    width=st.floats(1, 20_000),
    height=st.floats(1, 20_000),
    dpi=st.floats(1, 1200),
    max_pixels=st.integers(1_000, 50_000_000),
)
def test_render_scale_never_exceeds_max_pixels(width, height, dpi, max_pixels):
    scale = render_scale(width, height, dpi=dpi, max_pixels=max_pixels)
    assert 0 < scale <= dpi / 72
    assert math.ceil(width * scale) * math.ceil(height * scale) <= max_pixels
    if math.ceil(width * dpi / 72) * math.ceil(height * dpi / 72) <= max_pixels:
        assert scale == dpi / 72


def test_partial_and_callable_class_agree(seven_pages):
    row = {"bytes": seven_pages}
    by_partial = list(functools.partial(render_pages, dpi=20)(row))
    by_class = list(PdfPages(dpi=20)(row))
    assert by_partial == by_class
    assert len(by_class) == 7


@pytest.mark.parametrize("name", [n for n in BAD_FILE_ERRORS if n.endswith(".pdf")])
def test_every_bad_pdf_raises_its_typed_error(name):
    data = bad_files(video=False)[name]
    with pytest.raises(BAD_FILE_ERRORS[name]) as info:
        list(render_pages({"bytes": data, "path": f"s3://bucket/{name}"}))
    assert isinstance(info.value, errors.ConnectorError)
    assert str(info.value).startswith(f"s3://bucket/{name}: ")


def test_errors_are_raised_before_any_page():
    gen = render_pages({"bytes": make_pdf(5)}, max_pages=4)
    with pytest.raises(errors.OversizedInputError, match="5 pages exceed max_pages=4"):
        next(gen)


def test_oversized_bytes():
    with pytest.raises(errors.OversizedInputError, match="max_bytes=100"):
        list(render_pages({"bytes": make_pdf(1)}, max_bytes=100))


def test_message_names_the_input_without_a_path():
    with pytest.raises(errors.UnsupportedInputError, match=r"^<pdf of 4 bytes>: not a PDF"):
        list(render_pages({"bytes": b"abcd"}))


def test_bytes_like_inputs_are_accepted():
    data = make_pdf(2)
    assert len(list(render_pages({"bytes": bytearray(data)}, render=False))) == 2
    assert len(list(render_pages({"bytes": memoryview(data)}, render=False))) == 2


def test_missing_bytes_column_is_a_key_error():
    with pytest.raises(KeyError, match="no 'bytes' column"):
        list(render_pages({"path": "x.pdf"}))


@pytest.mark.parametrize(
    "options",
    [{"dpi": 0}, {"max_pixels": 0}, {"max_pages": 0}, {"max_bytes": -1}, {"image_format": "gif"}],
)
def test_bad_options_fail_at_call_or_construction(options):
    with pytest.raises(ValueError):
        render_pages({"bytes": b""}, **options)  # no iteration needed
    with pytest.raises(ValueError):
        PdfPages(**options)


def test_closing_the_iterator_early_is_clean(seven_pages):
    gen = render_pages({"bytes": seven_pages}, render=False)
    assert next(gen)["page_index"] == 0
    gen.close()
    # Many open/close cycles in one process (the worker case) keep working.
    for _ in range(200):
        assert len(list(render_pages({"bytes": seven_pages}, render=False))) == 7


# ------------------------------------------------------------------------------------ ExtractText


def test_extract_text_one_row_per_input_row():
    table = pa.table(
        {"text": ["  Hello\r\n\r\n\r\nworld  ", None, "", "ﬁne"], "page_index": [0, 1, 2, 3]}
    )
    out = ExtractText()(table)
    assert out == {"text": ["Hello\n\nworld", "", "", "fine"], "chars": [12, 0, 0, 4]}


def test_extract_text_min_chars_fails_short_rows():
    out = ExtractText(min_chars=5)({"text": ["a long page", "tiny", None]})
    assert out["text"][0] == "a long page"
    assert out["text"][1] == RecordFailure("empty text layer")
    assert out["text"][2] == RecordFailure("empty text layer")
    assert out["chars"] == [11, 4, 0]


def test_extract_text_accepts_record_batches_and_other_columns():
    batch = pa.record_batch({"body": ["x  y"]})
    assert ExtractText(column="body")(batch) == {"text": ["x y"], "chars": [3]}


def test_extract_text_missing_column_is_a_key_error():
    with pytest.raises(KeyError, match="no 'text' column"):
        ExtractText()(pa.table({"other": [1]}))
    with pytest.raises(ValueError):
        ExtractText(min_chars=-1)


def test_extract_text_on_rendered_pages(seven_pages):
    pages = list(render_pages({"bytes": seven_pages}, render=False))
    out = ExtractText(min_chars=10)(pa.Table.from_pylist(pages))
    assert len(out["text"]) == 7
    assert out["text"][2].startswith("Document report page 3 of 7\n")


@given(st.lists(st.one_of(st.none(), st.text()), max_size=20), st.integers(0, 10))
def test_extract_text_keeps_the_row_count(texts, min_chars):
    out = ExtractText(min_chars=min_chars)({"text": texts})
    assert len(out["text"]) == len(out["chars"]) == len(texts)
    for value, chars in zip(out["text"], out["chars"], strict=True):
        if isinstance(value, RecordFailure):
            assert chars < min_chars
        else:
            assert len(value) == chars >= min_chars


@given(st.text())
def test_normalize_text_is_idempotent(text):
    once = normalize_text(text)
    assert normalize_text(once) == once
    assert once == once.strip()
    assert "\r" not in once
    assert "\n\n\n" not in once


def _text_pdf(lines: list[str]) -> bytes:
    """A one-page PDF whose text layer is ``lines``, one text line each (Helvetica)."""
    from lineage_data.connectors.testing.pdfs import _pdf_string, _write_pdf

    content = b"".join(
        b"BT /F1 11 Tf 72 %d Td %s Tj ET\n" % (720 - 14 * i, _pdf_string(line))
        for i, line in enumerate(lines)
    )
    return _write_pdf(
        [
            b"<< /Type /Catalog /Pages 2 0 R >>",
            b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
            b"/Resources << /Font << /F1 5 0 R >> >> >>",
            b"<< /Length %d >>\nstream\n%s\nendstream" % (len(content), content),
            b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
        ]
    )


def test_a_word_hyphenated_at_a_line_end_is_joined_in_pdfiums_own_output():
    pdf = _text_pdf(["We want to improve-", "ments of the text, and not", "in the middle."])
    (page,) = render_pages({"bytes": pdf, "path": "h.pdf"}, render=False)
    assert "improve\ufffements" in page["text"]  # PDFium's hyphenation marker, as it gives it
    (clean,) = ExtractText()(pa.table({"text": [page["text"]]}))["text"]
    assert clean == "We want to improvements of the text, and not\nin the middle."


def _never_text(ch: str) -> bool:
    code = ord(ch)
    noncharacter = 0xFDD0 <= code <= 0xFDEF or (code & 0xFFFE) == 0xFFFE
    return noncharacter or (ch not in "\n\t" and unicodedata.category(ch) in ("Cc", "Cf", "Cs"))


@given(
    st.text(alphabet=st.sampled_from("ab \n\r\t-\u00ad\ufffe\uffff\x02\x00\u200b\ufdd0\U0001fffe"))
)
def test_normalize_text_leaves_no_marker_control_or_noncharacter(text):
    assert not any(_never_text(ch) for ch in normalize_text(text))


def test_callables_survive_pickling(seven_pages):
    import pickle

    expand = pickle.loads(pickle.dumps(PdfPages(dpi=10, render=False)))
    assert len(list(expand({"bytes": seven_pages}))) == 7
    udf = pickle.loads(pickle.dumps(ExtractText(min_chars=2)))
    assert udf({"text": ["ab"]}) == {"text": ["ab"], "chars": [2]}
