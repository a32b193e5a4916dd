"""Reading order of text-line boxes on a page: a recursive XY-cut (pure Python, no model).

No installed package does XY-cut on bare boxes (the layout packages bring their own models). A
region is cut along whitespace bands that cross it whole:

1. a **gutter** (vertical band) cuts it into columns, left to right, unless the pieces stand side
   by side over less than 1.5 line heights (a line beside a short label) or one is narrower than
   a text column beside a clearly wider one (a table's labels beside their values);
2. a **break** (a horizontal band clearly taller than the page's line spacing) cuts it into
   blocks, top to bottom; with both, the wider band wins (aligned paragraph gaps of two columns
   do not cut across the gutter);
3. else the widest horizontal band(s) cut it into rows.

A region one line high is a **row**, read left to right; a region no cut splits (skewed lines)
falls back to rows by box centre. Boxes may overlap by 20 % of the median line height and still
be cut apart. Ties break by coordinates, so the result does not depend on the input order.
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Sequence

__all__ = ["Box", "quad_to_box", "reading_order", "text_rows"]

Box = tuple[float, float, float, float]
"""An axis-aligned box ``(x0, y0, x1, y1)``, y growing downwards."""

_TOLERANCE = 0.1  # of the median line height, per side: boxes overlapping by 2x this still cut
_COLUMN = 1.5  # columns stand side by side over more than this many line heights
_COLUMN_WIDTH = 10.0  # a text column is at least this many line heights wide ...
_LABELS = 0.8  # ... a narrower piece, less wide than this fraction of its neighbour, is labels
_BREAK = 0.5  # a break is this many line heights taller than the page's usual line spacing


def quad_to_box(quad: Sequence[float]) -> Box:
    """The axis-aligned bounding box of a flat list of corner coordinates ``x0, y0, x1, y1, ...``.

    Example:
        >>> quad_to_box([10, 5, 90, 7, 90, 20, 10, 18])
        (10.0, 5.0, 90.0, 20.0)
    """
    xs, ys = quad[0::2], quad[1::2]
    return (float(min(xs)), float(min(ys)), float(max(xs)), float(max(ys)))


def reading_order(boxes: Sequence[Box]) -> list[int]:
    """The indices of ``boxes`` in reading order (recursive XY-cut; see the module docstring).

    Example:
        >>> title = (0, 0, 400, 10)
        >>> left = [(0, 40, 190, 50), (0, 55, 190, 65)]
        >>> right = [(210, 40, 400, 50), (210, 55, 400, 65)]
        >>> reading_order([right[1], left[0], title, right[0], left[1]])
        [2, 1, 4, 3, 0]
    """
    return [i for row in text_rows(boxes) for i in row]


def text_rows(boxes: Sequence[Box]) -> list[list[int]]:
    """The text rows of ``boxes`` in reading order, each row's indices left to right.

    Two boxes of one line (that the detector split) share a row; lines of two columns do not.

    Example:
        >>> text_rows([(50, 1, 90, 11), (0, 0, 40, 10), (0, 20, 90, 30)])
        [[1, 0], [2]]
    """
    if not boxes:
        return []
    page = _Page([tuple(map(float, box)) for box in boxes])  # type: ignore[misc]
    rows: list[list[int]] = []
    stack = [list(range(len(boxes)))]
    while stack:
        region = stack.pop()
        if len(region) == 1 or page.is_row(region):
            rows.append(page.left_to_right(region))
            continue
        pieces = page.cut(region)
        if pieces is None:
            rows.extend(page.rows(region))
        else:
            stack.extend(reversed(pieces))
    return rows


class _Page:
    """The boxes of one page and the scales every cut is measured in."""

    def __init__(self, boxes: list[Box]) -> None:
        self.boxes = boxes
        self.height = max(statistics.median(b[3] - b[1] for b in boxes), 1.0)
        self.tol = _TOLERANCE * self.height
        self.break_gap = max(self._line_spacing(), 0.0) + _BREAK * self.height

    def _line_spacing(self) -> float:
        """Median gap from each box to the nearest box below it that shares some x."""
        gaps = []
        for a in self.boxes:
            below = [
                b[1] - a[3]
                for b in self.boxes
                if b[1] > a[1] + self.height / 2 and b[0] < a[2] and a[0] < b[2]
            ]
            if below:
                gaps.append(min(below))
        return statistics.median(gaps) if gaps else 0.0

    def cut(self, region: list[int]) -> list[list[int]] | None:
        """The region's pieces in reading order, or None when no cut splits it."""
        bands = self._gaps(region, axis=1)
        breaks = [gap for gap in bands if gap[0] >= self.break_gap]
        columns = self._columns(region)
        if columns is not None and (not breaks or columns[1] >= max(w for w, _ in breaks)):
            return columns[0]
        if breaks:
            return self._split(region, breaks, axis=1)
        if bands:
            widest = max(width for width, _ in bands)
            return self._split(region, [g for g in bands if g[0] >= widest - self.tol], axis=1)
        return None

    def is_row(self, region: list[int]) -> bool:
        """One text line: every box overlaps the others vertically, about one line high."""
        top = max(self.boxes[i][1] for i in region)
        bottom = min(self.boxes[i][3] for i in region)
        extent = max(self.boxes[i][3] for i in region) - min(self.boxes[i][1] for i in region)
        tallest = max(self.boxes[i][3] - self.boxes[i][1] for i in region)
        return bottom - top > 0 and extent < tallest + self.height / 2

    def _columns(self, region: list[int]) -> tuple[list[list[int]], float] | None:
        """The region cut at its gutters (module docstring, 1.) and the widest gutter, or None."""
        pieces = self._split(region, self._gaps(region, axis=0), axis=0)
        if pieces is None:
            return None
        columns = [pieces[0]]
        for piece in pieces[1:]:
            if self._two_columns(columns[-1], piece):
                columns.append(piece)
            else:
                columns[-1] = columns[-1] + piece
        if len(columns) == 1:
            return None
        widest = max(
            min(self.boxes[i][0] for i in right) - max(self.boxes[i][2] for i in left)
            for left, right in itertools.pairwise(columns)
        )
        return columns, widest

    def _two_columns(self, a: list[int], b: list[int]) -> bool:
        """Side by side over more than ``_COLUMN`` line heights, and not labels beside values.

        Labels: one piece narrower than a text column and than ``_LABELS`` of the other.
        """
        top = max(min(self.boxes[i][1] for i in a), min(self.boxes[i][1] for i in b))
        bottom = min(max(self.boxes[i][3] for i in a), max(self.boxes[i][3] for i in b))
        narrow, wide = sorted((self._width(a), self._width(b)))
        labels = narrow < _COLUMN_WIDTH * self.height and narrow < _LABELS * wide
        return bottom - top > _COLUMN * self.height and not labels

    def _width(self, piece: list[int]) -> float:
        return max(self.boxes[i][2] for i in piece) - min(self.boxes[i][0] for i in piece)

    def _gaps(self, region: list[int], *, axis: int) -> list[tuple[float, float]]:
        """Whitespace bands across the region along ``axis`` (0: x, 1: y): (width, where)."""
        spans = sorted((self.boxes[i][axis], self.boxes[i][axis + 2]) for i in region)
        gaps = []
        end = spans[0][1]
        for start, stop in spans[1:]:
            if start - end > -2 * self.tol:
                gaps.append((start - end, (start + end) / 2))
            end = max(end, stop)
        return gaps

    def _split(
        self, region: list[int], gaps: list[tuple[float, float]], *, axis: int
    ) -> list[list[int]] | None:
        """The region cut at the gaps, in coordinate order; None if every box fell on one side."""
        cuts = sorted(where for _, where in gaps)
        pieces: list[list[int]] = [[] for _ in range(len(cuts) + 1)]
        for i in region:
            centre = (self.boxes[i][axis] + self.boxes[i][axis + 2]) / 2
            pieces[sum(centre > c for c in cuts)].append(i)
        kept = [piece for piece in pieces if piece]
        return kept if len(kept) > 1 else None

    def rows(self, region: list[int]) -> list[list[int]]:
        """A region no cut splits: rows by box centre (within half a line), each left to right."""
        by_centre = sorted(region, key=lambda i: (self._centre_y(i), self.boxes[i], i))
        rows: list[list[int]] = []
        for i in by_centre:
            if rows and self._centre_y(i) - self._centre_y(rows[-1][0]) < self.height / 2:
                rows[-1].append(i)
            else:
                rows.append([i])
        return [self.left_to_right(row) for row in rows]

    def left_to_right(self, row: list[int]) -> list[int]:
        return sorted(row, key=lambda i: (self.boxes[i][0], self.boxes[i], i))

    def _centre_y(self, i: int) -> float:
        return (self.boxes[i][1] + self.boxes[i][3]) / 2
