"""Real work on real documents: the systems of the ``ocr`` and ``realpdf`` benches.

Every system runs the same stage functions (pypdfium2 rendering, RapidOCR's detector and
recognizer, the same reducers) with the same resources, in one Ray instance:

- ``lineage_data``: the plan users run (``lineage_data.connectors.jobs.pdf.build_ocr`` for OCR): expand pages,
  expand lines, recognize on an actor pool, reduce pages, reduce documents.
- ``ray_data``: the natural Ray Data pipeline: ``flat_map`` pages, ``flat_map`` lines,
  ``map_batches`` recognize, ``groupby(path, page).map_groups``, ``groupby(path).map_groups``. The
  expanded rows are cut into the blocks lineage_data uses after each expansion, so the comparison
  is the regroup and not block sizing.
- ``floor``: the same stages without any regroup (line rows out): what the work alone costs in Ray.
- ``per_document`` (OCR): one actor does a whole document (render, detect, recognize, assemble).
- ``daft`` (OCR): the same pipeline in Daft's native runner, when Daft can be imported.
- ``limit`` (OCR): the same render + detect + recognize work in plain processes, one per core, each
  on a static share of the pages, no Ray: what the machine can do.
"""

from __future__ import annotations

import gc
import multiprocessing
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from bench.common import log
from bench.measure import MemorySampler


@dataclass(frozen=True)
class Setup:
    """What every system of one bench shares.

    Attributes:
        dpi: page render resolution.
        keep_images: keep each page's image in the document row (``realpdf --keep-images``).
        actors: actors of each model stage (detect, recognize); per_document gets twice as many.
        batch_size: line crops per recognizer batch.
        threads: onnxruntime intra-op threads per model instance.
        page_rows_per_block: page rows per block after the page expansion.
        store_interval_s: seconds between two object-store samples (see :func:`consume`).
        partitions: Ray Data's groupby partitions (None: Ray's default; smoke runs use a few, as
            ``longtail`` does, so that a handful of pages does not start 200 reduce tasks).
    """

    dpi: float = 72
    keep_images: bool = False
    actors: int = 2
    batch_size: int = 32
    threads: int = 1
    page_rows_per_block: int = 16
    store_interval_s: float = 0.25
    partitions: int | None = None


@dataclass
class Run:
    """What one system produced: wall, first document out, texts by path, memory peaks."""

    system: str
    wall_s: float
    first_doc_s: float | None
    texts: dict[str, str]
    rows: int
    memory: dict[str, Any] = field(default_factory=dict)

    def summary(self, pages: int, lines: int) -> dict[str, Any]:
        """The per-system figures of the JSON."""
        return {
            "wall_s": round(self.wall_s, 3),
            "pages_per_s": round(pages / self.wall_s, 3),
            "lines_per_s": round(lines / self.wall_s, 2) if lines else None,
            "first_doc_s": None if self.first_doc_s is None else round(self.first_doc_s, 3),
            "first_doc_frac": None
            if self.first_doc_s is None
            else round(self.first_doc_s / self.wall_s, 4),
            "rows_out": self.rows,
            **self.memory,
        }


def norm_path(path: str) -> str:
    """One spelling of a local file's path for every system (Ray may drop the leading slash)."""
    return os.path.abspath(path if path.startswith("/") else "/" + path)


# -- object store ------------------------------------------------------------------------------------


class StoreSampler(threading.Thread):
    """Peak object-store bytes a run adds, and bytes spilled, from the raylet's own memory stats.

    The objects of the system run before are freed asynchronously after its last row (a Ray Data
    shuffle's take seconds): :meth:`settle` waits for the store to stop shrinking, and the peak is
    counted above what is left then, so no system is charged with its predecessor's objects.
    """

    def __init__(self, interval_s: float = 0.25) -> None:
        super().__init__(daemon=True, name="bench-store")
        self._interval = interval_s
        self._stop_event = threading.Event()
        self.baseline = self.peak = 0
        self._spilled_at_start = self._stats()[1]
        self.spilled = 0

    def settle(self, timeout_s: float = 30.0, poll_s: float = 0.5) -> None:
        """Wait until the store is empty or unchanged for two polls; that is the baseline."""
        gc.collect()  # the driver's last references to the previous run's blocks
        deadline = time.monotonic() + timeout_s
        last, same = self._stats()[0], 0
        while last and same < 2 and time.monotonic() < deadline:
            time.sleep(poll_s)
            used = self._stats()[0]
            same = same + 1 if used >= last else 0
            last = min(last, used)
        self.baseline = self.peak = last

    @staticmethod
    def _stats() -> tuple[int, int]:
        from lineage_data._ray.compat import object_store_stats

        return object_store_stats()

    def run(self) -> None:
        while not self._stop_event.is_set():
            used, _ = self._stats()
            self.peak = max(self.peak, used)
            self._stop_event.wait(self._interval)

    def stop(self) -> dict[str, float]:
        """Stop; peak bytes in use and bytes spilled during the run, in MiB."""
        self._stop_event.set()
        self.join(timeout=5)
        used, spilled = self._stats()
        self.peak = max(self.peak, used)
        mib = 1024 * 1024
        return {
            "peak_object_store_mib": round((self.peak - self.baseline) / mib, 2),
            "object_store_at_start_mib": round(self.baseline / mib, 2),
            "spilled_mib": round((spilled - self._spilled_at_start) / mib, 2),
        }


