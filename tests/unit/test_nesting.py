"""Random nestings consumed at every level: each root is represented, empty groups reduce to [].

Plans are ``expand^k`` followed by ``reduce^(k-m)`` (0 <= m <= k <= 3) with the default reduce, over random
trees with empty groups anywhere and expansions that raise at any level. The output at level ``m`` is
compared with a sequential reference written here from the contract (DESIGN §5, issue 13):
- the rows of level ``m`` are the nodes of depth ``m`` whose ancestors all expanded; a node whose own
  expansion raised comes back FAILED; a parent with a broken child comes back SUPPRESSED;
- a root that leaves no row at level ``m`` is represented by exactly one row with its status (or that of
  its first inner node that failed, as SUPPRESSED);
- the default reduce of an empty group gives ``[]`` for every child column the run knows at that level.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import lineage_data as ld
from lineage_data._core import columns as C
from lineage_data._core.local import run_local

MAX_DEPTH = 3


def tree_spec():
    """Per node name ("r0", "r0/1", ...): its number of children and whether its expansion raises."""
    return st.dictionaries(
        st.sampled_from([f"r{i}" for i in range(5)]),
        st.tuples(st.lists(st.integers(0, 3), min_size=1, max_size=12), st.sets(st.integers(0, 30))),
        min_size=1,
        max_size=5,
    )


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


class Reference:
    def __init__(self, spec, k):
        self.spec, self.k = spec, k
        self.known: dict[int, dict[str, None]] = {d: {} for d in range(k + 2)}

    def raises(self, node):
        return node_info(self.spec, node)[1]

    def children(self, node, depth):
        n, _ = node_info(self.spec, node)
        return [(f"{node}/{i}", child_row(node, depth, i)) for i in range(n)]

    def _learn(self, depth, row):
        """Columns the run establishes at ``depth``: those with a value of a decided type."""
        self.known[depth].update(dict.fromkeys(k for k, v in row.items() if _decided(v)))

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
        for depth in range(self.k, m - 1, -1):  # settle `known` the way the stages run: deepest first
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


def _decided(value):
    if value is None:
        return False
    if isinstance(value, list):
        return any(_decided(v) for v in value)
    return True


def _freeze(value):
    if isinstance(value, dict):
        return tuple(sorted((k, _freeze(v)) for k, v in value.items()))
    if isinstance(value, list):
        return tuple(_freeze(v) for v in value)
    return value


def comparable(rows, m):
    out = []
    for row in rows:
        values = {k: v for k, v in row.items() if not C.is_reserved(k)}
        present = row[C.OUTCOME] == "PRESENT"
        path = () if m == 0 else tuple(row[C.PATH] or ())
        out.append(
            (
                row[C.ROOT],
                path,
                row[C.OUTCOME],
                row[C.CAUSE],
                row[C.STAGE],
                _freeze(values) if present else None,
            )
        )
    return sorted(out, key=repr)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=tree_spec(), seed=st.integers(0, 3), batch=st.sampled_from([1, 3, None]))
def test_every_level_of_a_random_nesting_matches_the_reference(spec, seed, batch):
    for k in range(MAX_DEPTH + 1):
        for m in range(k + 1):
            ref = Reference(spec, k)
            expected = ref.rows(m)
            got = run_local(build(spec, k, m).plan, batch_size=batch, seed=seed, rows_per_block=2).rows
            assert comparable(got, m) == expected, f"k={k} m={m}"


def test_issue_example_empty_region_group_reduces_to_an_empty_list():
    spec = {"doc0": None}

    def pages(row):
        yield {"p": 0}
        yield {"p": 1}

    def regions(row):
        if row["p"] == 1:
            yield {"r": 10}
            yield {"r": 11}

    plan = (
        ld.from_items([{"doc": d} for d in spec], id_column="doc")
        .expand_lineage(pages)
        .expand_lineage(regions)
        .reduce_lineage()
        .reduce_lineage()
    )
    for seed in range(4):
        (row,) = run_local(plan.plan, seed=seed, batch_size=1).rows
        assert row["r"] == [[], [10, 11]]


def test_a_failed_expansion_read_at_the_child_level_leaves_one_failed_row():
    def pages(row):
        if row["doc"] == "bad":
            raise OSError("unreadable")
        yield from ({"p": i} for i in range(2))

    plan = (
        ld.from_items([{"doc": "ok"}, {"doc": "bad"}], id_column="doc")
        .expand_lineage(pages, name="pages")
        .map(lambda r: {"q": r["p"]})
        .filter(lambda r: True)
    )
    rows = run_local(plan.plan).rows
    bad = [r for r in rows if r[C.ROOT] == "bad"]
    assert [(r[C.OUTCOME], r[C.CAUSE], r[C.STAGE]) for r in bad] == [
        ("FAILED", "OSError: unreadable", "pages")
    ]
    assert sorted(r["q"] for r in rows if r[C.ROOT] == "ok") == [0, 1]
