"""The one user-call policy and the consumer's re-batching (pure, no Ray)."""

import pyarrow as pa
import pytest

import lineage_data as ld
from lineage_data._core.batching import rebatch
from lineage_data._core.errors import ContractError
from lineage_data._core.policy import CallPolicy


def test_call_isolates_or_raises_naming_the_stage():
    def boom(x):
        raise ValueError(f"bad {x}")

    value, status = CallPolicy("ocr").call(boom, 3, on="a row")
    assert value is None and (status.outcome.value, status.cause, status.stage) == (
        "FAILED",
        "ValueError: bad 3",
        "ocr",
    )
    assert CallPolicy("ocr").call(lambda x: x + 1, 1, on="a row") == (2, None)
    with pytest.raises(
        ld.UserCodeError, match=r"stage 'ocr' raised on a parent: ValueError: bad 1"
    ) as info:
        CallPolicy("ocr", "raise").call(boom, 1, on="a parent")
    assert isinstance(info.value.__cause__, ValueError)
    with pytest.raises(ContractError):
        CallPolicy("ocr").call(lambda: (_ for _ in ()).throw(ContractError("rows")), on="a row")


def test_batch_retries_then_halves_until_the_raising_rows_fail_alone():
    calls = []

    def run(items):
        calls.append(list(items))
        if 3 in items:
            raise RuntimeError("three")
        return [("ok", i) for i in items]

    out = CallPolicy("s", retries=1).batch(
        run,
        list(range(6)),
        size=len,
        halves=lambda xs: (xs[: len(xs) // 2], xs[len(xs) // 2 :]),
        merge=lambda a, b: a + b,
        fail=lambda xs, st: [(st.cause, i) for i in xs],
    )
    assert out == [
        ("ok", 0),
        ("ok", 1),
        ("ok", 2),
        ("RuntimeError: three", 3),
        ("ok", 4),
        ("ok", 5),
    ]
    assert calls[:2] == [list(range(6))] * 2  # one retry of the whole batch first


def tables(*sizes):
    start = 0
    for n in sizes:
        yield pa.table({"x": list(range(start, start + n))})
        start += n


@pytest.mark.parametrize("sizes", [(5, 0, 7, 1), (3,), (10, 10), ()])
@pytest.mark.parametrize("batch_size", [None, 1, 4])
@pytest.mark.parametrize("drop_last", [False, True])
def test_rebatch_keeps_every_row_in_order_in_full_batches(sizes, batch_size, drop_last):
    total = sum(sizes)
    batches = list(rebatch(tables(*sizes), batch_size=batch_size, drop_last=drop_last))
    rows = [x for b in batches for x in b["x"].to_pylist()]
    if batch_size is None:
        assert rows == list(range(total))
        return
    keep = total - total % batch_size if drop_last else total
    assert rows == list(range(keep))
    assert all(b.num_rows == batch_size for b in batches[:-1])
    if drop_last and batches:
        assert batches[-1].num_rows == batch_size


def test_rebatch_with_a_shuffle_buffer_keeps_every_row_once():
    out = [
        x
        for b in rebatch(
            tables(6, 6, 6), batch_size=4, local_shuffle_buffer_size=5, local_shuffle_seed=7
        )
        for x in b["x"].to_pylist()
    ]
    assert sorted(out) == list(range(18)) and out != list(range(18))