def consume(
    system: str,
    batches: Callable[[], Iterable[pa.Table]],
    *,
    key: str | None = "path",
    store_interval_s: float = 0.25,
) -> Run:
    """Iterate a system's output, timing it; texts by path when rows are documents.

    ``store_interval_s``: how often the object store is sampled. Each sample asks the raylet, which
    asks every worker (about 11 ms of CPU with a dozen actors, measured): ``ocr`` samples once a
    second, so that the measuring does not load the Ray systems that the limit runs without.
    """
    memory, store = MemorySampler(), StoreSampler(store_interval_s)
    store.settle()  # (untimed) the previous system's objects freed first
    memory.start()
    store.start()
    start = time.time()
    first = None
    rows = 0
    texts: dict[str, str] = {}
    try:
        for batch in batches():
            if not batch.num_rows:
                continue
            if first is None:
                first = time.time() - start
            rows += batch.num_rows
            if key is not None and "text" in batch.column_names:
                for path, text in zip(
                    batch[key].to_pylist(), batch["text"].to_pylist(), strict=True
                ):
                    texts[norm_path(path)] = text
    finally:
        end = time.time()
        figures = {**memory.stop(), **store.stop()}
    return Run(system, end - start, first if key else None, texts, rows, figures)


# -- realpdf: render + text layer --------------------------------------------------------------------


def text_pages(row: dict[str, Any], *, dpi: float, keep_images: bool, path: bool) -> Iterator[dict]:
    """Pages of one PDF, rendered: index, text layer, the image or its size (+ the path for Ray)."""
    from lineage_data.connectors.pdf import render_pages

    for page in render_pages(row, dpi=dpi):
        out = {"page_index": page["page_index"], "text": page["text"]}
        if keep_images:
            out["image"] = page["image"]
        else:  # rendered all the same (the work of the job); only its size travels on
            out["image_bytes"] = len(page["image"])
        if path:
            out["path"] = row["path"]
        yield out


def clean_text(batch: pa.Table) -> pa.Table:
    """The page stage: normalized text, every other column kept (``ExtractText``'s cleaning)."""
    from lineage_data.connectors.pdf import normalize_text

    texts = [normalize_text(t or "") for t in batch["text"].to_pylist()]
    return batch.set_column(
        batch.schema.get_field_index("text"), "text", pa.array(texts, pa.string())
    )


def text_document(parent: dict[str, Any], pages: list[dict[str, Any]]) -> dict[str, Any]:
    """Pages (in order) -> one document row: text, and interleaved page images when kept."""
    out = {
        "path": parent["path"],
        "pages": len(pages),
        "text": "\n\n".join(p["text"] for p in pages),
    }
    if pages and "image" in pages[0]:
        out["images"] = [p["image"] for p in pages]
        out["texts"] = [p["text"] for p in pages]
    return out


def _group_rows(table: pa.Table, order: str) -> list[dict[str, Any]]:
    return table.sort_by(order).to_pylist()


def text_document_group(table: pa.Table) -> pa.Table:
    """Ray Data's ``map_groups`` form of :func:`text_document`: sort by page, then assemble."""
    pages = _group_rows(table, "page_index")
    return pa.Table.from_pylist([text_document({"path": pages[0]["path"]}, pages)])


def _read(paths: list[str]) -> Any:
    import ray

    return ray.data.read_binary_files(paths, include_paths=True)


def _batches(ds: Any) -> Callable[[], Iterable[pa.Table]]:
    return lambda: ds.iter_batches(batch_size=None, batch_format="pyarrow")


