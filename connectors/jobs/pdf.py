"""PDFs -> pages -> text (OCR or VLM) -> one markdown document per PDF -> Parquet shards.

    python -m examples.pdf_to_shards --input s3://corpus/pdfs/ --output s3://corpus/shards/pdf
    python -m examples.pdf_to_shards --stage ocr --dpi 100 --input scans/ --output shards/ocr

The default page stage extracts the PDF text layer on CPU. ``--stage ocr`` is the three-level OCR
pipeline (no text layer used): pages are rendered, each page expands into its text lines
(:class:`connectors.ocr.DetectLines`), the line crops of many pages share recognizer batches
(:class:`connectors.ocr.RecognizeLines` on an actor pool; ``--num-gpus 1`` runs it on the CUDA
provider), then lines reduce into pages and pages into documents. ``--stage vlm`` renders pages
and runs :class:`connectors.vllm.VllmStage` (``--model`` a local model path; without it the CPU
stand-in engine ``EchoLLM`` answers, so the pipeline runs anywhere).
"""

from __future__ import annotations

import argparse
import functools
import sys
from typing import Any

import lineage_data as ld
from connectors.ocr import DetectLines, RecognizeLines, document_text, page_text
from connectors.pdf import PAGE_TIMEOUT_S, ExtractText, render_pages
from connectors.testing.echo_llm import EchoLLM
from connectors.vllm import VllmStage


def assemble(parent: dict, pages: list[dict]) -> dict:
    """One markdown document from its pages, in page order."""
    body = "\n\n".join(f"<!-- page {i + 1} -->\n{p['text'] or ''}" for i, p in enumerate(pages))
    return {"path": parent["path"], "size": parent["size"], "pages": len(pages), "markdown": body}


def build(
    input_path: str,
    *,
    stage: str = "text",
    model: str | None = None,
    concurrency: int = 2,
    num_gpus: float = 0,
    batch_size: int = 16,
    dpi: float = 72,
    filesystem: Any = None,
) -> ld.LineageDataset:
    """The lineage plan (nothing runs until it is consumed)."""
    docs = ld.read_files(input_path, filesystem=filesystem)
    if stage == "ocr":
        return build_ocr(
            docs, concurrency=concurrency, num_gpus=num_gpus, batch_size=batch_size, dpi=dpi
        )
    pages = docs.expand_lineage(
        functools.partial(render_pages, dpi=dpi, render=stage == "vlm"),
        name="render_pages",
        timeout_s=PAGE_TIMEOUT_S,
    )
    from examples._cli import model_args as stage_args

    model_args = stage_args(concurrency, num_gpus, batch_size)
    if stage == "vlm":
        ocr = pages.map_batches(
            VllmStage,
            name="ocr",
            fn_constructor_kwargs={
                "model": model or "echo",
                "prompt_template": "Transcribe page {page_index} as markdown.",
                "image_column": "image",
                "output_column": "text",
                "llm_factory": None if model else EchoLLM,
            },
            **model_args,
        )
    else:
        ocr = pages.map_batches(ExtractText, name="text", **model_args)
    return ocr.reduce_lineage(assemble, name="assemble")


def build_ocr(
    docs: ld.LineageDataset,
    *,
    concurrency: int = 2,
    num_gpus: float = 0,
    batch_size: int = 16,
    dpi: float = 100,
    threads: int = 1,
) -> ld.LineageDataset:
    """Documents -> pages -> lines -> recognized lines -> page text -> document text and markdown."""
    from ray.data import ActorPoolStrategy

    from examples._cli import model_args

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


def main(argv: list[str] | None = None) -> int:
    """Run the pipeline and print where the shards are."""
    from examples._cli import common_args, start_ray, write_and_report

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    common_args(parser)
    parser.add_argument("--stage", choices=["text", "ocr", "vlm"], default="text")
    parser.add_argument(
        "--model", default=None, help="vLLM model path (vlm stage); default: EchoLLM"
    )
    parser.add_argument("--dpi", type=float, default=72)
    args = parser.parse_args(argv)
    start_ray(args.address)
    docs = build(
        args.input,
        stage=args.stage,
        model=args.model,
        concurrency=args.concurrency,
        num_gpus=args.num_gpus,
        batch_size=args.batch_size,
        dpi=args.dpi,
    )
    return write_and_report(docs, args)


if __name__ == "__main__":
    sys.exit(main())
