"""A compact, append-only index of root ids: each distinct id gets a slot, 0, 1, 2... as it arrives.

The driver accounts for every source root of a run, and a run may have 100M of them: a Python ``set`` of
``str`` costs about 100 bytes a root. Here an id costs its UTF-8 bytes + 4 (an Arrow string column in
slot order) + 12 (its 64-bit hash and slot, in sorted numpy runs). Lookups and inserts take whole Arrow
arrays, so accounting a batch does no Python work per row. A hash only finds a candidate: the
candidate's id is compared with the query, so two ids with the same hash are never confused (the later
one lives in a small dict).

Example:
    >>> import pyarrow as pa
    >>> index = RootIndex()
    >>> index.add(pa.array(["a", "b", "a"])).tolist()
    [0, 1, 0]
    >>> index.find(pa.array(["b", "c"])).tolist()
    [1, -1]
    >>> index.ids([1, 0]).to_pylist()
    ['b', 'a']
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

# Hash rows this many at a time: the bytes are widened to 8 bytes each while hashed.
_HASH_CHUNK = 1 << 16
# A names chunk is never grown past this (Arrow ``string`` offsets are 32-bit).
_MAX_CHUNK_BYTES = 1 << 30

_P = np.uint64(0x100000001B3)  # FNV-1a 64-bit prime: odd, so invertible modulo 2**64
_K = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_powers = np.ones(1, dtype=np.uint64)  # _P ** k modulo 2**64, grown on demand


def as_strings(values: pa.Array | pa.ChunkedArray | Sequence[str]) -> pa.StringArray:
    """``values`` as one contiguous Arrow ``string`` array (no nulls)."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks() if values.num_chunks != 1 else values.chunk(0)
    elif not isinstance(values, pa.Array):
        values = pa.array(list(values), pa.string())
    if values.type != pa.string():
        values = values.cast(pa.string())
    if values.null_count:
        raise ValueError("root ids must not be null")
    return values


def hash_strings(values: pa.StringArray) -> np.ndarray:
    """A 64-bit hash of every string (a polynomial over its bytes, then a bit mixer); numpy only.

    Equal strings hash equal within and across processes; distinct strings rarely do (callers compare
    the strings themselves on a match).
    """
    out = np.empty(len(values), dtype=np.uint64)
    for lo in range(0, len(values), _HASH_CHUNK):
        part = values.slice(lo, _HASH_CHUNK)
        out[lo : lo + len(part)] = _hash_chunk(part)
    return out


def _hash_chunk(values: pa.StringArray) -> np.ndarray:
    global _powers
    n = len(values)
    offsets = np.frombuffer(values.buffers()[1], dtype=np.int32)[
        values.offset : values.offset + n + 1
    ]
    offsets = offsets.astype(np.int64)
    lengths = np.diff(offsets)
    data = values.buffers()[2]
    first = int(offsets[0])
    total = int(offsets[-1]) - first
    if total == 0 or data is None:
        sums = np.zeros(n, dtype=np.uint64)
    else:
        chars = np.frombuffer(data, dtype=np.uint8)[first : first + total].astype(np.uint64)
        starts = offsets[:-1] - first
        position = np.arange(total, dtype=np.int64) - np.repeat(starts, lengths)
        longest = int(lengths.max())
        if len(_powers) <= longest:
            grown = np.full(max(longest + 1, 2 * len(_powers)), _P, dtype=np.uint64)
            grown[0] = 1
            _powers = np.cumprod(grown, dtype=np.uint64)  # wraps modulo 2**64, as wanted
        running = np.zeros(total + 1, dtype=np.uint64)
        np.cumsum(chars * _powers[position], dtype=np.uint64, out=running[1:])
        sums = running[starts + lengths] - running[starts]
    h = sums ^ (lengths.astype(np.uint64) * _K)
    h ^= h >> np.uint64(30)
    h *= _M1
    h ^= h >> np.uint64(27)
    h *= _M2
    h ^= h >> np.uint64(31)
    return h


