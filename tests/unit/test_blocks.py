"""Block sizing after an expansion: from the work that reads the blocks, by rows and by bytes."""

import pyarrow as pa
import pytest

import lineage_data as ld
from lineage_data._core import columns as C
from lineage_data._core.blocks import DEFAULT_ROWS_PER_BLOCK, WIDE_ROWS_PER_BLOCK, row_bytes
from lineage_data._core.expand import ExpandOp
from lineage_data._core.physical.batches import cuts_source_blocks
from lineage_data._core.physical.block_rows import rows_per_block
from lineage_data._core.source import with_lineage
from lineage_data._core.state import LineageState


def pages(row):
    return ({"page": i} for i in range(row["n"]))


def docs(*counts):
    return ld.from_items([{"d": str(i), "n": n} for i, n in enumerate(counts)], id_column="d")


class Model:
    def __call__(self, batch):
        return batch


def keep(row):
    return row


@pytest.mark.parametrize(
    ("build", "expected"),
    [
        (
            lambda ds: ds.expand_lineage(pages).map_batches(Model, batch_size=32).reduce_lineage(),
            32,
        ),
        (lambda ds: ds.expand_lineage(pages).filter(bool).map_batches(Model, batch_size=64), 64),
        (lambda ds: ds.expand_lineage(pages).map_batches(len, batch_size=32, num_gpus=1), 32),
        (
            lambda ds: ds.expand_lineage(pages).map_batches(len, batch_size=32, resources={"g": 1}),
            32,
        ),
        # a CPU function runs as tasks: a block holds several of its batches (fewer tasks)
        (lambda ds: ds.expand_lineage(pages).map_batches(len, batch_size=32), 1024),
        (lambda ds: ds.expand_lineage(pages).map_batches(len, batch_size=300), 900),
        (lambda ds: ds.expand_lineage(pages).map_batches(len, batch_size=4096), 4096),
        (lambda ds: ds.expand_lineage(pages).reduce_lineage(), WIDE_ROWS_PER_BLOCK),
        (lambda ds: ds.expand_lineage(pages), WIDE_ROWS_PER_BLOCK),
        (
            lambda ds: ds.expand_lineage(pages).map_batches(len).reduce_lineage(),
            DEFAULT_ROWS_PER_BLOCK,
        ),
        (lambda ds: ds.expand_lineage(pages).map(dict), DEFAULT_ROWS_PER_BLOCK),
        (lambda ds: ds.expand_lineage(pages).expand_lineage(pages), DEFAULT_ROWS_PER_BLOCK),
    ],
)
def test_rows_per_block_follows_the_next_batched_stage(build, expected):
    assert rows_per_block(build(docs(1)).plan, 0) == expected


@pytest.mark.parametrize(
    ("build", "index", "block_rows", "expected"),
    [
        (lambda ds: ds.map_batches(len, batch_size=32), 0, 32, True),
        (lambda ds: ds.map(keep).filter(keep).map_batches(len, batch_size=32), 2, 100, True),
        # blocks smaller than a batch, or of unknown size: Ray Data's bundling makes the batches
        (lambda ds: ds.map_batches(len, batch_size=32), 0, 31, False),
        (lambda ds: ds.map_batches(len, batch_size=32), 0, 0, False),
        (lambda ds: ds.map_batches(len), 0, 100, False),
        # an actor, an accelerator, custom resources: each batch is its own work item
        (lambda ds: ds.map_batches(Model, batch_size=32), 0, 100, False),
        (lambda ds: ds.map_batches(len, batch_size=32, num_gpus=1), 0, 100, False),
        (lambda ds: ds.map_batches(len, batch_size=32, resources={"g": 1}), 0, 100, False),
        # blocks an actor pool made, or children: not the source's blocks
        (
            lambda ds: ds.map_batches(Model, batch_size=8).map_batches(len, batch_size=4),
            1,
            100,
            False,
        ),
        (lambda ds: ds.expand_lineage(pages).map_batches(len, batch_size=4), 1, 100, False),
        (lambda ds: ds.map(keep), 0, 100, False),
        (lambda ds: ds.map(dict).map_batches(len, batch_size=32), 1, 100, False),
    ],
)
def test_a_source_level_function_takes_whole_source_blocks_only_where_batches_stay_the_same(
    build, index, block_rows, expected
):
    assert cuts_source_blocks(build(docs(1)).plan, index, block_rows) is expected


def test_nested_expansions_size_their_own_blocks():
    plan = (
        docs(1)
        .expand_lineage(pages)
        .expand_lineage(pages, name="lines")
        .map_batches(Model, batch_size=8)
        .reduce_lineage()
        .reduce_lineage(name="docs")
        .plan
    )
    assert [rows_per_block(plan, 0), rows_per_block(plan, 1)] == [DEFAULT_ROWS_PER_BLOCK, 8]


def expand(plan, table, **options):
    op = ExpandOp(plan.stages[0], LineageState(), **options)
    return list(op(table))


def source(counts, **columns):
    rows = [{"d": str(i), "n": n, **columns} for i, n in enumerate(counts)]
    return with_lineage(pa.Table.from_pylist(rows), [r["d"] for r in rows])


def children_of(blocks):
    table = C.concat(blocks)
    return table.filter(pa.compute.is_null(table[C.SIZE]))


def test_a_large_parent_spreads_over_many_blocks_and_small_parents_share_them():
    plan = docs(1).expand_lineage(pages).map_batches(len, batch_size=32).plan
    big = expand(plan, source([427]), rows_per_block=32)
    assert sum(1 for b in big if b.num_rows == 32) == 427 // 32  # full blocks of one batch each
    small = expand(plan, source([5] * 100), rows_per_block=32)
    assert children_of(small).num_rows == 500
    assert len(small) == -(-600 // 32)  # 100 parents (5 children + a header each) share 19 blocks


def groups_per_block(blocks):
    """For each parent, the blocks its children and header are in."""
    where = {}
    for i, block in enumerate(blocks):
        for root in set(block[C.ROOT].to_pylist()):
            where.setdefault(root, set()).add(i)
    return where


@pytest.mark.parametrize("seed", range(3))
def test_blocks_are_exactly_one_batch_and_keep_small_groups_whole(seed):
    import random

    counts = [random.Random(seed).randint(1, 10) for _ in range(300)]
    plan = docs(1).expand_lineage(pages).map_batches(len, batch_size=64).plan
    blocks = expand(plan, source(counts), rows_per_block=64)
    assert [b.num_rows for b in blocks[:-1]] == [64] * (len(blocks) - 1)  # Ray cuts on our edges
    assert children_of(blocks).num_rows == sum(counts)
    split = [root for root, found in groups_per_block(blocks).items() if len(found) > 1]
    assert len(split) <= 1  # at most one group split, at the end of the batch


def test_big_rows_cut_a_block_by_bytes_before_it_has_its_rows():
    def scans(row):
        return ({"png": b"x" * 1_000_000} for _ in range(row["n"]))

    plan = docs(1).expand_lineage(scans).map_batches(len, batch_size=32).plan
    blocks = expand(plan, source([20]), rows_per_block=32, target_bytes=4_000_000)
    sizes = [children_of([b]).num_rows for b in blocks]
    assert sum(sizes) == 20
    assert max(sizes) <= 4 and len([s for s in sizes if s]) >= 5


def test_row_bytes_counts_strings_and_bytes_by_length():
    assert (
        row_bytes({"a": "xyz", "b": b"12", "c": 1.5, "d": None, "e": [1, 2]}) == 3 + 2 + 8 + 8 + 16
    )
