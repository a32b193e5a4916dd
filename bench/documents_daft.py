"""The ``ocr`` bench's Daft system: the same stage functions in Daft's native runner.

render (a UDF returning the page list) -> explode -> detect (a class UDF, ``actors`` instances,
returning the line list) -> explode -> recognize (a batch class UDF) -> groupby page list-agg ->
page_text -> groupby document list-agg -> document_text. Daft is imported from beside the venv
(see :func:`bench.systems.import_daft`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pyarrow as pa

from bench.documents import Run, Setup, consume
from bench.systems import import_daft


def ocr_daft(paths: list[str], setup: Setup) -> Run:
    """Run the OCR pipeline in Daft; consumed like the Ray systems."""
    daft = import_daft()
    with contextlib.suppress(Exception):  # Ray is up in this process: keep Daft off it
        daft.set_runner_native()
    dt = daft.DataType
    page_type = dt.struct({"page_index": dt.int64(), "image": dt.binary(), "error": dt.string()})
    line_type = dt.struct(
        {"line_index": dt.int64(), "box": dt.list(dt.float64()), "crop": dt.binary()}
    )
    dpi, threads = setup.dpi, setup.threads

    @daft.func(return_dtype=dt.list(page_type))
    def render(path: str) -> list[dict[str, Any]]:
        from lineage_data.connectors.pdf import render_pages

        row = {"path": path, "bytes": Path(path).read_bytes()}
        return [
            {"page_index": p["page_index"], "image": p["image"], "error": p["error"]}
            for p in render_pages(row, dpi=dpi, page_errors="keep")
        ]

    @daft.cls(max_concurrency=setup.actors)
    class Detect:
        def __init__(self) -> None:
            from lineage_data.connectors.ocr import DetectLines

            self._detect = DetectLines(threads=threads)

        @daft.method(return_dtype=dt.list(line_type))
        def __call__(self, page: dict[str, Any]) -> list[dict[str, Any]]:
            lines = [
                {"line_index": ln["line_index"], "box": ln["box"], "crop": ln["crop"]}
                for ln in self._detect(page)
            ]
            # an empty list would explode into a null row: a placeholder keeps the page instead
            return lines or [{"line_index": -1, "box": None, "crop": None}]

    @daft.cls(max_concurrency=setup.actors)
    class Recognize:
        def __init__(self) -> None:
            from lineage_data.connectors.ocr import RecognizeLines

            self._recognize = RecognizeLines(threads=threads)

        @daft.method.batch(return_dtype=dt.string(), batch_size=setup.batch_size)
        def __call__(self, crops: Any) -> list[str | None]:
            values = crops.to_pylist()
            real = [c for c in values if c is not None]
            texts = iter(self._recognize({"crop": real})["text"] if real else [])
            out = []
            for crop in values:
                text = next(texts) if crop is not None else ""
                out.append(text if isinstance(text, str) else None)
            return out

    @daft.func(return_dtype=dt.string())
    def page_of(indexes: list[int], boxes: list[Any], texts: list[str]) -> str:
        from lineage_data.connectors.ocr import page_text

        lines = sorted(
            (i, {"box": b, "text": t})
            for i, b, t in zip(indexes, boxes, texts, strict=True)
            if i >= 0
        )
        return page_text({}, [line for _, line in lines])["text"]

    @daft.func(return_dtype=dt.string())
    def document_of(indexes: list[int], texts: list[str]) -> str:
        from lineage_data.connectors.ocr import document_text

        pages = [{"text": t} for _, t in sorted(zip(indexes, texts, strict=True))]
        return document_text({}, pages)["text"]

    col = daft.col

    def batches() -> Iterable[pa.Table]:
        df = daft.from_pylist([{"path": p} for p in paths])
        df = df.with_column("page", render(col("path"))).explode("page")
        df = df.with_column("page_index", col("page").get("page_index"))
        df = df.with_column("line", Detect()(col("page"))).explode("line").exclude("page")
        df = df.with_columns(
            {
                "line_index": col("line").get("line_index"),
                "box": col("line").get("box"),
                "text": Recognize()(col("line").get("crop")),
            }
        ).exclude("line")
        df = df.groupby("path", "page_index").agg(
            col("line_index").list_agg(), col("box").list_agg(), col("text").list_agg()
        )
        df = df.select(
            "path", "page_index", page_of(col("line_index"), col("box"), col("text")).alias("text")
        )
        df = df.groupby("path").agg(col("page_index").list_agg(), col("text").list_agg())
        df = df.select("path", document_of(col("page_index"), col("text")).alias("text"))
        for batch in df.to_arrow_iter():
            yield pa.Table.from_batches([batch]) if isinstance(batch, pa.RecordBatch) else batch

    return consume("daft", batches, store_interval_s=setup.store_interval_s)