def realpdf_lineage(paths: list[str], setup: Setup) -> Callable[[], Iterable[pa.Table]]:
    """read_files -> expand pages -> map_batches clean -> reduce documents."""
    import lineage_data as ld

    ds = (
        ld.read_files(paths)
        .expand_lineage(
            text_pages,
            name="pages",
            fn_kwargs={"dpi": setup.dpi, "keep_images": setup.keep_images, "path": False},
        )
        .map_batches(clean_text, name="text", batch_format="pyarrow")
        .reduce_lineage(text_document, name="document")
    )
    return _batches(ds)


def _realpdf_pages(paths: list[str], setup: Setup) -> Any:
    ds = _read(paths).flat_map(
        text_pages, fn_kwargs={"dpi": setup.dpi, "keep_images": setup.keep_images, "path": True}
    )
    ds = ds.repartition(target_num_rows_per_block=setup.page_rows_per_block)
    return ds.map_batches(clean_text, batch_format="pyarrow")


def realpdf_ray_data(paths: list[str], setup: Setup) -> Callable[[], Iterable[pa.Table]]:
    """flat_map pages -> map_batches clean -> groupby(path).map_groups(sort + assemble)."""
    ds = (
        _realpdf_pages(paths, setup)
        .groupby("path", num_partitions=setup.partitions)
        .map_groups(text_document_group, batch_format="pyarrow")
    )
    return _batches(ds)


def realpdf_floor(paths: list[str], setup: Setup) -> Callable[[], Iterable[pa.Table]]:
    """flat_map pages -> map_batches clean, no regroup (page rows out)."""
    return _batches(_realpdf_pages(paths, setup))


# -- ocr: render -> detect -> recognize ----------------------------------------------------------------


def ocr_lineage(paths: list[str], setup: Setup) -> Callable[[], Iterable[pa.Table]]:
    """The example's three-level plan, as users run it."""
    import lineage_data as ld
    from lineage_data.connectors.jobs.pdf import build_ocr

    ds = build_ocr(
        ld.read_files(paths),
        concurrency=setup.actors,
        batch_size=setup.batch_size,
        dpi=setup.dpi,
        threads=setup.threads,
    )
    return _batches(ds)


def ocr_pages(row: dict[str, Any], *, dpi: float) -> Iterator[dict[str, Any]]:
    """Ray Data's page expansion: render_pages as the lineage plan calls it, plus the path."""
    from lineage_data.connectors.pdf import render_pages

    for page in render_pages(row, dpi=dpi, page_errors="keep"):
        yield {**page, "path": row["path"]}


class RayDataDetect:
    """Ray Data's line expansion: DetectLines, plus the page's keys on every line.

    A page without lines yields one placeholder row (``line_index`` -1, no crop), because a
    ``flat_map`` with no output row loses the page, and the groupby would never see it.
    """

    def __init__(self, **options: Any) -> None:
        from lineage_data.connectors.ocr import DetectLines

        self._detect = DetectLines(**options)

    def __call__(self, page: dict[str, Any]) -> list[dict[str, Any]]:
        """The lines of one page (or its placeholder)."""
        keys = {"path": page["path"], "page_index": page["page_index"]}
        lines = [{**keys, **line} for line in self._detect(page)]
        if not lines:
            lines = [{**keys, "line_index": -1, "line_count": 0, "box": None, "det_score": None}]
            lines[0].update(crop=None, crop_width=0, crop_height=0)
        return lines


class RayDataRecognize:
    """RecognizeLines over the rows that have a crop; placeholders get empty text."""

    def __init__(self, **options: Any) -> None:
        from lineage_data.connectors.ocr import RecognizeLines

        self._recognize = RecognizeLines(**options)

    def __call__(self, batch: pa.Table) -> pa.Table:
        """Recognized line rows, crops dropped."""
        has = [c is not None for c in batch["crop"].to_pylist()]
        real = batch.filter(pa.array(has))
        out = self._recognize(real) if real.num_rows else {"text": [], "confidence": []}
        texts = iter(out["text"])
        confidence = iter(out["confidence"])
        text_col, conf_col = [], []
        for present in has:
            text = next(texts) if present else ""
            text_col.append(text if isinstance(text, str) else None)  # RecordFailure: no text
            conf_col.append(next(confidence) if present else None)
        keep = batch.drop_columns(["crop"])
        return keep.append_column("text", pa.array(text_col, pa.string())).append_column(
            "confidence", pa.array(conf_col, pa.float64())
        )


def ocr_page_group(table: pa.Table) -> pa.Table:
    """``map_groups`` of one page: its lines in order -> page_text."""
    from lineage_data.connectors.ocr import page_text

    rows = _group_rows(table, "line_index")
    lines = [r for r in rows if r["line_index"] >= 0]
    page = page_text({"path": rows[0]["path"], "page_index": rows[0]["page_index"]}, lines)
    return pa.Table.from_pylist([page])


