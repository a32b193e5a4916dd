"""``ocr``: a real OCR model (RapidOCR, PP-OCRv4) through every system, on image-only PDFs.

Default corpus: seeded long-tailed PDFs whose pages are images only (``write_scanned_corpus``),
so the text can only come from the model and the character error rate against the generating
text checks that it ran, in order. ``--input DIR`` takes any directory of PDFs instead (no CER).
"""

from __future__ import annotations

import os
import statistics
import tempfile
from pathlib import Path
from typing import Any

from bench.common import SMOKE_PARTITIONS, log, publish
from bench.documents import (
    FLOORS,
    OCR,
    Run,
    Setup,
    consume,
    norm_path,
    ocr_limit,
    setup_dict,
    warm_up_run,
)
from bench.systems import clean

# pages: (PDFs, max pages, mean pages, dpi, lines per page). Small: about 280 pages, ~1 CPU-s each.
# repeats: each system that many times, in the order A B C .. C B A (machine drift cancels out of
# the medians; one run each read 0.88x and 1.11x the floor on two days with the same code path).
SCALES: dict[str, dict[str, Any]] = {
    "smoke": {"pdfs": 4, "max_pages": 3, "mean_pages": 2, "dpi": 50, "lines": (1, 3), "repeats": 1},
    "small": {
        "pdfs": 40,
        "max_pages": 40,
        "mean_pages": 6,
        "dpi": 72,
        "lines": (2, 6),
        "repeats": 2,
    },
    "full": {
        "pdfs": 200,
        "max_pages": 120,
        "mean_pages": 10,
        "dpi": 100,
        "lines": (4, 12),
        "repeats": 1,
    },
}
# The run right after Ray Data's groupby starts new worker processes and is slower (bench/README,
# "realpdf small, 2026-12-05"): in A B C .. C B A the floor follows it once and lineage_data once.
ORDER = ("lineage_data", "ray_data", "floor", "per_document", "daft", "limit")
SMOKE_ORDER = ("floor", "ray_data", "lineage_data", "limit")


def _corpus(scale: str, seed: int, input_dir: str | None, scratch: Path) -> tuple[list[str], dict]:
    """The PDF paths, and the true text by path (empty for ``--input``)."""
    from lineage_data.connectors.testing.corpus import write_scanned_corpus

    if input_dir:
        paths = sorted(str(p.resolve()) for p in Path(input_dir).rglob("*.pdf"))
        if not paths:
            raise SystemExit(f"no *.pdf under {input_dir}")
        return paths, {}
    conf = SCALES[scale]
    manifest = write_scanned_corpus(
        scratch / "corpus",
        n_pdfs=conf["pdfs"],
        seed=seed,
        max_pages=conf["max_pages"],
        mean_pages=conf["mean_pages"],
        dpi=conf["dpi"],
        lines=conf["lines"],
    )
    files = manifest["files"]
    return [f["path"] for f in files], {norm_path(f["path"]): f["text"] for f in files}


def _cer(texts: dict[str, str], truth: dict[str, str], *, spaces: bool = False) -> float | None:
    """Characters in error over all documents (case folded; whitespace removed, or with
    ``spaces`` kept as one space a run)."""
    from lineage_data.connectors.ocr import character_error_rate

    if not truth:
        return None
    sep = " " if spaces else ""
    total = sum(len(sep.join(t.split())) for t in truth.values())
    errors = sum(
        character_error_rate(texts.get(path, ""), ref, spaces=spaces) * len(sep.join(ref.split()))
        for path, ref in truth.items()
    )
    return round(errors / max(1, total), 4)


def _word_similarity(texts: dict[str, str], truth: dict[str, str]) -> float | None:
    """``word_similarity`` per document, weighted by the reference's words."""
    from lineage_data.connectors.ocr import word_similarity

    if not truth:
        return None
    weights = {path: len(ref.split()) for path, ref in truth.items()}
    total = sum(
        word_similarity(texts.get(path, ""), ref) * weights[path] for path, ref in truth.items()
    )
    return round(total / max(1, sum(weights.values())), 4)


def _run_system(system: str, paths: list[str], setup: Setup, cores: int, daft: bool) -> Run | str:
    """One run of one system, or why it did not run (Daft is optional)."""
    if system == "limit":
        return ocr_limit(paths, setup, cores)
    if system == "daft":
        try:
            if not daft:
                raise RuntimeError("disabled with --no-daft")
            from bench.documents_daft import ocr_daft

            return ocr_daft(paths, setup)
        except Exception as exc:  # noqa: BLE001 - Daft is optional: say why it did not run
            return f"not run: {type(exc).__name__}: {str(exc)[:300]}"
    key = None if system in FLOORS else "path"
    return consume(
        system, OCR[system](paths, setup), key=key, store_interval_s=setup.store_interval_s
    )


