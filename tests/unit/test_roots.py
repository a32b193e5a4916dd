"""The compact root index under the driver's ledger and the coordinator's registry."""

import numpy as np
import pyarrow as pa
import pytest

from lineage_data._core import roots as R
from lineage_data._core.roots import RootIndex, hash_strings


def test_slots_follow_arrival_and_duplicates_share_one():
    index = RootIndex()
    assert index.add(["a", "b", "a"]).tolist() == [0, 1, 0]
    assert index.add(pa.chunked_array([["c"], ["b", "d"]])).tolist() == [2, 1, 3]
    assert index.find(["d", "x", "a"]).tolist() == [3, -1, 0]
    assert index.ids([3, 0]).to_pylist() == ["d", "a"]
    assert len(index) == 4


def test_many_batches_stay_exact_and_the_table_stays_under_half_full():
    index = RootIndex()
    names = [f"r{i:06d}" for i in range(20_000)]
    for lo in range(0, len(names), 97):
        index.add(names[lo : lo + 97])
    assert (index.find(names) == np.arange(len(names))).all()
    assert index.ids(np.arange(len(names))).to_pylist() == names
    assert index._table._used == len(names) <= len(index._table._cells) // 2
    assert len(index._names._chunks) <= 16


def test_ids_that_share_a_hash_are_never_confused(monkeypatch):
    monkeypatch.setattr(
        R, "hash_strings", lambda v: np.array([len(x) for x in v.to_pylist()], dtype=np.uint64)
    )
    index = RootIndex()
    first = index.add(["aa", "bb", "aa", "c"]).tolist()
    assert first[0] == first[2] and len({first[0], first[1], first[3]}) == 3
    second = index.add(["cc", "d", "bb"]).tolist()
    assert second[2] == first[1] and len(set(first + second)) == 5
    found = index.find(["aa", "bb", "cc", "dd", "c", "d"]).tolist()
    assert found == [first[0], first[1], second[0], -1, first[3], second[1]]
    assert index.ids(found[:3]).to_pylist() == ["aa", "bb", "cc"]


def test_hash_is_a_function_of_the_bytes_only():
    values = pa.array(["", "a", "é", "doc-1", "doc-1", "x" * 300])
    h = hash_strings(values)
    assert h[3] == h[4] and len(set(h.tolist())) == 5
    sliced = pa.array(["zz", "doc-1", ""]).slice(1)
    assert hash_strings(sliced).tolist() == [h[3], h[0]]
    assert hash_strings(pa.array(["doc-1"], pa.large_string()).cast(pa.string()))[0] == h[3]


def test_null_ids_are_refused():
    with pytest.raises(ValueError, match="null"):
        RootIndex().add(pa.array(["a", None]))


def test_add_known_says_which_ids_were_there_and_all_new_refuses_a_batch_with_one():
    index = RootIndex()
    slots, known = index.add_known(["a", "b"])
    assert slots.tolist() == [0, 1] and known.tolist() == [False, False]
    slots, known = index.add_known(["c", "a"], all_new=True)
    assert known.tolist() == [False, True] and len(index) == 2  # refused: "c" not added
    slots, known = index.add_known(["c", "a"])
    assert slots.tolist() == [2, 0] and known.tolist() == [False, True] and len(index) == 3


def test_hashes_that_crowd_one_cell_probe_on_and_stay_exact(monkeypatch):
    # every hash small: all share the home cell 0, so each insert and lookup probes a long run
    monkeypatch.setattr(
        R, "hash_strings", lambda v: np.array([int(x[1:]) for x in v.to_pylist()], np.uint64)
    )
    index = RootIndex()
    names = [f"r{i}" for i in range(3_000)]
    for lo in range(0, len(names), 250):
        assert index.add(names[lo : lo + 250]).tolist() == list(range(lo, lo + 250))
    assert (index.find(names[::-1]) == np.arange(len(names))[::-1]).all()
    assert (index.find([f"r{i}" for i in range(3_000, 3_100)]) == -1).all()


