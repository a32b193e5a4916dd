"""``ocr_layout``: OCR quality on real typeset PDFs, one column per dpi and two columns side by side.

No model is mocked: pages are rendered by :func:`lineage_data.connectors.pdf.render_pages` and read by
:class:`lineage_data.connectors.ocr.DetectLines` + :class:`lineage_data.connectors.ocr.RecognizeLines` in this process (one
onnxruntime thread). The reference is the page's own text layer (:func:`lineage_data.connectors.pdf.normalize_text`).

* **dpi sweep**: ``--pages`` pages with text, spread over each PDF, at each ``--dpi``: word
  similarity (:func:`lineage_data.connectors.ocr.word_similarity`), the fraction of the reference's spaces the
  OCR text keeps (:func:`spaces_kept`), the CER without and with whitespace, seconds per page
  (wall and CPU).
* **two columns**: pages 2k and 2k+1 of a PDF placed side by side on one page (each imported as a
  form XObject, text layer kept), read with the XY-cut order (``after``) and with RapidOCR's
  ``sorted_boxes`` and the old same-row rule (``before``), word similarity per document; and the
  same source pages read one at a time (``one_column``), which separates the layout's losses
  from the recognizer's on those pages.

Run: ``python -m bench.ocr_layout --input A.pdf --input B.pdf --out bench/results``.
"""

from __future__ import annotations

import argparse
import io
import itertools
import re
import statistics
import time
from pathlib import Path
from typing import Any

from bench.common import log, stamp
from bench.measure import results_path, write_json

DPIS = (72, 100, 150, 200)
GUTTER_PT = 36.0  # half an inch between the two pages
MIN_CHARS = 200  # pages with less text (title pages, blank pages) are skipped
# Dot leaders of a table of contents (". . . .") are skipped too: OCR reads them as one run of
# dots, which would count as hundreds of lost spaces and words.
DOT_LEADERS = re.compile(r"(\. ){5,}")
MAX_PIXELS = 64_000_000  # render at the asked dpi (RapidOCR still caps the long side at 2000 px)


def spaces_kept(hypothesis: str, reference: str) -> float | None:
    """Of the reference's word gaps, the fraction the hypothesis keeps as whitespace.

    Both texts are normalized, case folded, and each whitespace run becomes one space; the two
    are aligned by Levenshtein's edit operations, and a reference space counts as kept when it is
    matched to a space. None for a reference without spaces.
    """
    import Levenshtein

    from lineage_data.connectors.pdf import normalize_text

    hyp = " ".join(normalize_text(hypothesis).casefold().split())
    ref = " ".join(normalize_text(reference).casefold().split())
    total = ref.count(" ")
    if not total:
        return None
    kept = 0
    for tag, ref_start, ref_end, _, _ in Levenshtein.opcodes(ref, hyp):
        if tag == "equal":
            kept += ref[ref_start:ref_end].count(" ")
    return kept / total


