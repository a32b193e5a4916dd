"""``bench.documents.warm_up_paths``: what the untimed warm-up run of ``ocr`` and ``realpdf`` reads."""

from __future__ import annotations

from bench.documents import WARM_UP_PAGES, WARM_UP_PDFS, warm_up_paths


def test_the_shortest_pdfs_within_both_limits():
    counts = {f"d{i}.pdf": pages for i, pages in enumerate([40, 1, 3, 2, 9, 1, 6])}
    few = warm_up_paths(list(counts), counts)
    assert few == ["d1.pdf", "d5.pdf", "d3.pdf", "d2.pdf"]  # fewest pages first, name breaks ties
    assert len(few) <= WARM_UP_PDFS and sum(counts[p] for p in few) <= WARM_UP_PAGES


def test_stops_at_the_page_limit():
    counts = {"a.pdf": 10, "b.pdf": 10, "c.pdf": 30}
    assert warm_up_paths(list(counts), counts) == ["a.pdf"]


def test_one_pdf_even_when_it_is_long():
    counts = {"long.pdf": 1370, "longer.pdf": 2000}
    assert warm_up_paths(list(counts), counts) == ["long.pdf"]