@pytest.mark.parametrize("buckets", [None, 97, 3])
def test_random_batches_match_a_dict_with_and_without_shared_hashes(monkeypatch, buckets):
    # ids repeat within and across batches; with buckets, many distinct ids share one hash
    if buckets is not None:
        monkeypatch.setattr(
            R,
            "hash_strings",
            lambda v: np.array([int(x[1:]) % buckets for x in v.to_pylist()], np.uint64),
        )
    # (slots follow arrival except among ids of one batch that share a hash: any order is exact)
    rng = np.random.default_rng(7)
    index, reference = RootIndex(), {}
    for _ in range(60):
        size = int(rng.integers(1, 400))
        batch = [f"r{int(i)}" for i in rng.integers(0, 3_000, size)]
        if rng.random() < 0.5:
            batch = list(dict.fromkeys(batch))  # distinct ids: the one-probe path
        slots, known = index.add_known(batch)
        assert known.tolist() == [n in reference for n in batch]
        for name, slot in zip(batch, slots.tolist(), strict=True):
            assert reference.setdefault(name, slot) == slot
        assert len(index) == len(reference) and sorted(set(reference.values())) == list(
            range(len(reference))
        )
    names = list(reference)
    assert index.find(names).tolist() == [reference[n] for n in names]
    slots = np.array([reference[n] for n in names])
    assert index.ids(slots).to_pylist() == names


def test_a_string_hashes_the_same_in_a_batch_of_one_length_and_in_a_mixed_batch():
    rng = np.random.default_rng(7)
    alphabet = list("abé€\x00z09")
    mixed = ["".join(rng.choice(alphabet, size=int(rng.integers(0, 40)))) for _ in range(3000)]
    hashes = hash_strings(pa.array(mixed))
    for length in sorted({len(s.encode()) for s in mixed}):
        same = [i for i, s in enumerate(mixed) if len(s.encode()) == length]
        assert (hash_strings(pa.array([mixed[i] for i in same])) == hashes[same]).all()
    assert len(set(hashes.tolist())) == len(set(mixed))


def test_names_copy_each_id_a_few_times_only_and_stay_in_slot_order(monkeypatch):
    copied = []
    concat = pa.concat_arrays
    monkeypatch.setattr(
        R.pa, "concat_arrays", lambda arrays: copied.append(arrays) or concat(arrays)
    )
    names, expected = R._Names(), []
    rng = np.random.default_rng(3)
    for _ in range(600):  # batches of 1..5000 ids
        batch = [f"r{len(expected) + i:08d}" for i in range(int(rng.integers(1, 5000)))]
        names.append(pa.array(batch))
        expected.extend(batch)
    total = sum(len(s) + 4 for s in expected)
    # every id is copied once per tier (log8 of 600 batches: 3), not again at every merge
    assert sum(a.nbytes for arrays in copied for a in arrays) <= 4 * total
    assert len(names._chunks) <= 7 * 4
    slots = rng.integers(0, len(expected), 20_000)
    assert names.take(slots).to_pylist() == [expected[i] for i in slots]


def test_a_reserved_index_places_every_id_without_growing_and_still_takes_more():
    index = RootIndex()
    index.reserve(30_000)
    cells = len(index._table._cells)
    names = [f"id{i}" for i in range(30_000)]
    slots = np.concatenate([index.add(names[lo : lo + 5_000]) for lo in range(0, 30_000, 5_000)])
    assert len(index._table._cells) == cells  # sized once: no doubling on the way
    assert slots.tolist() == list(range(30_000)) and (index.find(names) == slots).all()
    assert index.add(["a", "id7", "b"]).tolist() == [30_000, 7, 30_001]  # past the hint
    index.reserve(10)  # a smaller hint changes nothing
    assert len(index._table._cells) == cells and index.find(["b"]).tolist() == [30_001]
