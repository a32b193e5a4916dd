"""``reduce_lineage``: parent-local commit of each parent once its own group is complete."""

from __future__ import annotations

import pickle
from collections import Counter, OrderedDict, defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from lineage_data._core import columns as C
from lineage_data._core import outcomes
from lineage_data._core.errors import ContractError, FencingError, describe
from lineage_data._core.expand import split_level
from lineage_data._core.failures import is_failure
from lineage_data._core.guard import Guard, Watchdog, unit_key
from lineage_data._core.outcomes import Outcome, Status
from lineage_data._core.policy import CallPolicy
from lineage_data._core.rowwise import tombstone
from lineage_data._core.stages import Reduce
from lineage_data._core.state.protocols import OperatorClient

GroupKey = tuple[str, tuple[int, ...]]
# From this many member rows on, a reduce batch is grouped column-wise (measured: below it, the
# fixed cost of the numpy calls is more than the row-wise buffer's cost per row).
COLUMNAR_ROWS = 1024


def collect_children(
    parent: dict,
    children: list[dict],
    *,
    carry: Sequence[str] = (),
    known: Sequence[str] = (),
) -> dict:
    """The default reduce: every child column becomes an ordered list column of the parent.

    ``known``: child columns the stage knows, each an empty list in an empty group (never missing).
    """
    names: dict[str, None] = dict.fromkeys(k for k in known if k not in carry)
    for child in children:
        names.update(dict.fromkeys(k for k in child if k not in carry))
    return {**parent, **{name: [child.get(name) for child in children] for name in names}}


@dataclass(slots=True)
class Group:
    """The rows of one parent seen so far: its header and its children by ordinal."""

    header: dict | None = None
    children: dict[int, dict] = field(default_factory=dict)


def _status(row: Mapping) -> Status:
    return Status(Outcome(row[C.OUTCOME]), row[C.CAUSE], row[C.STAGE])


def _same(a: Mapping, b: Mapping) -> bool:
    return all(a[k] == b[k] for k in (C.OUTCOME, C.CAUSE, C.SIZE))


def group_key(row: Mapping) -> GroupKey:
    """The parent a member row belongs to: a header's own path, a child's path minus its ordinal."""
    path = tuple(row[C.PATH])
    return (row[C.ROOT], path if row[C.SIZE] is not None else path[:-1])


class GroupBuffer:
    """Partial groups keyed by parent; :meth:`add` returns the groups a piece completes.

    A duplicate row (a retried task) is ignored when identical and a :class:`FencingError` otherwise.
    A handed-out group is kept until :meth:`forget` or ``keep_handed`` newer ones: a retried task
    that re-sends a piece of it gets the whole group again.
    """

    def __init__(self, *, keep_handed: int = 20_000) -> None:
        self._groups: defaultdict[GroupKey, Group] = defaultdict(Group)
        self._handed: OrderedDict[GroupKey, Group] = OrderedDict()
        self._keep_handed = keep_handed

    def add(self, rows: Sequence[dict]) -> list[tuple[GroupKey, Group]]:
        """Take member rows of one level; return the groups they complete, in completion order."""
        done: dict[GroupKey, None] = {}
        groups, handed = self._groups, self._handed
        for row in rows:
            path, size = tuple(row[C.PATH]), row[C.SIZE]
            key = (row[C.ROOT], path if size is not None else path[:-1])  # group_key(row)
            if key in handed:
                done[key] = None  # a retried piece of a group already handed out: hand it again
                continue
            group = groups[key]
            if size is not None:
                if group.header is not None and not _same(group.header, row):
                    raise FencingError(f"conflicting headers for parent {key}")
                group.header = row
            else:
                ordinal = path[-1]
                previous = group.children.get(ordinal)
                if previous is not None and not _same(previous, row):
                    raise FencingError(
                        f"conflicting reports for child {row[C.ROOT]}{list(row[C.PATH])}"
                    )
                group.children[ordinal] = row
            header = group.header
            if header is not None and len(group.children) == header[C.SIZE]:
                done[key] = None
        out = []
        for key in done:
            group = self._groups.pop(key) if key in self._groups else self._handed[key]
            self._handed[key] = group
            self._handed.move_to_end(key)
            out.append((key, group))
        while len(self._handed) > self._keep_handed:
            self._handed.popitem(last=False)
        return out

    def forget(self, roots: Sequence[str]) -> None:
        """Drop the handed-out groups of roots the consumer has received."""
        gone = set(roots)
        for key in [k for k in self._handed if k[0] in gone]:
            del self._handed[key]

    def drain(self) -> list[dict]:
        """Remove and return the rows of every partial group."""
        rows = []
        for group in self._groups.values():
            if group.header is not None:
                rows.append(group.header)
            rows.extend(group.children.values())
        self._groups.clear()
        return rows


