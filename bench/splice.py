"""``python -m bench.splice OUT SRC.pdf [SRC.pdf ...]``: a long-tailed corpus cut from real PDFs.

The network is closed here, so a bench cannot fetch a corpus of real-world documents. This tool
builds one with their shape from whatever real PDFs a machine has: ``--pdfs`` documents whose page
counts are drawn log-normally (seeded) and scaled to about ``--pages`` pages in all, the largest set
to ``--max-pages``, each made of runs of consecutive pages copied from the sources with pypdfium2
(typeset pages, real fonts and text layers; the content repeats, the sizes are the long tail). The
defaults are the shape of the corpus issue 27 describes: 195 PDFs, ~7,236 pages, 1 to 1,370 each.
Feed the directory to ``python -m bench realpdf --input OUT`` (or ``ocr``).
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path


def page_counts(n: int, pages: int, max_pages: int, rng: random.Random) -> list[int]:
    """``n`` page counts: one of ``max_pages``, the others log-normal, about ``pages`` in all."""
    if n < 1 or max_pages < 1:
        raise ValueError("need at least one PDF of at least one page")
    if n == 1:
        return [max_pages]
    drawn = [rng.lognormvariate(2.6, 1.3) for _ in range(n - 1)]
    scale = max(pages - max_pages, n - 1) / sum(drawn)
    return [max(1, min(max_pages, round(d * scale))) for d in drawn] + [max_pages]


def splice(
    out: Path, sources: list[Path], *, pdfs: int, pages: int, max_pages: int, seed: int
) -> list[int]:
    """Write ``pdfs`` spliced PDFs into ``out``; returns their page counts."""
    import pypdfium2

    docs = [pypdfium2.PdfDocument(str(path)) for path in sources]
    docs = [d for d in docs if len(d)]
    if not docs:
        raise ValueError("the source PDFs have no pages")
    rng = random.Random(seed)
    counts = page_counts(pdfs, pages, max_pages, rng)
    out.mkdir(parents=True, exist_ok=True)
    for k, n in enumerate(counts):
        doc = pypdfium2.PdfDocument.new()
        while len(doc) < n:
            source = docs[rng.randrange(len(docs))]
            start = rng.randrange(len(source))
            take = min(n - len(doc), len(source) - start)
            doc.import_pages(source, list(range(start, start + take)))
        doc.save(out / f"doc-{k:04d}.pdf")
        doc.close()
    for d in docs:
        d.close()
    return counts


def main(argv: list[str] | None = None) -> int:
    """Parse the arguments, write the corpus, print its shape."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("sources", type=Path, nargs="+")
    parser.add_argument("--pdfs", type=int, default=195)
    parser.add_argument("--pages", type=int, default=7236)
    parser.add_argument("--max-pages", type=int, default=1370)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    counts = splice(
        args.out,
        args.sources,
        pdfs=args.pdfs,
        pages=args.pages,
        max_pages=args.max_pages,
        seed=args.seed,
    )
    median = sorted(counts)[len(counts) // 2]
    print(
        f"{len(counts)} PDFs, {sum(counts)} pages, max {max(counts)}, median {median}: {args.out}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