def ocr_document_group(table: pa.Table) -> pa.Table:
    """``map_groups`` of one document: its pages in order -> document_text."""
    from lineage_data.connectors.ocr import document_text

    pages = _group_rows(table, "page_index")
    return pa.Table.from_pylist([document_text({"path": pages[0]["path"]}, pages)])


def _ocr_lines(paths: list[str], setup: Setup) -> Any:
    from ray.data import ActorPoolStrategy

    ds = _read(paths).flat_map(ocr_pages, fn_kwargs={"dpi": setup.dpi})
    ds = ds.repartition(target_num_rows_per_block=setup.page_rows_per_block)
    ds = ds.flat_map(
        RayDataDetect,
        compute=ActorPoolStrategy(size=setup.actors),
        num_cpus=0.25,
        fn_constructor_kwargs={"threads": setup.threads},
    )
    ds = ds.repartition(target_num_rows_per_block=setup.batch_size)
    return ds.map_batches(
        RayDataRecognize,
        batch_size=setup.batch_size,
        batch_format="pyarrow",
        compute=ActorPoolStrategy(size=setup.actors),
        num_cpus=0.25,
        fn_constructor_kwargs={"threads": setup.threads},
    )


def ocr_ray_data(paths: list[str], setup: Setup) -> Callable[[], Iterable[pa.Table]]:
    """The natural Ray Data pipeline: two flat_maps, map_batches, two groupbys."""
    ds = _ocr_lines(paths, setup)
    ds = ds.groupby(["path", "page_index"], num_partitions=setup.partitions)
    ds = ds.map_groups(ocr_page_group, batch_format="pyarrow")
    ds = ds.groupby("path", num_partitions=setup.partitions)
    ds = ds.map_groups(ocr_document_group, batch_format="pyarrow")
    return _batches(ds)


def ocr_floor(paths: list[str], setup: Setup) -> Callable[[], Iterable[pa.Table]]:
    """The same stages, no regroup: recognized line rows out."""
    return _batches(_ocr_lines(paths, setup))


class WholeDocument:
    """per_document: one actor renders, detects, recognizes and assembles a whole document."""

    def __init__(self, *, dpi: float, threads: int) -> None:
        from lineage_data.connectors.ocr import DetectLines, RecognizeLines

        self._detect = DetectLines(threads=threads)
        self._recognize = RecognizeLines(threads=threads)
        self._dpi = dpi

    def __call__(self, batch: pa.Table) -> pa.Table:
        """One row per document in the batch."""
        return pa.Table.from_pylist(
            [
                ocr_document(row, self._detect, self._recognize, self._dpi)
                for row in batch.to_pylist()
            ]
        )


def ocr_document(row: dict[str, Any], detect: Any, recognize: Any, dpi: float) -> dict[str, Any]:
    """The whole OCR of one document in one process (per_document and the limit's checks)."""
    from lineage_data.connectors.ocr import document_text
    from lineage_data.connectors.pdf import render_pages

    pages = [
        ocr_page(page, detect, recognize) for page in render_pages(row, dpi=dpi, page_errors="keep")
    ]
    return document_text({"path": row["path"]}, pages)


def ocr_page(page: dict[str, Any], detect: Any, recognize: Any) -> dict[str, Any]:
    """Detect and recognize one page row; its page_text."""
    from lineage_data.connectors.ocr import page_text

    lines = list(detect(page))
    if lines:
        out = recognize({name: [line[name] for line in lines] for name in lines[0]})
        lines = [dict(zip(out, values, strict=True)) for values in zip(*out.values(), strict=True)]
    return page_text(page, lines)


def ocr_per_document(paths: list[str], setup: Setup) -> Callable[[], Iterable[pa.Table]]:
    """Each document whole on one actor (twice the actors of one model stage)."""
    from ray.data import ActorPoolStrategy

    ds = (
        _read(paths)
        .repartition(len(paths))
        .map_batches(
            WholeDocument,
            batch_size=1,
            batch_format="pyarrow",
            compute=ActorPoolStrategy(size=2 * setup.actors),
            num_cpus=0.25,
            fn_constructor_kwargs={"dpi": setup.dpi, "threads": setup.threads},
        )
    )
    return _batches(ds)


# -- the limit: plain processes, no Ray -------------------------------------------------------------