class _Names:
    """An append-only Arrow string column in slot order, kept in a few geometrically sized chunks."""

    def __init__(self) -> None:
        self._chunks: list[pa.StringArray] = []
        self._starts: list[int] = []
        self.size = 0

    def append(self, ids: pa.StringArray) -> None:
        if not len(ids):
            return
        self._chunks.append(ids)
        self._starts.append(self.size)
        self.size += len(ids)
        # merge the last two chunks while they are of a similar size: few chunks, amortized O(1) copies
        while (
            len(self._chunks) > 1
            and len(self._chunks[-2]) < 2 * len(self._chunks[-1])
            and self._chunks[-2].nbytes + self._chunks[-1].nbytes < _MAX_CHUNK_BYTES
        ):
            last = self._chunks.pop()
            self._starts.pop()
            self._chunks[-1] = pa.concat_arrays([self._chunks[-1], last])

    def take(self, slots: np.ndarray) -> pa.StringArray:
        if len(self._chunks) == 1 or not len(slots):
            only = self._chunks[0] if self._chunks else pa.array([], pa.string())
            return only.take(pa.array(slots, pa.int64()))
        chunk = np.searchsorted(np.asarray(self._starts), slots, side="right") - 1
        order = np.argsort(chunk, kind="stable")
        pieces = []
        sorted_chunk, sorted_slots = chunk[order], slots[order]
        bounds = np.flatnonzero(np.diff(sorted_chunk)) + 1
        for part_chunks, part_slots in zip(
            np.split(sorted_chunk, bounds), np.split(sorted_slots, bounds), strict=True
        ):
            c = int(part_chunks[0])
            pieces.append(self._chunks[c].take(pa.array(part_slots - self._starts[c], pa.int64())))
        combined = pa.concat_arrays(pieces)
        inverse = np.empty_like(order)
        inverse[order] = np.arange(len(order))
        return combined.take(pa.array(inverse, pa.int64()))

    @property
    def nbytes(self) -> int:
        return sum(c.nbytes for c in self._chunks)


class RootIndex:
    """Distinct root ids with a slot each; see the module docstring."""

    def __init__(self) -> None:
        self._names = _Names()
        # sorted runs of (hash, slot); every hash is in at most one run, once
        self._runs: list[_Run] = []
        self._others: dict[str, int] = {}  # ids whose hash an earlier id holds

    def __len__(self) -> int:
        return self._names.size

    def find(self, ids: pa.Array | pa.ChunkedArray | Sequence[str]) -> np.ndarray:
        """The slot of every id (``-1`` for an id not in the index)."""
        strings = as_strings(ids)
        slots, _ = self._find(strings, hash_strings(strings))
        return slots

    def add(self, ids: pa.Array | pa.ChunkedArray | Sequence[str]) -> np.ndarray:
        """The slot of every id; ids not in the index yet take the next slots."""
        return self.add_known(ids)[0]

    def add_known(
        self, ids: pa.Array | pa.ChunkedArray | Sequence[str], *, all_new: bool = False
    ) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`add`, and which ids were in the index before (one lookup for both).

        With ``all_new``, nothing is added when any id was known (the caller refuses the batch).
        """
        strings = as_strings(ids)
        hashes = hash_strings(strings)
        slots, taken = self._find(strings, hashes)
        known = slots >= 0
        new = np.flatnonzero(~known)
        if not len(new) or (all_new and len(new) < len(known)):
            return slots, known
        order = np.argsort(hashes[new], kind="stable")
        ranked = hashes[new][order]
        if taken[new].any() or (ranked[1:] == ranked[:-1]).any():
            return self._add_repeated(strings, hashes, slots, taken, new), known
        base = len(self)
        slots[new] = base + np.arange(len(new))
        self._names.append(strings.take(pa.array(new)))  # a copy: never pin the caller's batch
        self._insert(_Run(ranked, base + order, ranked=True))
        return slots, known

    def _add_repeated(
        self,
        strings: pa.StringArray,
        hashes: np.ndarray,
        slots: np.ndarray,
        taken: np.ndarray,
        new: np.ndarray,
    ) -> np.ndarray:
        """:meth:`add` when a new id repeats in the batch, or shares its hash with another id."""
        uniq, first, inverse = np.unique(hashes[new], return_index=True, return_inverse=True)
        leaders = new[first]  # first row of each distinct new hash
        same = pc.equal(strings.take(pa.array(new)), strings.take(pa.array(leaders[inverse])))
        clash = new[~np.asarray(same.to_numpy(zero_copy_only=False), dtype=bool)]
        order = np.argsort(leaders, kind="stable")  # slots in order of first appearance
        base = len(self)
        leader_slot = np.empty(len(leaders), dtype=np.int64)
        leader_slot[order] = base + np.arange(len(leaders))
        self._names.append(strings.take(pa.array(leaders[order])))
        slots[new] = leader_slot[inverse]
        held = taken[leaders]  # the hash is another id's already: the new id goes to the dict
        for row, slot in zip(leaders[held], leader_slot[held], strict=True):
            self._others[strings[int(row)].as_py()] = int(slot)
        if (~held).any():
            self._insert(_Run(uniq[~held], leader_slot[~held]))
        for row in clash:  # distinct new ids with one hash in this batch: one by one
            name = strings[int(row)].as_py()
            slot = self._others.get(name)
            if slot is None:
                slot = self._others[name] = len(self)
                self._names.append(pa.array([name], pa.string()))
            slots[row] = slot
        return slots

    def ids(self, slots: np.ndarray | Sequence[int]) -> pa.StringArray:
        """The ids of ``slots``, in that order."""
        return self._names.take(np.asarray(slots, dtype=np.int64))

    @property
    def nbytes(self) -> int:
        """Bytes held: the id column, the hash runs and the dict of clashing ids (estimated)."""
        runs = sum(r.nbytes for r in self._runs)
        return self._names.nbytes + runs + 120 * len(self._others)

    # -- internals ------------------------------------------------------------------------------
    def _find(self, strings: pa.StringArray, hashes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Slots (``-1`` when absent) and whether each hash is held by some id (this one or another)."""
        slots = np.full(len(hashes), -1, dtype=np.int64)
        for run in self._runs:
            run.find(hashes, slots)
        taken = slots >= 0
        hits = np.flatnonzero(taken)
        if len(hits):
            queried = strings if len(hits) == len(strings) else strings.take(pa.array(hits))
            same = pc.equal(self.ids(slots[hits]), queried)
            wrong = hits[~np.asarray(same.to_numpy(zero_copy_only=False), dtype=bool)]
            for row in wrong:  # the hash belongs to another id
                slots[row] = self._others.get(strings[int(row)].as_py(), -1)
        return slots, taken

    def _insert(self, run: _Run) -> None:
        # merge the last two runs while they are of a similar size (a stable sort of two sorted runs
        # is a merge): few runs to search, each hash moved O(log n) times
        self._runs.append(run)
        while len(self._runs) > 1 and len(self._runs[-2]) < 2 * len(self._runs[-1]):
            last, before = self._runs.pop(), self._runs.pop()
            self._runs.append(
                _Run(
                    np.concatenate([before.keys, last.keys]),
                    np.concatenate([before.slots, last.slots]),
                )
            )


