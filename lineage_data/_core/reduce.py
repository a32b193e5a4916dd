"""``reduce_lineage``: parent-local commit of each parent once its own group is complete."""

from __future__ import annotations

import pickle
from collections import Counter, OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from lineage_data._core import columns as C
from lineage_data._core import outcomes
from lineage_data._core.errors import ContractError, FencingError, describe
from lineage_data._core.failures import is_failure
from lineage_data._core.outcomes import Outcome, Status
from lineage_data._core.policy import CallPolicy
from lineage_data._core.stages import Reduce

GroupKey = tuple[str, tuple[int, ...]]


def collect_children(
    parent: dict,
    children: list[dict],
    *,
    carry: Sequence[str] = (),
    known: Sequence[str] = (),
) -> dict:
    """The default reduce: every child column becomes an ordered list column of the parent.

    ``known`` names child columns the stage knows even when no child of this group has them (an empty
    group): each becomes an empty list, never a missing column.

    >>> collect_children({"doc": "a"}, [{"text": "p0"}, {"text": "p1"}])
    {'doc': 'a', 'text': ['p0', 'p1']}
    >>> collect_children({"doc": "b"}, [], known=["text"])
    {'doc': 'b', 'text': []}
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

    @property
    def complete(self) -> bool:
        """True once the header and every child it announces are in."""
        return self.header is not None and len(self.children) == self.header[C.SIZE]


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
    A completed group is handed out and kept until :meth:`forget` (its parent reached the consumer) or
    until ``keep_handed`` newer groups were handed out: a retried task that re-sends a piece of it gets
    the whole group again, so a task that died after the hand-off loses nothing.
    Pure Python: the in-process executor holds one; on Ray, hash-partitioned holder actors hold one each.
    """

    def __init__(self, *, keep_handed: int = 20_000) -> None:
        self._groups: dict[GroupKey, Group] = {}
        self._handed: OrderedDict[GroupKey, Group] = OrderedDict()
        self._keep_handed = keep_handed

    def add(self, rows: Sequence[dict]) -> list[tuple[GroupKey, Group]]:
        """Take member rows of one level; return the groups they complete, in completion order."""
        done: dict[GroupKey, None] = {}
        for row in rows:
            key = group_key(row)
            if key in self._handed:
                done[key] = None  # a retried piece of a group already handed out: hand it again
                continue
            group = self._groups.get(key)
            if group is None:
                group = self._groups[key] = Group()
            if row[C.SIZE] is not None:
                if group.header is not None and not _same(group.header, row):
                    raise FencingError(f"conflicting headers for parent {key}")
                group.header = row
            else:
                ordinal = row[C.PATH][-1]
                previous = group.children.get(ordinal)
                if previous is not None and not _same(previous, row):
                    raise FencingError(
                        f"conflicting reports for child {row[C.ROOT]}{list(row[C.PATH])}"
                    )
                group.children[ordinal] = row
            if group.complete:
                done[key] = None
        out = []
        for key in done:
            group = self._groups.pop(key, None) or self._handed[key]
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
        rows = [row for group in self._groups.values() for row in _rows(group)]
        self._groups.clear()
        return rows


class ReduceOp:
    """Emits each parent the moment its group is complete; no groupby, no barrier.

    A parent whose header and children all arrive in one batch is reduced right there. Rows of groups
    the batch does not complete go to ``holders`` (an object with ``add(rows) -> completed groups``: a
    :class:`GroupBuffer` in-process, hash-partitioned holder actors on Ray); the batch whose rows
    complete a group reduces that parent. One coordinator call per batch releases the parents reduced
    in it and counts their outcomes.
    """

    def __init__(
        self,
        stage: Reduce,
        coordinator: Any,
        *,
        holders: Any,
        carry: Sequence[str] = (),
        children_of: str | None = None,
    ) -> None:
        self._stage = stage
        self._coordinator = coordinator
        self._holders = holders
        self._carry = tuple(carry)
        self._fn: Callable[..., Any] | None = (
            stage.call.bind() if stage.call.fn is not None else None
        )
        self._policy = CallPolicy(stage.name, stage.on_error)
        self._types = C.EstablishedTypes(coordinator, stage.name)
        self._children_of = children_of  # the stage whose columns the children carry
        self._known: list[str] | None = None  # its established columns, asked once per batch

    def __call__(self, table: pa.Table) -> pa.Table:
        """Process one batch; returns the parents it completed and the rows of outer levels."""
        table = C.conform(table)
        level = self._stage.level
        member = pc.or_(
            C.depth_mask(table, level, header=False), C.depth_mask(table, level, header=True)
        )
        passthrough = C.lineage_only(table.filter(pc.invert(member)))
        local = GroupBuffer()
        done = local.add(table.filter(member).to_pylist())
        partial = local.drain()
        if partial:
            done.extend(self._holders.add(partial))
        self._known = None
        out = [self._reduce(key, group) for key, group in done]
        parts = [passthrough] if passthrough.num_rows else []
        if out:
            # A result whose values do not fit (a type that conflicts with the parents reduced before
            # it, run-wide; a value Arrow cannot hold) fails its parent alone.
            reduced, failed = self._types.build_rows(out)
            reduced = C.with_statuses(
                reduced, {i: outcomes.rejected(c, self._stage.name) for i, c in failed.items()}
            )
            counts = Counter(reduced[C.OUTCOME].to_pylist())
            self._coordinator.reduced(
                self._stage.name, [k[0] for k, _ in done], [k[1] for k, _ in done], dict(counts)
            )
            parts.append(reduced)
        return C.concat(parts)

    def _reduce(self, key: GroupKey, group: Group) -> dict:
        header = group.header
        assert header is not None
        children = [group.children[i] for i in range(header[C.SIZE])]
        verdict = outcomes.reduce_group(
            _status(header), [_status(c) for c in children], self._stage.on_child_failure
        )
        lineage = {C.ROOT: key[0], C.PATH: list(key[1])}
        if verdict.status is not None:
            return {
                **lineage,
                C.OUTCOME: verdict.status.outcome.value,
                C.CAUSE: verdict.status.cause,
                C.STAGE: verdict.status.stage,
            }
        parent = pickle.loads(header[C.PARENT]) if header[C.PARENT] else {}
        kids = [
            {k: v for k, v in children[i].items() if not C.is_reserved(k)} for i in verdict.kept
        ]
        status, value = self._call(parent, kids)
        if not status.present:
            return {
                **lineage,
                C.OUTCOME: status.outcome.value,
                C.CAUSE: status.cause,
                C.STAGE: status.stage,
            }
        row = {**value, **lineage, C.OUTCOME: Outcome.PRESENT.value}
        if self._stage.on_child_failure == "skip":
            row[C.MISSING] = list(verdict.missing)
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
            self._known = []
            if self._children_of is not None:
                self._known = [
                    c
                    for c in self._coordinator.established(self._children_of)
                    if not C.is_reserved(c)
                ]
        return self._known


def _rows(group: Group) -> list[dict]:
    return ([group.header] if group.header is not None else []) + list(group.children.values())
