"""A compact, append-only index of root ids: each distinct id gets a slot, 0, 1, 2... as it arrives.

A run may have 100M roots, and a Python ``set`` of ``str`` costs ~100 bytes a root. Here an id costs
its UTF-8 bytes + 4 (an Arrow string column in slot order) + 8 (its 64-bit hash) + 8 to 16 (its cell
in an open-addressing table), and lookups take whole Arrow arrays (no Python work per row). A hash
only finds a candidate whose id is then compared, so ids with one hash are never confused (the
later one lives in a small dict).
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
_MERGE = 8  # names chunks merged at once (see _Names)
_SEALED = -1  # the tier of names chunks too big to merge

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
    """A 64-bit hash of every string, equal across batches and processes; numpy only.

    The bytes, zero-padded to 8-byte little-endian words ``w_j``: ``sum(w_j * P**j) mod 2**64``,
    mixed with the length through a bit mixer.
    """
    out = np.empty(len(values), dtype=np.uint64)
    for lo in range(0, len(values), _HASH_CHUNK):
        part = values.slice(lo, _HASH_CHUNK)
        out[lo : lo + len(part)] = _hash_chunk(part)
    return out


def _hash_chunk(values: pa.StringArray) -> np.ndarray:
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
        chars = np.frombuffer(data, dtype=np.uint8)[first : first + total]
        longest = int(lengths.max())
        width = -(-longest // 8)  # words in the longest string
        powers = _powers_up_to(width)
        if int(lengths.min()) == longest:  # one length (the usual ids): a matrix, a few numpy calls
            padded = np.zeros((n, width * 8), dtype=np.uint8)
            padded[:, :longest] = chars.reshape(n, longest)
            matrix = padded.view("<u8")
            sums = matrix[:, 0].copy()  # (P ** 0 = 1)
            for j in range(1, width):
                sums += matrix[:, j] * powers[j]
        else:
            counts = (lengths + 7) // 8  # words per string
            word_starts = np.cumsum(counts) - counts
            buffer = np.zeros(int(counts.sum()) * 8, dtype=np.uint8)
            shift = np.repeat(word_starts * 8 - (offsets[:-1] - first), lengths)
            buffer[np.arange(total, dtype=np.int64) + shift] = chars
            words = buffer.view("<u8")
            position = np.arange(len(words), dtype=np.int64) - np.repeat(word_starts, counts)
            running = np.zeros(len(words) + 1, dtype=np.uint64)
            np.cumsum(words * powers[position], dtype=np.uint64, out=running[1:])
            sums = running[word_starts + counts] - running[word_starts]
    h = sums ^ (lengths.astype(np.uint64) * _K)
    h ^= h >> np.uint64(30)
    h *= _M1
    h ^= h >> np.uint64(27)
    h *= _M2
    h ^= h >> np.uint64(31)
    return h


def _powers_up_to(n: int) -> np.ndarray:
    """``_P ** k`` modulo 2**64 for k in 0..n (at least), grown on demand."""
    global _powers
    if len(_powers) <= n:
        grown = np.full(max(n + 1, 2 * len(_powers)), _P, dtype=np.uint64)
        grown[0] = 1
        _powers = np.cumprod(grown, dtype=np.uint64)  # wraps modulo 2**64, as wanted
    return _powers


class Column:
    """A growable numpy column indexed by root slot (grown by a quarter, so little is left unused)."""

    def __init__(self, dtype: type) -> None:
        self.data: np.ndarray = np.zeros(0, dtype=dtype)

    def ensure(self, size: int) -> None:
        if size > len(self.data):
            grown = np.zeros(
                max(size, len(self.data) + len(self.data) // 4 + 1024), self.data.dtype
            )
            grown[: len(self.data)] = self.data
            self.data = grown


class _Names:
    """An append-only Arrow string column in slot order, kept in a few chunks (tiers of a base-8 count).

    A batch appended is a chunk of tier 0; the last :data:`_MERGE` chunks of one tier become one of
    the next. Each id is copied once per tier (2-3 times for 1M ids in 5,000-id batches, where
    merging into the newest big chunk copied 12x, measured).
    """

    def __init__(self) -> None:
        self._chunks: list[pa.StringArray] = []
        self._starts: list[int] = []
        self._tiers: list[int] = []
        self.size = 0

    def append(self, ids: pa.StringArray) -> None:
        if not len(ids):
            return
        self._chunks.append(ids)
        self._starts.append(self.size)
        self._tiers.append(0)
        self.size += len(ids)
        while len(self._tiers) >= _MERGE and len(set(self._tiers[-_MERGE:])) == 1:
            last = self._chunks[-_MERGE:]
            if sum(c.nbytes for c in last) >= _MAX_CHUNK_BYTES:
                self._tiers[-_MERGE:] = [_SEALED] * _MERGE  # never merged (32-bit offsets)
                break
            tier = self._tiers[-1] + 1
            del self._chunks[-_MERGE:], self._tiers[-_MERGE:], self._starts[-_MERGE + 1 :]
            self._chunks.append(pa.concat_arrays(last))
            self._tiers.append(tier)

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
        self._table = _HashTable()  # hash -> slot of the first id with that hash
        self._others: dict[str, int] = {}  # ids whose hash an earlier id holds

    def __len__(self) -> int:
        return self._names.size

    def reserve(self, ids: int) -> None:
        """Size the hash table for ``ids`` ids in all (a hint: more still fit, fewer waste cells)."""
        self._table.reserve(ids)

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
        """:meth:`add`, and which ids were known before; with ``all_new``, nothing added if any was."""
        strings = as_strings(ids)
        hashes = hash_strings(strings)
        if not all_new and len(hashes) > 1 and _distinct(hashes):
            fused = self._add_distinct(strings, hashes)
            if fused is not None:
                return fused
        slots, taken = self._find(strings, hashes)
        known = slots >= 0
        new = np.flatnonzero(~known)
        if not len(new) or (all_new and len(new) < len(known)):
            return slots, known
        fresh = hashes[new]
        if taken[new].any() or not _distinct(fresh):
            return self._add_repeated(strings, hashes, slots, taken, new), known
        base = len(self)
        slots[new] = base + np.arange(len(new))
        self._append_names(strings, new)
        self._table.record(fresh, base)
        self._table.place(fresh, slots[new])
        return slots, known

    def _add_distinct(
        self, strings: pa.StringArray, hashes: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray] | None:
        """:meth:`add_known` for distinct hashes in one probe per id: found, or placed where it ends.

        None (nothing changed) when an id's hash is held by another id: the general path handles it.
        """
        found, claimed = self._table.claim(hashes)
        hits = np.flatnonzero(found >= 0)
        if len(hits) and not self._same(strings, hits, found[hits]).all():
            self._table.release(claimed)
            return None
        new = np.flatnonzero(claimed >= 0)
        base = len(self)
        found[new] = base + np.arange(len(new))
        if len(new):
            self._append_names(strings, new)
            self._table.settle(hashes[new], claimed[new], base)
        return found, np.asarray(found < base)

    def _append_names(self, strings: pa.StringArray, rows: np.ndarray) -> None:
        """The ids at ``rows`` take the next slots' names: a copy, never the caller's batch pinned."""
        picked = strings.take(pa.array(rows)) if len(rows) < len(strings) else strings
        self._names.append(pa.concat_arrays([picked]))  # copies (10x faster than take of all rows)

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
        clash = new[~_bools(same)]
        order = np.argsort(leaders, kind="stable")  # slots in order of first appearance
        base = len(self)
        leader_slot = np.empty(len(leaders), dtype=np.int64)
        leader_slot[order] = base + np.arange(len(leaders))
        self._names.append(strings.take(pa.array(leaders[order])))
        slots[new] = leader_slot[inverse]
        # every slot keeps its hash; only a hash no id held before goes into the table
        self._table.record(hashes[leaders[order]], base)
        held = taken[leaders]  # the hash is another id's already: the new id goes to the dict
        for row, slot in zip(leaders[held], leader_slot[held], strict=True):
            self._others[strings[int(row)].as_py()] = int(slot)
        if (~held).any():
            self._table.place(uniq[~held], leader_slot[~held])
        for row in clash:  # distinct new ids with one hash in this batch: one by one
            name = strings[int(row)].as_py()
            slot = self._others.get(name)
            if slot is None:
                slot = self._others[name] = len(self)
                self._names.append(pa.array([name], pa.string()))
                self._table.record(hashes[[int(row)]], slot)
            slots[row] = slot
        return slots

    def ids(self, slots: np.ndarray | Sequence[int]) -> pa.StringArray:
        """The ids of ``slots``, in that order."""
        return self._names.take(np.asarray(slots, dtype=np.int64))

    @property
    def nbytes(self) -> int:
        """Bytes held: the id column, the hash table and the dict of clashing ids (estimated)."""
        return self._names.nbytes + self._table.nbytes + 120 * len(self._others)

    # -- internals ------------------------------------------------------------------------------
    def _find(self, strings: pa.StringArray, hashes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Slots (``-1`` when absent) and whether each hash is held by some id (this one or another)."""
        slots = self._table.find(hashes)
        taken = slots >= 0
        hits = np.flatnonzero(taken)
        if len(hits):
            wrong = hits[~self._same(strings, hits, slots[hits])]
            for row in wrong:  # the hash belongs to another id
                slots[row] = self._others.get(strings[int(row)].as_py(), -1)
        return slots, taken

    def _same(self, strings: pa.StringArray, rows: np.ndarray, slots: np.ndarray) -> np.ndarray:
        """Whether the id at each of ``rows`` is the one in the matching slot."""
        queried = strings if len(rows) == len(strings) else strings.take(pa.array(rows))
        return _bools(pc.equal(self.ids(slots), queried))