class _Run:
    """Sorted hashes with their slots, and a directory of where each top-bits bucket starts.

    Hashes are uniform, so a bucket holds about two: a lookup reads the directory, then bisects a
    handful of keys, all vectorized (a plain ``searchsorted`` over millions of keys is ~5x slower:
    each of its ~20 probes is a cache miss).
    """

    def __init__(self, hashes: np.ndarray, slots: np.ndarray, *, ranked: bool = False) -> None:
        if ranked:  # already sorted by hash
            self.keys, self.slots = hashes, slots.astype(np.int32)
        else:
            order = np.argsort(hashes, kind="stable")
            self.keys, self.slots = hashes[order], slots[order].astype(np.int32)
        n = len(self.keys)
        self._bits = min(30, max(0, n.bit_length() - 2))
        if self._bits:
            buckets = (self.keys >> np.uint64(64 - self._bits)).astype(np.int64)
            counts = np.bincount(buckets, minlength=1 << self._bits)
            self._dir = np.zeros((1 << self._bits) + 1, dtype=np.int32)
            np.cumsum(counts, out=self._dir[1:])
            self._rounds = int(counts.max()).bit_length()

    def __len__(self) -> int:
        return len(self.keys)

    @property
    def nbytes(self) -> int:
        return self.keys.nbytes + self.slots.nbytes + (self._dir.nbytes if self._bits else 0)

    def find(self, hashes: np.ndarray, out: np.ndarray) -> None:
        """Set ``out[i]`` to the slot of ``hashes[i]`` where this run holds it."""
        n = len(self.keys)
        if not self._bits:
            pos = np.searchsorted(self.keys, hashes)
        else:
            bucket = (hashes >> np.uint64(64 - self._bits)).astype(np.int64)
            lo = self._dir[bucket].astype(np.int64)
            hi = self._dir[bucket + 1].astype(np.int64)
            for _ in range(self._rounds):  # bisect [lo, hi) for the first key >= hash
                mid = (lo + hi) >> 1
                right = (lo < hi) & (self.keys[np.minimum(mid, n - 1)] < hashes)
                lo = np.where(right, mid + 1, lo)
                hi = np.where(right | (lo >= hi), hi, mid)
            pos = lo
        pos = np.minimum(pos, n - 1)
        hit = self.keys[pos] == hashes
        out[hit] = self.slots[pos[hit]]
