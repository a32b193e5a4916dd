"""lineage_data.connectors.layout: XY-cut reading order on synthetic line boxes (no model)."""

import random

import pytest

from lineage_data.connectors.layout import quad_to_box, reading_order, text_rows

H, PITCH = 12, 18  # line height and baseline-to-baseline distance, in pixels


def column(x0, x1, top, lines):
    return [(x0, top + k * PITCH, x1, top + k * PITCH + H) for k in range(lines)]


def ordered(expected, *, seed=0, jitter=0.0):
    """The boxes of ``expected`` (already in reading order), shuffled; and the order to expect."""
    rng = random.Random(seed)
    boxes = [
        tuple(v + rng.uniform(-jitter, jitter) for v in box) if jitter else box for box in expected
    ]
    perm = list(range(len(boxes)))
    rng.shuffle(perm)
    shuffled = [boxes[p] for p in perm]
    # shuffled[j] is expected[perm[j]]: expected position k lives at index perm.index(k)
    return shuffled, [perm.index(k) for k in range(len(boxes))]


def two_columns(top=60, lines=8):
    return column(20, 290, top, lines) + column(330, 600, top, lines)


TITLE = [(120, 10, 500, 34)]
FOOTER = [(280, 260, 340, 272)]


@pytest.mark.parametrize(
    "expected",
    [
        column(20, 600, 20, 10),
        two_columns(),
        TITLE + two_columns(),
        two_columns() + FOOTER,
        TITLE + two_columns() + FOOTER,
        # a second column shorter than the first, with a title: still column by column
        TITLE + column(20, 290, 60, 9) + column(330, 600, 60, 4),
        # two pages side by side, each with a header, paragraph gaps that line up, and a footer:
        # the gutter is wider than every one of those gaps
        [(20, 10, 200, 22)]
        + column(20, 290, 60, 4)
        + column(20, 290, 150, 4)
        + [(150, 260, 170, 272)]
        + [(360, 10, 520, 22)]
        + column(360, 630, 60, 4)
        + column(360, 630, 150, 4)
        + [(490, 260, 510, 272)],
        # a one-column page whose second line the detector split in two
        [(20, 20, 600, 32), (20, 38, 300, 50), (340, 38, 600, 50), (20, 56, 600, 68)],
    ],
    ids=[
        "one-column",
        "two-columns",
        "title",
        "footer",
        "title-and-footer",
        "short-column",
        "two-pages",
        "split-row",
    ],
)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_reading_order_of_synthetic_layouts(expected, seed):
    boxes, order = ordered(expected, seed=seed)
    assert reading_order(boxes) == order


@pytest.mark.parametrize("seed", range(5))
def test_order_survives_jitter_and_overlap_and_does_not_depend_on_input_order(seed):
    expected = TITLE + two_columns() + FOOTER
    boxes, order = ordered(expected, seed=seed, jitter=2.5)  # neighbours may overlap a few px
    assert reading_order(boxes) == order
    rng = random.Random(seed)
    perm = list(range(len(boxes)))
    rng.shuffle(perm)
    again = reading_order([boxes[p] for p in perm])
    assert [perm[i] for i in again] == order


def table(x0, x1, x2, x3, top, rows):
    """Rows of a two-column table (an option list, a code block): label, then its description."""
    return [
        box
        for k in range(rows)
        for box in (
            (x0, top + k * PITCH, x1, top + k * PITCH + H),
            (x2, top + k * PITCH, x3, top + k * PITCH + H),
        )
    ]


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("label", [(40, 140), (40, 60)], ids=["option-list", "code-labels"])
def test_a_table_of_narrow_labels_is_read_row_by_row_not_as_columns(label, seed):
    # "-b, --benchmark   perform a benchmark": the labels stand beside their descriptions over
    # many lines with whitespace between, but a piece a few words wide is no text column.
    x0, x1 = label
    rows = table(x0, x1, x1 + 8, 420, 60, 5)
    page = column(20, 600, 20, 2) + rows + column(20, 600, 60 + 5 * PITCH, 2)
    boxes, order = ordered(page, seed=seed)
    assert reading_order(boxes) == order
    # in the left column of two, beside a right column of text
    left = column(20, 290, 20, 2) + table(x0, x1, x1 + 8, 290, 60, 5)
    boxes, order = ordered(left + column(330, 600, 20, 7), seed=seed)
    assert reading_order(boxes) == order


def test_empty_and_single():
    assert reading_order([]) == []
    assert text_rows([]) == []
    assert reading_order([(5, 5, 50, 20)]) == [0]
    assert text_rows([(5, 5, 50, 20)]) == [[0]]


def test_a_split_row_is_one_row_but_two_columns_at_one_height_are_two():
    split = [(20, 38, 300, 50), (20, 20, 600, 32), (340, 37, 600, 49)]
    assert text_rows(split) == [[1], [0, 2]]
    assert text_rows(two_columns(lines=2)) == [[0], [1], [2], [3]]


def test_lines_that_no_cut_separates_fall_back_to_rows_top_to_bottom_left_to_right():
    # skewed lines: each box overlaps the next vertically, and the rows do not fit one line height
    skewed = [(100, k * 10, 400, k * 10 + 16) for k in range(4)] + [(0, 31, 150, 45)]
    assert reading_order(skewed) == [0, 1, 2, 4, 3]


def test_quad_to_box():
    assert quad_to_box([3, 4, 10, 2, 11, 9, 2, 10]) == (2.0, 2.0, 11.0, 10.0)
