"""Your own PDF pipeline in a page: read, expand into pages, a model per batch, reduce, shards.

    python examples/pdf_to_shards.py INPUT OUTPUT          # or: lineage-data run examples/pdf_to_shards.py INPUT OUTPUT

The installed job ``lineage-data pdf`` (:mod:`lineage_data.connectors.jobs.pdf`) does this with more options; copy
this file to start a pipeline of your own: change the page stage, the document row, the output.
"""

from __future__ import annotations

import sys

from ray.data import ActorPoolStrategy

import lineage_data as ld
from lineage_data.connectors.pdf import ExtractText, render_pages
from lineage_data.connectors.shards import write_shards


def assemble(pdf: dict, pages: list[dict]) -> dict:
    """One row per PDF: its pages' text in page order (children arrive in ordinal order)."""
    return {"path": pdf["path"], "pages": len(pages), "text": "\n\n".join(p["text"] for p in pages)}


def main(input_path: str, output: str) -> None:
    ld.init(include_dashboard=False)
    docs = (
        ld.read_files(input_path, file_extensions=["pdf"])
        .expand_lineage(render_pages, name="pages", fn_kwargs={"render": False})
        .map_batches(  # a callable class on an actor pool: batches mix pages of many PDFs
            ExtractText,
            name="text",
            batch_size=16,
            compute=ActorPoolStrategy(size=2),
            num_cpus=0.25,
        )
        .reduce_lineage(assemble, name="document")  # each PDF commits once its own pages are done
    )
    result = write_shards(docs, output)  # exactly once; a rerun resumes after committed PDFs
    print(result.report.summary())
    print(f"shards: {output}")


if __name__ == "__main__":
    main(*sys.argv[1:3])
