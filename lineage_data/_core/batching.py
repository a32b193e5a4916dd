"""Cutting the consumer's stream into batches with Ray Data's meaning of its arguments.

The driver accounts whole blocks as they arrive (copies dropped), then this cuts them into batches.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Iterator

import pyarrow as pa


def rebatch(
    tables: Iterable[pa.Table],
    *,
    batch_size: int | None,
    drop_last: bool = False,
    local_shuffle_buffer_size: int | None = None,
    local_shuffle_seed: int | None = None,
) -> Iterator[pa.Table]:
    """Batches of ``tables``' rows, in order unless a shuffle buffer is asked for."""
    if batch_size is not None and batch_size < 1:
        raise ValueError(f"batch_size must be >= 1 or None, got {batch_size}")
    if local_shuffle_buffer_size is not None:
        yield from _shuffled(
            tables, batch_size, drop_last, local_shuffle_buffer_size, local_shuffle_seed
        )
        return
    if batch_size is None:
        yield from (t for t in tables if t.num_rows)
        return
    buffer: list[pa.Table] = []
    held = 0
    for table in tables:
        if not table.num_rows:
            continue
        buffer.append(table)
        held += table.num_rows
        if held >= batch_size:
            joined, cut = _join(buffer), held - held % batch_size
            yield from (joined.slice(start, batch_size) for start in range(0, cut, batch_size))
            rest = joined.slice(cut)
            buffer, held = ([rest], rest.num_rows) if rest.num_rows else ([], 0)
    if held and not drop_last:
        yield _join(buffer)


def _shuffled(
    tables: Iterable[pa.Table],
    batch_size: int | None,
    drop_last: bool,
    buffer_size: int,
    seed: int | None,
) -> Iterator[pa.Table]:
    if buffer_size < 1:
        raise ValueError(f"local_shuffle_buffer_size must be >= 1, got {buffer_size}")
    rng = random.Random(seed)
    size = batch_size or buffer_size
    pool: pa.Table | None = None
    for table in tables:
        if not table.num_rows:
            continue
        pool = table if pool is None else _join([pool, table])
        while pool.num_rows >= buffer_size + size:
            batch, pool = _draw(pool, size, rng)
            yield batch
    while pool is not None and pool.num_rows:
        if pool.num_rows < size and drop_last:
            return
        batch, pool = _draw(pool, min(size, pool.num_rows), rng)
        yield batch


def _draw(pool: pa.Table, n: int, rng: random.Random) -> tuple[pa.Table, pa.Table]:
    """``n`` rows of ``pool`` at random, and the rest."""
    chosen = set(rng.sample(range(pool.num_rows), n))
    picked = sorted(chosen)
    rng.shuffle(picked)
    rest = [i for i in range(pool.num_rows) if i not in chosen]
    return pool.take(pa.array(picked, pa.int64())), pool.take(pa.array(rest, pa.int64()))


def _join(tables: list[pa.Table]) -> pa.Table:
    """Concatenate batches whose columns may differ (missing ones become nulls)."""
    return tables[0] if len(tables) == 1 else pa.concat_tables(tables, promote_options="permissive")
