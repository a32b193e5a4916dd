"""``lineage-data pdf IN OUT``: PDFs -> pages -> text -> one markdown document per PDF -> shards.

    lineage-data pdf s3://corpus/pdfs/ s3://corpus/shards/pdf
    lineage-data pdf scans/ shards/ocr --stage ocr

The default page stage extracts the PDF text layer on CPU (``--stage text``). ``--stage ocr`` is the
three-level OCR pipeline (no text layer used): pages are rendered, each page expands into its text
lines (:class:`lineage_data.connectors.ocr.DetectLines`), the line crops of many pages share recognizer batches
(:class:`lineage_data.connectors.ocr.RecognizeLines` on an actor pool; ``--num-gpus 1`` runs it on the CUDA
provider), then lines reduce into pages and pages into documents. ``--stage vlm`` renders pages and
runs :class:`lineage_data.connectors.vllm.VllmStage` (``--model`` a local model path; without it the CPU stand-in
engine ``EchoLLM`` answers, so the pipeline runs anywhere). ``--stage server`` sends each rendered
page to an OpenAI-compatible model server (``--server-url``, ``--model``).
"""

from __future__ import annotations

import argparse
import functools
from typing import Any

import lineage_data as ld
from lineage_data.connectors.jobs._common import common_args, model_args, run_job
from lineage_data.connectors.pdf import PAGE_TIMEOUT_S, ExtractText, render_pages

STAGES = ("text", "ocr", "vlm", "server")
# Render dpi of the OCR stage: at 72 dpi the recognizer ran words together on the demo's pages.
OCR_DPI = 100.0
EXTRAS = {"text": ("pdf", ["pypdfium2"]), "ocr": ("ocr", ["pypdfium2", "rapidocr_onnxruntime"])}


def assemble(parent: dict, pages: list[dict]) -> dict:
    """One markdown document from its pages, in page order."""
    body = "\n\n".join(f"<!-- page {i + 1} -->\n{p['text'] or ''}" for i, p in enumerate(pages))
    return {"path": parent["path"], "size": parent["size"], "pages": len(pages), "markdown": body}


def build(
    input_path: str | list[str],
    *,
    stage: str = "text",
    model: str | None = None,
    server_url: str | None = None,
    concurrency: int = 2,
    num_gpus: float = 0,
    batch_size: int = 16,
    dpi: float | None = None,
    filesystem: Any = None,
) -> ld.LineageDataset:
    """The lineage plan (nothing runs until it is consumed)."""
    docs = ld.read_files(input_path, filesystem=filesystem, file_extensions=["pdf"])
    pool: dict[str, Any] = dict(concurrency=concurrency, num_gpus=num_gpus, batch_size=batch_size)
    if stage == "ocr":
        return build_ocr(docs, dpi=dpi or OCR_DPI, **pool)
    pages = docs.expand_lineage(
        functools.partial(render_pages, dpi=dpi or 72.0, render=stage in ("vlm", "server")),
        name="render_pages",
        timeout_s=PAGE_TIMEOUT_S,
    )
    text = _transcribe(pages, stage, model, server_url, model_args(**pool))
    return text.reduce_lineage(assemble, name="assemble")


def _transcribe(
    pages: ld.LineageDataset,
    stage: str,
    model: str | None,
    server_url: str | None,
    args: dict[str, Any],
) -> ld.LineageDataset:
    """The page text: a vision model (``vlm``: vLLM; ``server``: an OpenAI API) or the text layer."""
    if stage == "vlm":
        from lineage_data.connectors.echo_llm import EchoLLM
        from lineage_data.connectors.vllm import VllmStage

        model_stage: Any = VllmStage
        options = {"model": model or "echo", "llm_factory": None if model else EchoLLM}
    elif stage == "server":
        from lineage_data.connectors.openai import OpenAIChatStage

        if not (server_url and model):
            raise SystemExit("lineage-data pdf: --stage server needs --server-url and --model")
        model_stage, options = OpenAIChatStage, {"base_url": server_url, "model": model}
    else:
        return pages.map_batches(ExtractText, name="text", **args)
    options |= {
        "prompt_template": "Transcribe page {page_index} as markdown.",
        "image_column": "image",
        "output_column": "text",
    }
    return pages.map_batches(model_stage, name="ocr", fn_constructor_kwargs=options, **args)


def build_ocr(
    docs: ld.LineageDataset,
    *,
    concurrency: int = 2,
    num_gpus: float = 0,
    batch_size: int = 16,
    dpi: float = OCR_DPI,
    threads: int = 1,
) -> ld.LineageDataset:
    """Documents -> pages -> lines -> recognized lines -> page text -> document text and markdown."""
    from ray.data import ActorPoolStrategy

    from lineage_data.connectors.ocr import DetectLines, RecognizeLines, document_text, page_text

    device = "cuda" if num_gpus else "cpu"
    # The function, not the class PdfPages: rendering keeps no state, and Ray runs a function as
    # tasks on pooled workers where a class gets an autoscaling actor pool (a process per actor).
    pages = docs.expand_lineage(
        render_pages,
        name="render_pages",
        timeout_s=PAGE_TIMEOUT_S,
        fn_kwargs={"dpi": dpi, "page_errors": "keep"},
    )
    lines = pages.expand_lineage(
        DetectLines,
        name="detect_lines",
        compute=ActorPoolStrategy(size=concurrency),
        num_cpus=0.25,
        fn_constructor_kwargs={"device": "cpu", "threads": threads},
    )
    text = lines.map_batches(
        RecognizeLines,
        name="recognize_lines",
        fn_constructor_kwargs={"device": device, "threads": threads},
        **model_args(concurrency, num_gpus, batch_size),
    )
    return text.reduce_lineage(page_text, name="page_text").reduce_lineage(
        document_text, name="document_text"
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The PDF job's options."""
    common_args(parser)
    parser.add_argument(
        "--stage",
        choices=STAGES,
        default="text",
        help="how a page becomes text: its text layer (default), OCR with RapidOCR's PP-OCRv4, "
        "a vLLM model, or an OpenAI-compatible model server",
    )
    parser.add_argument(
        "--dpi",
        type=float,
        default=None,
        help=f"render resolution of pages (default 72; {OCR_DPI:g} for --stage ocr)",
    )
    parser.add_argument(
        "--model", default=None, help="vLLM model path (vlm) or model name (server)"
    )
    parser.add_argument(
        "--server-url", default=None, help="base URL of the model server (--stage server)"
    )


def run(args: argparse.Namespace) -> int:
    """The command: check the extras, start Ray quietly, write the shards, print the summary."""
    return run_job(
        args,
        EXTRAS.get(args.stage, ("pdf", ["pypdfium2"])),
        lambda: build(
            args.input,
            stage=args.stage,
            model=args.model,
            server_url=args.server_url,
            concurrency=args.concurrency,
            num_gpus=args.num_gpus,
            batch_size=args.batch_size,
            dpi=args.dpi,
        ),
        unit="pages",
    )
