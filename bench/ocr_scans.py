"""``ocr_scans``: at which scan resolution the demo's OCR keeps the spaces between words.

The demo's scanned PDFs (:func:`lineage_data.connectors.testing.corpus.write_scanned_corpus`, Pillow's
font) are written at each ``--scan-dpi``, rendered at the jobs' OCR dpi, read by the connector's own
stages in this process (one onnxruntime thread), and compared with the text that generated them
(:func:`lineage_data.connectors.ocr.word_similarity`).

Run: ``python -m bench.ocr_scans --out bench/results``.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import code_version, log, stamp
from bench.measure import results_path, write_json


def _read(path: str, det: Any, rec: Any, dpi: float) -> str:
    from lineage_data.connectors.ocr import page_text
    from lineage_data.connectors.pdf import render_pages

    texts = []
    with open(path, "rb") as file:
        row = {"path": path, "bytes": file.read()}
    for page in render_pages(row, dpi=dpi):
        lines = list(det(page))
        if lines:
            out = rec({"crop": [line["crop"] for line in lines]})
            for line, text in zip(lines, out["text"], strict=True):
                line.update(text=text, confidence=None)
        texts.append(page_text(page, lines)["text"])
    return "\n\n".join(texts)


def main(argv: list[str] | None = None) -> int:
    from lineage_data.connectors.jobs.pdf import OCR_DPI
    from lineage_data.connectors.ocr import DetectLines, RecognizeLines, word_similarity
    from lineage_data.connectors.testing.corpus import write_scanned_corpus

    parser = argparse.ArgumentParser(prog="python -m bench.ocr_scans", description=__doc__)
    parser.add_argument("--scan-dpi", type=float, action="append", default=None)
    parser.add_argument("--pdfs", type=int, default=3)
    parser.add_argument("--out", default="bench/results")
    args = parser.parse_args(argv)
    det, rec = DetectLines(), RecognizeLines()
    rows = []
    for scan_dpi in args.scan_dpi or [72.0, 100.0, 150.0]:
        with tempfile.TemporaryDirectory() as tmp:
            corpus = write_scanned_corpus(
                tmp, n_pdfs=args.pdfs, max_pages=3, mean_pages=2, dpi=scan_dpi, lines=(2, 5)
            )
            started = time.process_time()
            scores = [
                word_similarity(_read(f["path"], det, rec, OCR_DPI), f["text"])
                for f in corpus["files"]
            ]
            pages = sum(f["pages"] for f in corpus["files"])
            rows.append(
                {
                    "scan_dpi": scan_dpi,
                    "render_dpi": OCR_DPI,
                    "documents": len(scores),
                    "pages": pages,
                    "word_similarity": round(sum(scores) / len(scores), 3),
                    "cpu_s_per_page": round((time.process_time() - started) / pages, 2),
                }
            )
            log(f"scan {scan_dpi:g} dpi: {rows[-1]}")
    path = results_path(Path(args.out), "ocr_scans", "demo", "json", stamp())
    write_json(path, {"bench": "ocr_scans", "code": code_version(), "rows": rows})
    log(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