class ReduceOp:
    """Emits each parent the moment its group is complete; no groupby, no barrier.

    Rows of groups a batch does not complete go to ``holders`` (``add(rows) -> completed groups``: a
    :class:`GroupBuffer`, or holder actors on Ray). One coordinator call per batch releases the
    parents reduced in it.
    """

    def __init__(
        self,
        stage: Reduce,
        coordinator: OperatorClient,
        *,
        holders: Any,
        carry: Sequence[str] = (),
        children_of: str | None = None,
        watchdog: Watchdog | None = None,
    ) -> None:
        self._stage = stage
        self._guard = Guard.of(stage, coordinator, watchdog=watchdog)
        self._isolate = False  # a block whose worker died on it before: each group journaled
        self._coordinator = coordinator
        self._holders = holders
        self._carry = tuple(carry)
        self._fn: Callable[..., Any] | None = (
            stage.call.bind() if stage.call.fn is not None else None
        )
        self._policy = CallPolicy(stage.name, stage.on_error, invoke=self._guard.call)
        self._types = C.EstablishedTypes(coordinator, stage.name)
        self._children_of = children_of  # the stage whose columns the children carry
        self._known: list[str] | None = None  # the columns its rows showed, asked once per batch
        self._user_keys: dict[tuple, tuple[str, ...]] = {}  # a row's keys -> its user columns

    def __call__(self, table: pa.Table) -> pa.Table:
        """Process one batch; returns the parents it completed and the rows of outer levels."""
        table = C.conform(table)
        level = self._stage.level
        members, passthrough = split_level(table, level, headers=True)
        parts = [passthrough] if passthrough is not None and passthrough.num_rows else []
        # A small batch (see COLUMNAR_ROWS) or an odd one goes through the row-wise buffer.
        local = _local_groups(members, level) if members.num_rows >= COLUMNAR_ROWS else None
        if local is None:
            buffer = GroupBuffer()
            done = buffer.add(members.to_pylist())
            partial = buffer.drain()
        else:
            done = []
            partial = _rows_at(members, local.partial)
        if partial:
            done.extend(self._holders.add(partial))
        self._known = None
        keys = [*(local.keys if local is not None else ()), *(key for key, _ in done)]
        if keys:  # the groups this block completes are journaled before any is reduced
            whole = self._guard.block(len(keys), unit_key(*keys[0]), unit_key(*keys[-1]))
            self._isolate = not whole
        try:
            out = self._reduce_local(members, local) if local is not None else []
            out.extend(self._reduce(key, group) for key, group in done)
        finally:
            self._isolate = False
            if keys:
                self._guard.done_block()
        if out:
            # a result whose values do not fit fails its parent alone
            reduced, failed = self._types.build_rows(out)
            reduced = C.with_statuses(
                reduced, {i: outcomes.rejected(c, self._stage.name) for i, c in failed.items()}
            )
            counts = Counter(reduced[C.OUTCOME].to_pylist())
            self._coordinator.reduced(
                self._stage.name, [k[0] for k in keys], [k[1] for k in keys], dict(counts)
            )
            parts.append(reduced)
        return C.concat(parts)

    def _reduce(self, key: GroupKey, group: Group) -> dict:
        header = group.header
        assert header is not None
        children = [group.children[i] for i in range(header[C.SIZE])]
        kids = [self._user_part(c) for c in children]
        present = Outcome.PRESENT.value
        if header[C.OUTCOME] == present and all(c[C.OUTCOME] == present for c in children):
            return self._reduced(key, header[C.PARENT], kids, ())
        statuses = [_status(c) for c in children]
        return self._judged(key, _status(header), statuses, header[C.PARENT], kids)

    def _judged(
        self, key: GroupKey, header: Status, children: list[Status], payload: Any, kids: list[dict]
    ) -> dict:
        """The row of a parent whose header or a child is not PRESENT (:func:`outcomes.reduce_group`)."""
        verdict = outcomes.reduce_group(header, children, self._stage.on_child_failure)
        if verdict.status is not None:
            return tombstone(*key, verdict.status)
        return self._reduced(key, payload, [kids[i] for i in verdict.kept], verdict.missing)

    def _user_part(self, row: dict) -> dict:
        """``row`` without its lineage columns (the reserved names of each key set found once)."""
        keys = tuple(row)
        names = self._user_keys.get(keys)
        if names is None:
            names = tuple(k for k in keys if not C.is_reserved(k))
            if len(self._user_keys) < 64:
                self._user_keys[keys] = names
        return {k: row[k] for k in names}

    def _reduce_local(self, members: pa.Table, local: _LocalGroups) -> list[dict]:
        """:meth:`_reduce` of the groups ``members`` complete, read column-wise (no dict per row)."""
        if not local.keys:
            return []
        outcome = members[C.OUTCOME].to_numpy(zero_copy_only=False)
        present = outcome == Outcome.PRESENT.value
        # per group: is its header and every child PRESENT? (then the verdict is "reduce them all")
        broken = np.concatenate(([0], np.cumsum(~present[local.children])))
        clean = (
            present[local.headers] & (broken[local.bounds[1:]] == broken[local.bounds[:-1]])
        ).tolist()
        statuses: list[Status] = []
        if not all(clean):
            statuses = [
                Status(Outcome(o), c, s)
                for o, c, s in zip(
                    outcome.tolist(),
                    members[C.CAUSE].to_pylist(),
                    members[C.STAGE].to_pylist(),
                    strict=True,
                )
            ]
        headers, children = local.headers.tolist(), local.children.tolist()
        parent = members[C.PARENT].to_pylist()
        # the children's user columns (by position: names may repeat), rows picked by index
        user = [c for c, name in enumerate(members.column_names) if not C.is_reserved(name)]
        if user:
            names = [members.column_names[c] for c in user]
            lists = [members.column(c).to_pylist() for c in user]
            values = [[column[i] for i in children] for column in lists]
            kids = [dict(zip(names, row, strict=True)) for row in zip(*values, strict=True)]
        else:
            kids = [{} for _ in children]
        out = []
        bounds = local.bounds.tolist()
        for g, key in enumerate(local.keys):
            start, end = bounds[g], bounds[g + 1]
            if clean[g]:
                out.append(self._reduced(key, parent[headers[g]], kids[start:end], ()))
            else:
                group = [statuses[i] for i in children[start:end]]
                header = statuses[headers[g]]
                out.append(self._judged(key, header, group, parent[headers[g]], kids[start:end]))
        return out

    def _reduced(
        self, key: GroupKey, payload: bytes | None, kids: list[dict], missing: Sequence[int]
    ) -> dict:
        """The row of a parent whose group is reduced by the function over ``kids``."""
        parent = pickle.loads(payload) if payload else {}
        unit = unit_key(*key) if self._isolate else None
        if unit is not None and (crashed := self._guard.unit(unit)) is not None:
            return tombstone(*key, crashed)
        status, value = self._call(parent, kids)
        if unit is not None:
            self._guard.done(unit)
        if not status.present:
            return tombstone(*key, status)
        row = {**value, C.ROOT: key[0], C.PATH: list(key[1]), C.OUTCOME: Outcome.PRESENT.value}
        if self._stage.on_child_failure == "skip":
            row[C.MISSING] = list(missing)
        return row

    def _call(self, parent: dict, kids: list[dict]) -> tuple[Status, dict]:
        name = self._stage.name
        fn = self._fn
        if fn is None:
            known = () if kids else self._columns()  # an empty group: its list columns are []
            value, failure = self._policy.call(
                lambda: collect_children(parent, kids, carry=self._carry, known=known),
                on="a parent",
            )
        else:
            value, failure = self._policy.call(fn, parent, kids, on="a parent")
        if failure is not None:
            return failure, {}
        if is_failure(value):
            return outcomes.from_value(value, name), {}
        try:
            C.check_user_row(value, f"reduce_lineage {name!r}: the result")
        except ContractError as exc:  # one parent's bad result fails that parent, not the run
            return outcomes.rejected(describe(exc), name), {}
        return outcomes.PRESENT, dict(value)

    def _columns(self) -> list[str]:
        """The child columns the run knows, for empty groups: one coordinator call per batch at most."""
        if self._known is None:
            of = self._children_of
            names = [] if of is None else self._coordinator.established(of)
            self._known = [c for c in names if not C.is_reserved(c)]
        return self._known