def two_column_pdf(data: bytes, pairs: int) -> bytes:
    """A PDF whose page k holds pages 2k and 2k+1 of ``data`` side by side (``pairs`` pages)."""
    import pypdfium2 as pdfium

    src = pdfium.PdfDocument(data)
    dst = pdfium.PdfDocument.new()
    try:
        for k in range(min(pairs, len(src) // 2)):
            width, height = src.get_page_size(2 * k)
            page = dst.new_page(2 * width + GUTTER_PT, height)
            for side in (0, 1):
                obj = src.page_as_xobject(2 * k + side, dst).as_pageobject()
                obj.transform(pdfium.PdfMatrix().translate(side * (width + GUTTER_PT), 0))
                page.insert_obj(obj)
            page.gen_content()
            page.close()
        out = io.BytesIO()
        dst.save(out)
        return out.getvalue()
    finally:
        dst.close()
        src.close()


class Reader:
    """The connector's OCR stages in this process, one page at a time."""

    def __init__(self) -> None:
        from lineage_data.connectors.ocr import DetectLines, RecognizeLines

        self.detect = DetectLines()
        self.recognize = RecognizeLines()

    def lines(self, image: bytes) -> list[dict[str, Any]]:
        """The page's lines in the connector's reading order, with ``text`` and ``box``."""
        lines = list(self.detect({"image": image}))
        if not lines:
            return []
        out = self.recognize({"crop": [x["crop"] for x in lines], "box": [x["box"] for x in lines]})
        return [{"box": b, "text": t} for b, t in zip(out["box"], out["text"], strict=True)]


def old_page_text(lines: list[dict[str, Any]]) -> str:
    """The page text as the connector made it before the XY-cut: RapidOCR's ``sorted_boxes``
    order, and lines whose top edges are closer than half a line height joined with a space."""
    import numpy as np
    from rapidocr_onnxruntime import RapidOCR

    if not lines:
        return ""
    quads = np.array([line["box"] for line in lines], dtype=np.float32).reshape(-1, 4, 2)
    tagged = np.concatenate([quads, np.arange(len(lines))[:, None, None].repeat(2, 2)], axis=1)
    order = [int(q[4, 0]) for q in RapidOCR.sorted_boxes(tagged)]
    parts: list[str] = []
    previous = None
    for i in order:
        box = lines[i]["box"]
        if previous is not None:
            height = max(previous[7] - previous[1], box[7] - box[1], 1.0)
            parts.append(" " if abs(box[1] - previous[1]) < height / 2 else "\n")
        parts.append(lines[i]["text"])
        previous = box
    return "".join(parts)


def pages(data: bytes, dpi: float, count: int | None = None) -> list[dict[str, Any]]:
    """Rendered pages of a PDF with enough text, each with its clean text layer: all of them, or
    ``count`` spread evenly over the document."""
    from lineage_data.connectors.pdf import normalize_text, render_pages

    out = []
    for page in render_pages({"bytes": data}, dpi=dpi, max_pixels=MAX_PIXELS, max_pages=None):
        page["reference"] = normalize_text(page["text"])
        if len(page["reference"]) >= MIN_CHARS and not DOT_LEADERS.search(page["reference"]):
            out.append(page)
    if count is None or count >= len(out):
        return out
    return [out[round(k * (len(out) - 1) / max(1, count - 1))] for k in range(count)]


def _first_pages(data: bytes, dpi: float, count: int) -> list[dict[str, Any]]:
    """The first ``count`` rendered pages of a PDF, none skipped."""
    from lineage_data.connectors.pdf import render_pages

    rendered: Any = render_pages({"bytes": data}, dpi=dpi, max_pixels=MAX_PIXELS, max_pages=None)
    try:
        return list(itertools.islice(rendered, count))
    finally:
        rendered.close()


def _page_text(lines: list[dict[str, Any]]) -> str:
    from lineage_data.connectors.ocr import page_text

    return str(page_text({}, lines)["text"])


def sweep(reader: Reader, data: bytes, dpis: list[float], n_pages: int) -> dict[str, Any]:
    """Quality and cost per dpi on ``n_pages`` pages with text, spread over the document."""
    from lineage_data.connectors.ocr import character_error_rate, word_similarity

    out: dict[str, Any] = {}
    for dpi in dpis:
        rows = pages(data, dpi, n_pages)
        hyps, refs, seconds, cpu = [], [], [], []
        for page in rows:
            start, start_cpu = time.perf_counter(), time.process_time()
            hyps.append(_page_text(reader.lines(page["image"])))
            seconds.append(time.perf_counter() - start)
            cpu.append(time.process_time() - start_cpu)
            refs.append(page["reference"])
        hyp, ref = "\n\n".join(hyps), "\n\n".join(refs)
        out[f"{dpi:g}"] = {
            "pages": len(rows),
            "word_similarity": round(word_similarity(hyp, ref), 4),
            "spaces_kept": _round(spaces_kept(hyp, ref)),
            "cer": round(character_error_rate(hyp, ref), 4),
            "cer_spaced": round(character_error_rate(hyp, ref, spaces=True), 4),
            "s_per_page": round(statistics.mean(seconds), 3) if seconds else None,
            "cpu_s_per_page": round(statistics.mean(cpu), 3) if cpu else None,
        }
        log(f"  {dpi:g} dpi: {out[f'{dpi:g}']}")
    return out


def two_columns(reader: Reader, data: bytes, dpi: float, pairs: int) -> dict[str, Any]:
    """Word similarity of two-column pages, XY-cut order (after) and sorted_boxes (before)."""
    from lineage_data.connectors.ocr import word_similarity

    rows = pages(two_column_pdf(data, pairs), dpi)
    singles = dict(enumerate(_first_pages(data, dpi, 2 * pairs)))
    after, before, alone, refs, seconds, cpu = [], [], [], [], [], []
    for page in rows:
        start, start_cpu = time.perf_counter(), time.process_time()
        lines = reader.lines(page["image"])
        seconds.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
        after.append(_page_text(lines))
        before.append(old_page_text(lines))
        refs.append(page["reference"])
        sides = [singles.get(2 * page["page_index"] + side) for side in (0, 1)]
        alone.append("\n".join(_page_text(reader.lines(s["image"])) for s in sides if s))
    ref = "\n\n".join(refs)
    return {
        "pages": len(rows),
        "dpi": dpi,
        "word_similarity_after": round(word_similarity("\n\n".join(after), ref), 4),
        "word_similarity_before": round(word_similarity("\n\n".join(before), ref), 4),
        # the same source pages read one at a time: what the recognizer gets without a layout
        "word_similarity_one_column": round(word_similarity("\n\n".join(alone), ref), 4),
        "per_page_after": [
            round(word_similarity(h, r), 4) for h, r in zip(after, refs, strict=True)
        ],
        "per_page_before": [
            round(word_similarity(h, r), 4) for h, r in zip(before, refs, strict=True)
        ],
        "s_per_page": round(statistics.mean(seconds), 3) if seconds else None,
        "cpu_s_per_page": round(statistics.mean(cpu), 3) if cpu else None,
    }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.ocr_layout", description=__doc__)
    parser.add_argument("--input", action="append", required=True, help="a PDF (repeatable)")
    parser.add_argument("--out", default="bench/results", help="directory for the JSON")
    parser.add_argument("--dpi", type=float, action="append", help=f"default {DPIS}")
    parser.add_argument("--pages", type=int, default=6, help="pages per PDF in the dpi sweep")
    parser.add_argument("--pairs", type=int, default=6, help="two-column pages per PDF")
    parser.add_argument(
        "--layout-dpi", type=float, action="append", help="dpi of two-column pages (default 100)"
    )
    args = parser.parse_args(argv)
    dpis = args.dpi or list(DPIS)
    results: dict[str, Any] = {}
    for path in args.input:
        data = Path(path).read_bytes()
        reader = Reader()
        log(f"{path}: dpi sweep over {args.pages} pages")
        one = sweep(reader, data, dpis, args.pages)
        two = {}
        for dpi in args.layout_dpi or [100.0]:
            log(f"{path}: {args.pairs} two-column pages at {dpi:g} dpi")
            two[f"{dpi:g}"] = two_columns(reader, data, dpi, args.pairs)
            log(f"  {two[f'{dpi:g}']}")
        results[Path(path).name] = {"one_column": one, "two_columns": two}
    out = results_path(Path(args.out), "ocr_layout", "real", "json", stamp())
    write_json(
        out,
        {
            "bench": "ocr_layout",
            "inputs": args.input,
            "setup": {"dpis": dpis, "pages": args.pages, "pairs": args.pairs, "threads": 1},
            "results": results,
        },
    )
    log(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
