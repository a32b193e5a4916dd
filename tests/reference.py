"""A plain-Python sequential reference of the lineage semantics, for comparison in tests.

Siblings are processed in ordinal order, stage by stage; a GroupFailure stops the later siblings.
It reimplements the rules on purpose instead of calling the operators.
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass

import pyarrow as pa

import lineage_data as ld
from lineage_data._core import columns as C
from lineage_data._core.failures import GroupFailure, RecordFailure
from lineage_data._core.plan import Plan
from lineage_data._core.stages import Kind


@dataclass
class Ent:
    outcome: str
    row: dict
    cause: str | None = None


def _matching_reduce(stages, i):
    depth = 0
    for j in range(i + 1, len(stages)):
        if stages[j].kind is Kind.EXPAND:
            depth += 1
        elif stages[j].kind is Kind.REDUCE:
            if depth == 0:
                return j
            depth -= 1
    return len(stages)


def _call_one(stage, row):
    call = stage.call
    fn = call.fn(**call.constructor_kwargs) if isinstance(call.fn, type) else call.fn
    if stage.kind is Kind.MAP:
        out = fn(pa.Table.from_pylist([row]), **call.kwargs)
        if isinstance(out, pa.Table):
            return out.to_pylist()[0]
        value = {
            k: (v.to_pylist() if hasattr(v, "to_pylist") else list(v))[0] for k, v in out.items()
        }
        for v in value.values():
            if isinstance(v, RecordFailure | GroupFailure):
                return v
        return value
    return fn(row, **call.kwargs)


def _run(stages, offset, ents, nested):
    i = 0
    barrier = None
    while i < len(stages):
        st = stages[i]
        if st.kind is Kind.EXPAND:
            j = _matching_reduce(stages, i)
            for e in ents:
                if e.outcome != "PRESENT":
                    e.outcome = "SUPPRESSED" if e.outcome == "FAILED" else e.outcome
                    continue
                try:
                    kids = [
                        Ent("PRESENT", {**{c: e.row[c] for c in st.carry}, **k})
                        for k in st.call.fn(dict(e.row))
                    ]
                except Exception as exc:  # noqa: BLE001
                    e.outcome, e.cause = "FAILED", f"{type(exc).__name__}: {exc}"
                    continue
                _run(stages[i + 1 : j], offset + i + 1, kids, True)
                if j == len(stages):
                    e.row = {"children": kids}
                    continue
                red = stages[j]
                broken = [k for k in kids if k.outcome in ("FAILED", "SUPPRESSED")]
                kept = [k.row for k in kids if k.outcome == "PRESENT"]
                if broken and red.on_child_failure == "fail":
                    first = sorted(broken, key=lambda k: k.outcome != "FAILED")[0]
                    e.outcome, e.cause = "SUPPRESSED", first.cause
                    continue
                parent = pickle.loads(
                    pickle.dumps({k: v for k, v in e.row.items() if not isinstance(v, bytes)})
                )
                try:
                    if red.call.fn is None:
                        names = dict.fromkeys(n for r in kept for n in r if n not in st.carry)
                        value = {**parent, **{n: [r.get(n) for r in kept] for n in names}}
                    else:
                        value = red.call.fn(parent, kept, **red.call.kwargs)
                except Exception as exc:  # noqa: BLE001
                    e.outcome, e.cause = "FAILED", f"{type(exc).__name__}: {exc}"
                    continue
                e.row = value
            i = j + 1
            continue
        for e in ents:
            if e.outcome != "PRESENT":
                e.outcome = "SUPPRESSED" if e.outcome == "FAILED" else e.outcome
                continue
            if barrier is not None:
                e.outcome, e.cause = "SUPPRESSED", barrier
                continue
            try:
                value = _call_one(st, e.row)
            except Exception as exc:  # noqa: BLE001
                e.outcome, e.cause = "FAILED", f"{type(exc).__name__}: {exc}"
                continue
            if isinstance(value, RecordFailure | GroupFailure):
                e.outcome, e.cause = "FAILED", value.cause
                if isinstance(value, GroupFailure) and nested:
                    barrier = value.cause
            elif st.kind is Kind.FILTER:
                if not value:
                    e.outcome = "DROPPED"
            else:
                e.row = value
        i += 1


def reference(plan: Plan) -> dict[str, tuple[str, dict | None, str | None]]:
    """``root -> (outcome, user row or None, cause)`` for a closed plan over a from_items source."""
    from lineage_data._core.source import root_ids

    table = plan.source.table  # from_items' rows, as Arrow: their user columns as dicts
    items = table.select(C.user_columns(table.column_names)).to_pylist()
    roots = root_ids(items, plan.source.id_column)
    ents = [Ent("PRESENT", dict(x)) for x in items]
    _run(plan.stages, 0, ents, False)
    return {
        r: (e.outcome, e.row if e.outcome == "PRESENT" else None, e.cause)
        for r, e in zip(roots, ents, strict=True)
    }


def by_root(rows: list[dict], report=None) -> dict[str, dict]:
    """Output rows of a closed plan by root; a root seen twice fails the test.

    Rows a user gets carry no stage column: with ``report`` (the run's) each row gets its root's
    failing stage from ``report.parents`` as ``_lineage_stage``, for :func:`status`.
    """
    stages = {}
    if report is not None:
        stages = dict(
            zip(report.parents["root"].to_list(), report.parents["stage"].to_list(), strict=True)
        )
    out: dict[str, dict] = {}
    for row in rows:
        assert row["_lineage_root"] not in out, f"root {row['_lineage_root']} twice"
        out[row["_lineage_root"]] = (
            {**row, "_lineage_stage": stages.get(row["_lineage_root"])}
            if (report is not None)
            else row
        )
    return out


def status(row: dict) -> tuple:
    """A row's (outcome, cause, stage)."""
    return row["_lineage_outcome"], row["_lineage_cause"], row["_lineage_stage"]


def user_part(row: dict) -> dict:
    """The user columns of an output row."""
    return {k: v for k, v in row.items() if not k.startswith("_lineage_")}


# -- nested expand/reduce plans consumed at any level (see tests/unit/test_nesting.py) ---------------
def node_info(spec, node):
    """(children, raises) of ``node``: drawn from the root's lists by a position derived from the name."""
    root = node.split("/")[0]
    counts, raising = spec[root]
    position = sum((i + 1) * (int(p) + 1) for i, p in enumerate(node.split("/")[1:]))
    return counts[position % len(counts)], position in raising


def child_row(node, depth, i):
    """Child ``i`` of ``node`` (at ``depth``): its own column names, so parents never collide with them."""
    return {f"node{depth + 1}": f"{node}/{i}", f"v{depth + 1}": i * 10 + depth}


def make_expand(spec, depth):
    def expand(row):
        node = row[f"node{depth}"]
        n, raises = node_info(spec, node)
        if raises:
            raise ValueError(f"boom {node}")
        for i in range(n):
            yield child_row(node, depth, i)

    expand.__name__ = f"e{depth + 1}"
    return expand


def build(spec, k, m):
    ds = ld.from_items([{"node0": root} for root in sorted(spec)], id_column="node0")
    for depth in range(k):
        ds = ds.expand_lineage(make_expand(spec, depth), name=f"e{depth + 1}")
    for depth in range(k, m, -1):
        ds = ds.reduce_lineage(name=f"r{depth}")
    return ds


# -- the reference ----------------------------------------------------------------------------------


class NestedReference:
    """Sequential reference of ``build(spec, k, m)``: the rows a consumer gets at level ``m``."""

    def __init__(self, spec, k):
        self.spec, self.k = spec, k
        self.known: dict[int, dict[str, None]] = {d: {} for d in range(k + 2)}

    def raises(self, node):
        return node_info(self.spec, node)[1]

    def children(self, node, depth):
        n, _ = node_info(self.spec, node)
        return [(f"{node}/{i}", child_row(node, depth, i)) for i in range(n)]

    def _learn(self, depth, row):
        """Columns the run knows at ``depth``: every column of a PRESENT row there.

        A column known only as ``[]`` (the list column of an inner empty group) or ``None`` counts too:
        it is a column of that level, so an empty group above lists it as ``[]``.
        """
        self.known[depth].update(dict.fromkeys(row))

    def entity(self, node, row, depth, m):
        """(outcome, cause, stage, row) of ``node`` at ``depth`` once everything below is reduced."""
        if depth == self.k:
            self._learn(depth, row)
            return ("PRESENT", None, None, row)
        if self.raises(node):
            return ("FAILED", f"ValueError: boom {node}", f"e{depth + 1}", None)
        kids = [self.entity(c, r, depth + 1, m) for c, r in self.children(node, depth)]
        broken = [kid for kid in kids if kid[0] in ("FAILED", "SUPPRESSED")]
        if broken:
            first = sorted(broken, key=lambda kid: kid[0] != "FAILED")[0]
            return ("SUPPRESSED", first[1], first[2], None)
        if kids:
            names = dict.fromkeys(name for kid in kids for name in kid[3])
        else:
            names = self.known[depth + 1]
        value = {**row, **{name: [kid[3].get(name) for kid in kids] for name in names}}
        self._learn(depth, value)
        return ("PRESENT", None, None, value)

    def rows(self, m):
        """Output rows at level ``m`` as comparable tuples (root, path, outcome, cause, stage, values)."""
        for depth in range(
            self.k, m - 1, -1
        ):  # settle `known` the way the stages run: deepest first
            for root in sorted(self.spec):
                self._settle(root, {"node0": root}, 0, depth, m)
        out = []
        for root in sorted(self.spec):
            nodes = list(self._reach(root, {"node0": root}, 0, (), m))
            if m == 0 or nodes:
                for path, node, row in nodes:
                    status = self.entity(node, row, m, m)
                    out.append((root, path, *status[:3], _freeze(status[3])))
                continue
            stand_in = self._stand_in(root, m)
            if stand_in is not None:
                out.append((root, (), *stand_in, None))
        return sorted(out, key=repr)

    def _settle(self, node, row, depth, target, m):
        if depth == target:
            self.entity(node, row, depth, m)
            return
        if self.raises(node):
            return
        for child, child_row in self.children(node, depth):
            self._settle(child, child_row, depth + 1, target, m)

    def _reach(self, node, row, depth, path, m):
        if depth == m:
            yield path, node, row
            return
        if self.raises(node):
            return
        for i, (child, child_row) in enumerate(self.children(node, depth)):
            yield from self._reach(child, child_row, depth + 1, (*path, i), m)

    def _stand_in(self, root, m):
        if self.raises(root):
            return ("FAILED", f"ValueError: boom {root}", "e1")
        bad = self._first_bad(root, 0, (), m)
        if bad is None:
            return None
        return ("SUPPRESSED", f"ValueError: boom {bad[1]}", bad[2])

    def _first_bad(self, node, depth, path, m):
        """The failed inner node (depth 1..m-1) with the smallest path, as (path, node, stage)."""
        found = []
        for i, (child, _) in enumerate(self.children(node, depth)):
            child_path = (*path, i)
            if depth + 1 >= m:
                continue
            if self.raises(child):
                found.append((child_path, child, f"e{depth + 2}"))
            else:
                deeper = self._first_bad(child, depth + 1, child_path, m)
                if deeper is not None:
                    found.append(deeper)
        return min(found) if found else None


def _freeze(value):
    if isinstance(value, dict):
        return tuple(sorted((k, _freeze(v)) for k, v in value.items()))
    if isinstance(value, list):
        return tuple(_freeze(v) for v in value)
    return value