def _summary(
    tries: list[Run], pages: int, truth: dict[str, str] | None, *, best: bool = False
) -> dict[str, Any]:
    """A system's figures over its runs: the median wall (the best: ``best``, for a floor) and
    pages/s from it, the first run's rest."""
    out = tries[0].summary(pages, 0)
    walls = [round(t.wall_s, 3) for t in tries]
    out["wall_s"] = round(min(walls) if best else statistics.median(walls), 3)
    out["walls_s"] = walls
    out["pages_per_s"] = round(pages / out["wall_s"], 3)
    if tries[0].first_doc_s is not None:
        firsts = [t.first_doc_s / t.wall_s for t in tries if t.first_doc_s is not None]
        out["first_doc_frac"] = round(statistics.median(firsts), 4)
    if truth is not None:  # a system whose rows are documents
        out["cer"] = _cer(tries[0].texts, truth)
        out["cer_spaced"] = _cer(tries[0].texts, truth, spaces=True)
        out["word_similarity"] = _word_similarity(tries[0].texts, truth)
        out["documents_out"] = len(tries[0].texts)
    return out


def run(
    scale: str, out_dir: Path, *, seed: int = 0, input_dir: str | None = None, daft: bool = True
) -> dict[str, Any]:
    """Run every system once on one corpus; write the JSON; return the headline."""
    from bench.documents import page_counts

    scratch = Path(tempfile.mkdtemp(prefix="bench-ocr-"))
    try:
        paths, truth = _corpus(scale, seed, input_dir, scratch)
        counts = page_counts(paths)
        pages = sum(counts.values())
        dpi = SCALES[scale]["dpi"]
        partitions = SMOKE_PARTITIONS if scale == "smoke" else None
        setup = Setup(dpi=dpi, store_interval_s=1.0, partitions=partitions)
        cores = len(os.sched_getaffinity(0))
        log(
            f"ocr/{scale}: {len(paths)} PDFs, {pages} pages (max {max(counts.values())}), {dpi} dpi"
        )
        systems = SMOKE_ORDER if scale == "smoke" else ORDER
        repeats = SCALES[scale]["repeats"]
        order = [*systems, *reversed(systems)] if repeats > 1 else list(systems)
        runs: dict[str, list[Run]] = {}
        skipped: dict[str, str] = {}
        warm = None if scale == "smoke" else warm_up_run(OCR, paths, setup, counts)
        for system in order:
            if system in skipped:
                continue
            log(f"running {system} ...")
            result = _run_system(system, paths, setup, cores, daft)
            if isinstance(result, str):
                skipped[system] = result
                log(f"{system}: {result}")
                continue
            runs.setdefault(system, []).append(result)
            log(f"{system}: {result.wall_s:.1f}s")
    finally:
        clean(scratch)
    results = {
        name: _summary(tries, pages, None if name in FLOORS else truth, best=name in FLOORS)
        for name, tries in runs.items()
    }
    reference = runs["lineage_data"][0].texts
    same = {
        name: all(r.texts == reference for r in tries)
        for name, tries in runs.items()
        if name not in FLOORS
    }
    ld = results["lineage_data"]

    def ratio(other: str) -> float | None:
        return round(ld["wall_s"] / results[other]["wall_s"], 4) if other in results else None

    headline = {
        "bench": "ocr",
        "scale": scale,
        "wall_ratio_vs_floor": ratio("floor"),
        "wall_ratio_vs_ray_data": ratio("ray_data"),
        "wall_ratio_vs_per_document": ratio("per_document"),
        "wall_ratio_vs_daft": ratio("daft"),
        "pages_per_s_vs_limit": round(ld["pages_per_s"] / results["limit"]["pages_per_s"], 4),
        "cer": ld["cer"],
        "cer_spaced": ld["cer_spaced"],
        "word_similarity": ld["word_similarity"],
        "first_doc_frac": ld["first_doc_frac"],
        "peak_driver_rss_mib": ld.get("peak_driver_rss_mib"),
        "pages": pages,
        "pages_per_s": {name: r["pages_per_s"] for name, r in results.items()},
        "wall_s": {name: r["wall_s"] for name, r in results.items()},
    }
    publish(
        "ocr",
        scale,
        seed,
        out_dir,
        f"ocr/{scale}: {len(paths)} PDFs, {pages} pages",
        [],
        {
            "corpus": {
                "input": input_dir or "generated image-only PDFs (write_scanned_corpus)",
                "pdfs": len(paths),
                "pages": pages,
                "max_pages": max(counts.values()),
                "median_pages": statistics.median(counts.values()),
                "generator": None if input_dir else SCALES[scale],
            },
            "setup": {**setup_dict(setup), "cores": cores, "warm_up": warm},
            "same_text_as_lineage_data": same,
            "notes": (
                "Each system `repeats` times in the order A B C .. C B A; wall_s is the median (the floor's: the best) "
                "(walls_s: every run), after one untimed floor run on the shortest PDFs "
                "(setup.warm_up: the first pipeline in a fresh Ray starts its worker pool). "
                "One Ray instance (8 logical CPUs on this machine's cores) for every Ray system; "
                "each model stage has `actors` actors (per_document twice as many), one "
                "onnxruntime thread each. limit = the same page functions in plain processes, one "
                "per core, page j to process j % cores, no Ray (process start and model load "
                "included, as actor start-up is for the others). wall_s from building the "
                "pipeline to the last row consumed on the driver. cer over all documents, "
                "whitespace removed and case folded; cer_spaced the same with each whitespace "
                "run kept as one space; word_similarity lineage_data.connectors.ocr.word_similarity per "
                "document, weighted by the reference's words."
            ),
            "systems": results,
            "skipped": skipped,
            "headline": headline,
        },
    )
    return headline