def _limit_worker(args: tuple[list[tuple[str, int]], float, int]) -> list[tuple[str, int, str]]:
    """One process: its static share of (path, page) pairs, rendered, detected, recognized."""
    import pypdfium2

    from lineage_data.connectors.ocr import DetectLines, RecognizeLines
    from lineage_data.connectors.pdf import (  # the same page code as render_pages
        _PageOptions,
        _read_page,
    )

    share, dpi, threads = args
    detect, recognize = DetectLines(threads=threads), RecognizeLines(threads=threads)
    options = _PageOptions(dpi, 4_000_000, None, None, True, "png")
    out = []
    documents: dict[str, Any] = {}
    for path, index in share:
        if path not in documents:
            documents[path] = pypdfium2.PdfDocument(Path(path).read_bytes())
        document = documents[path]
        page = _read_page(pypdfium2, document, index, len(document), path, options)
        out.append((path, index, ocr_page(page, detect, recognize)["text"]))
    for document in documents.values():
        document.close()
    return out


def page_counts(paths: list[str]) -> dict[str, int]:
    """Pages of each PDF (PDFium, no rendering)."""
    import pypdfium2

    counts = {}
    for path in paths:
        document = pypdfium2.PdfDocument(path)
        counts[path] = len(document)
        document.close()
    return counts


def ocr_limit(paths: list[str], setup: Setup, cores: int) -> Run:
    """Render + detect + recognize in ``cores`` plain processes, page ``j`` to process ``j % cores``."""
    from lineage_data.connectors.ocr import document_text

    memory = MemorySampler()
    memory.start()
    start = time.time()
    counts = page_counts(paths)
    pages = [(path, i) for path in paths for i in range(counts[path])]
    shares = [(pages[k::cores], setup.dpi, setup.threads) for k in range(cores)]
    with multiprocessing.get_context("spawn").Pool(cores) as pool:
        results = pool.map(_limit_worker, shares, chunksize=1)
    by_doc: dict[str, dict[int, str]] = {}
    for share in results:
        for path, index, text in share:
            by_doc.setdefault(path, {})[index] = text
    texts = {
        norm_path(path): document_text(
            {"path": path}, [{"text": pages_[i]} for i in sorted(pages_)]
        )["text"]
        for path, pages_ in by_doc.items()
    }
    wall = time.time() - start
    return Run("limit", wall, None, texts, len(texts), memory.stop())


FLOORS = ("floor",)  # systems whose rows are pages or lines, not documents

SetupRunner = Callable[[list[str], Setup], Callable[[], Iterable[pa.Table]]]

REALPDF: dict[str, SetupRunner] = {
    "floor": realpdf_floor,
    "ray_data": realpdf_ray_data,
    "lineage_data": realpdf_lineage,
}
OCR: dict[str, SetupRunner] = {
    "floor": ocr_floor,
    "ray_data": ocr_ray_data,
    "per_document": ocr_per_document,
    "lineage_data": ocr_lineage,
}


#: The untimed warm-up run reads the shortest PDFs, at most this many and this many pages (one at least).
WARM_UP_PDFS = 4
WARM_UP_PAGES = 16


def warm_up_run(
    runners: dict[str, SetupRunner], paths: list[str], setup: Setup, counts: dict[str, int]
) -> dict[str, Any]:
    """Run the floor once, untimed, on the few shortest PDFs, before any measured run.

    The first pipeline in a fresh Ray starts Ray's pooled worker processes and pays their first
    imports (pypdfium2, the model's package); measured on 16 scanned PDFs (bench/README, "The first
    run in a fresh Ray"), the floor took 36.7 s and 72.4 busy CPU-s when it ran first, 32.2 s and
    63.9 right after. Without this, whichever system the order puts first carries that cost.
    """
    few = warm_up_paths(paths, counts)
    run = consume("floor", runners["floor"](few, setup), key=None)
    pages = sum(counts[p] for p in few)
    log(f"warm-up, untimed: floor on {len(few)} PDFs ({pages} pages), {run.wall_s:.1f}s")
    return {"system": "floor", "pdfs": len(few), "pages": pages, "wall_s": round(run.wall_s, 3)}


def warm_up_paths(paths: list[str], counts: dict[str, int]) -> list[str]:
    """The shortest PDFs: at most WARM_UP_PDFS of them and WARM_UP_PAGES pages, one at least."""
    few: list[str] = []
    for path in sorted(paths, key=lambda p: (counts[p], p))[:WARM_UP_PDFS]:
        if few and sum(counts[p] for p in few) + counts[path] > WARM_UP_PAGES:
            break
        few.append(path)
    return few


def setup_dict(setup: Setup) -> dict[str, Any]:
    """The setup as JSON."""
    return asdict(setup)