def _bools(values: pa.BooleanArray) -> np.ndarray:
    return np.asarray(values.to_numpy(zero_copy_only=False), dtype=bool)


def _distinct(hashes: np.ndarray) -> bool:
    """True when no hash repeats (one sort; a batch of fresh ids almost always passes)."""
    ranked = np.sort(hashes)
    return not (ranked[1:] == ranked[:-1]).any()


_FEW = 64  # rows still probing after this few: one by one (a numpy round costs more than they do)


class _HashTable:
    """Open addressing (linear probing) from a 64-bit hash to a slot, all vectorized.

    ``_cells[i]`` holds a slot (``-1``: empty), whose hash is in ``_hashes`` (in slot order). A hash's
    home cell is its top bits. The table doubles before it is half full (a lookup reads ~1.5 cells)
    and a batch probes all its rows at once, one round per cell. About 16-24 bytes a slot.
    """

    _MAX_LOAD = 0.5

    def __init__(self) -> None:
        self._hashes = Column(np.uint64)  # per slot; never empty, so a probe can read slot 0's
        self._hashes.ensure(1)
        self._slots = 0  # slots recorded (the length in use of _hashes)
        self._bits = 10
        self._cells = np.full(1 << self._bits, -1, dtype=np.int32)
        self._used = 0

    @property
    def nbytes(self) -> int:
        return self._cells.nbytes + 8 * self._slots

    def find(self, hashes: np.ndarray) -> np.ndarray:
        """The slot whose hash each of ``hashes`` is (``-1``: none)."""
        out = np.full(len(hashes), -1, dtype=np.int64)
        if not self._used or not len(hashes):
            return out
        mask = (1 << self._bits) - 1
        cell = (hashes >> np.uint64(64 - self._bits)).astype(np.int64)
        rows = np.arange(len(hashes))
        cells, known = self._cells, self._hashes.data
        while len(rows) > _FEW:
            slot = cells[cell]
            full = slot >= 0
            hit = full & (known[np.where(full, slot, 0)] == hashes[rows])
            out[rows[hit]] = slot[hit]
            on = full & ~hit  # occupied by another hash: probe the next cell
            rows, cell = rows[on], (cell[on] + 1) & mask
        # the long probes, one by one
        for row, at in zip(rows.tolist(), cell.tolist(), strict=True):
            wanted = hashes[row]
            while (held := int(cells[at])) >= 0:
                if known[held] == wanted:
                    out[row] = held
                    break
                at = (at + 1) & mask
        return out

    def claim(self, hashes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Find each of the distinct ``hashes``, or claim the free cell its probe ends at (one walk).

        Returns the slot holding each hash (``-1``: none) and the cell each absent hash claimed
        (``-1``: found). A claimed cell holds a marker, which other hashes probe past, until
        :meth:`settle` (or :meth:`release`) replaces it.
        """
        n = len(hashes)
        self._grow(self._used + n)
        found = np.full(n, -1, dtype=np.int64)
        claimed = np.full(n, -1, dtype=np.int64)
        mask = (1 << self._bits) - 1
        cell = (hashes >> np.uint64(64 - self._bits)).astype(np.int64)
        rows, wanted = np.arange(n), hashes  # the rows still probing, and their hashes
        cells, known = self._cells, self._hashes.data
        while len(rows) > _FEW:
            held = cells[cell]
            # a free or claimed cell reads slot 0's hash: masked out
            hit = (known[np.maximum(held, 0)] == wanted) & (held >= 0)
            found[rows[hit]] = held[hit]
            free = held == -1
            at = cell[free]
            markers = (-2 - rows[free]).astype(np.int32)
            cells[at] = markers  # one of the rows aiming at a free cell wins it
            won = cells[at] == markers
            claimed[rows[free][won]] = at[won]
            free[free] = won  # the rows that won their cell
            on = np.flatnonzero(~(hit | free))  # the others probe the next cell
            rows, cell, wanted = rows[on], (cell[on] + 1) & mask, wanted[on]
        for row, at in zip(rows.tolist(), cell.tolist(), strict=True):  # the long probes
            want = hashes[row]
            while True:
                held_at = int(cells[at])
                if held_at == -1:
                    cells[at] = -2 - row
                    claimed[row] = at
                    break
                if held_at >= 0 and known[held_at] == want:
                    found[row] = held_at
                    break
                at = (at + 1) & mask
        return found, claimed

    def settle(self, hashes: np.ndarray, cells: np.ndarray, base: int) -> None:
        """The claimed ``cells`` get slots ``base, base + 1...``, whose hashes are ``hashes``."""
        self.record(hashes, base)
        self._cells[cells] = base + np.arange(len(cells), dtype=np.int32)
        self._used += len(cells)

    def release(self, claimed: np.ndarray) -> None:
        """Free the cells a :meth:`claim` took (its batch goes the general way)."""
        self._cells[claimed[claimed >= 0]] = -1

    def record(self, hashes: np.ndarray, base: int) -> None:
        """The hashes of slots ``base, base + 1...`` (the next ones), not placed in the table."""
        end = base + len(hashes)
        self._hashes.ensure(end)
        self._hashes.data[base:end] = hashes
        self._slots = max(self._slots, end)

    def place(self, hashes: np.ndarray, slots: np.ndarray) -> None:
        """Put distinct ``hashes`` (not in the table; their slots recorded) in cells."""
        self._grow(self._used + len(hashes))
        self._place(hashes, np.asarray(slots, dtype=np.int32))
        self._used += len(hashes)

    def _place(self, hashes: np.ndarray, slots: np.ndarray) -> None:
        """Linear probing for a whole batch: each round, the rows at a free cell take it (one each)."""
        mask = (1 << self._bits) - 1
        cell = (hashes >> np.uint64(64 - self._bits)).astype(np.int64)
        cells = self._cells
        while len(slots) > _FEW:
            free = cells[cell] < 0
            cells[cell[free]] = slots[free]  # one of the rows aiming at a free cell wins it
            won = np.zeros(len(slots), dtype=bool)
            won[free] = cells[cell[free]] == slots[free]
            on = ~won  # the others probe on
            slots, cell = slots[on], (cell[on] + 1) & mask
        for slot, at in zip(slots.tolist(), cell.tolist(), strict=True):  # the long probes
            while cells[at] >= 0:
                at = (at + 1) & mask
            cells[at] = slot

    def reserve(self, slots: int) -> None:
        """Room for ``slots`` slots in all: cells and hashes sized once, not doubled on the way."""
        self._grow(slots)
        self._hashes.ensure(slots)  # pages are touched only as slots fill

    def _grow(self, needed: int) -> None:
        """Double the cells until ``needed`` hashes fit under the load factor."""
        if needed <= self._MAX_LOAD * len(self._cells):
            return
        bits = self._bits
        while needed > self._MAX_LOAD * (1 << bits):
            bits += 1
        placed = self._cells[self._cells >= 0]
        self._bits = bits
        self._cells = np.full(1 << bits, -1, dtype=np.int32)
        if len(placed):
            self._place(self._hashes.data[placed], placed)
