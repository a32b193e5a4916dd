"""A plain-Python sequential reference of the lineage semantics, for comparison in tests.

Siblings are processed in ordinal order, stage by stage; a GroupFailure stops the later siblings.
It reimplements the rules on purpose instead of calling the operators.
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass

import pyarrow as pa

from lineage_data._core.failures import GroupFailure, RecordFailure
from lineage_data._core.plan import Kind, Plan


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
    fn = stage.fn(**stage.fn_constructor_kwargs) if isinstance(stage.fn, type) else stage.fn
    if stage.kind is Kind.MAP:
        out = fn(pa.Table.from_pylist([row]), **stage.fn_kwargs)
        if isinstance(out, pa.Table):
            return out.to_pylist()[0]
        value = {
            k: (v.to_pylist() if hasattr(v, "to_pylist") else list(v))[0] for k, v in out.items()
        }
        for v in value.values():
            if isinstance(v, RecordFailure | GroupFailure):
                return v
        return value
    return fn(row, **stage.fn_kwargs)


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
                        for k in st.fn(dict(e.row))
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
                    if red.fn is None:
                        names = dict.fromkeys(n for r in kept for n in r if n not in st.carry)
                        value = {**parent, **{n: [r.get(n) for r in kept] for n in names}}
                    else:
                        value = red.fn(parent, kept, **red.fn_kwargs)
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

    items = [dict(x) for x in plan.source.payload]
    roots = root_ids(items, plan.source.id_column)
    ents = [Ent("PRESENT", dict(x)) for x in items]
    _run(plan.stages, 0, ents, False)
    return {
        r: (e.outcome, e.row if e.outcome == "PRESENT" else None, e.cause)
        for r, e in zip(roots, ents, strict=True)
    }


def user_part(row: dict) -> dict:
    """The user columns of an output row."""
    return {k: v for k, v in row.items() if not k.startswith("_lineage_")}