def _rows_at(table: pa.Table, rows: np.ndarray) -> list[dict]:
    """``table.take(rows).to_pylist()``; most of a batch is read whole, then picked (no take)."""
    if not len(rows):
        return []
    if 2 * len(rows) < table.num_rows:
        return table.take(rows).to_pylist()
    every = table.to_pylist()
    return [every[i] for i in rows.tolist()]


@dataclass(frozen=True, slots=True)
class _LocalGroups:
    """Member rows of one batch (positions into it) grouped by parent, as :class:`GroupBuffer` would.

    ``keys``: the groups the batch completes, in completion order; ``headers[g]``: the row of group
    ``g``'s header; ``children[bounds[g]:bounds[g + 1]]``: its children's rows in ordinal order;
    ``partial``: the rows of the other groups, in :meth:`GroupBuffer.drain` order.
    """

    keys: list[GroupKey]
    headers: np.ndarray
    children: np.ndarray
    bounds: np.ndarray
    partial: np.ndarray


def _local_groups(members: pa.Table, level: int) -> _LocalGroups | None:
    """Group the member rows of one batch column-wise; None when the batch needs the row-wise buffer.

    That is a batch with a duplicate row or an ordinal past its header's size: :class:`GroupBuffer`
    then decides, with its errors.
    """
    m = members.num_rows
    if not m:
        nothing = np.empty(0, np.int64)
        return _LocalGroups([], nothing, nothing, np.zeros(1, np.int64), nothing)
    path = C.one_chunk(members[C.PATH])
    root = C.one_chunk(members[C.ROOT])
    if path.null_count or root.null_count or path.values.null_count:
        return None
    offsets = path.offsets.to_numpy()
    values = path.values.to_numpy()
    sizes = members[C.SIZE].to_numpy()  # float, NaN for the children (no group size)
    header = ~np.isnan(sizes)
    child = ~header
    ordinal = np.full(m, -1, np.int64)
    ordinal[child] = values[offsets[:-1][child] + level - 1]
    if (ordinal[child] < 0).any():
        return None
    gid, names = _group_ids(root, offsets, values, level)
    order = np.lexsort((ordinal, gid))  # by group; in a group the header (ordinal -1) first
    group, position = gid[order], ordinal[order]
    same = group[1:] == group[:-1]
    if (same & (position[1:] == position[:-1])).any():
        return None  # a duplicate
    # group g's rows: order[starts[g]:ends[g]]
    starts = np.flatnonzero(np.concatenate(([True], ~same)))
    ends = np.append(starts[1:], m)
    has_header = position[starts] == -1
    size = np.where(has_header, np.nan_to_num(sizes[order[starts]], nan=-1), -1).astype(np.int64)
    count = ends - starts - has_header
    if (has_header & (count > 0) & (position[ends - 1] >= size)).any():
        return None  # an ordinal past its header's size
    complete = has_header & (count == size)
    done = np.flatnonzero(complete)
    # in the order they complete: by their last row
    done = done[np.argsort(np.maximum.reduceat(order, starts)[done])]
    if len(done) == len(names):
        rest = np.empty(0, np.int64)
    else:
        rest = np.flatnonzero(~complete[gid])
        rest = rest[np.lexsort((rest, child[rest], gid[rest]))]
    done_list = done.tolist()
    return _LocalGroups(
        keys=[names[g] for g in done_list],
        headers=order[starts[done]],
        children=np.concatenate(
            [order[starts[g] + 1 : ends[g]] for g in done_list] or [np.empty(0, np.int64)]
        ),
        bounds=np.concatenate(([0], np.cumsum(size[done]))),
        partial=rest,
    )


def _group_ids(
    root: pa.Array, offsets: np.ndarray, values: np.ndarray, level: int
) -> tuple[np.ndarray, list[Any]]:
    """Each member row's group id, in order of first appearance, and each group's parent key."""
    if level == 1:  # the parent is the root: no Python loop
        encoded = root.dictionary_encode()
        gid = encoded.indices.to_numpy().astype(np.int64)
        return gid, [(r, ()) for r in encoded.dictionary.to_pylist()]
    at = offsets[:-1, None] + np.arange(level - 1)
    keys = zip(root.to_pylist(), map(tuple, values[at].tolist()), strict=True)
    index: dict[Any, int] = {}
    gid = np.fromiter((index.setdefault(k, len(index)) for k in keys), np.int64, len(root))
    return gid, list(index)
