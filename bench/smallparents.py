"""``smallparents``: many parents of a few tiny children: expand -> a cheap CPU map -> reduce.

Here the stage functions cost next to nothing, so what is measured is the runtime's own cost per block,
per task and per coordinator call. Three systems, one Ray instance, the same functions:

- ``lineage_data``: ``expand_lineage -> map_batches -> reduce_lineage``;
- ``floor``: the same stage functions with no regroup at all (children out), in Ray Data's cheapest
  form: the expansion as ``map_batches`` over blocks of parents (each parent's ``children`` called as
  in the other systems) over as many source blocks as lineage_data makes. Ray Data's own
  ``flat_map`` costs more than lineage_data's expansion on tiny rows (``floor_flat_map``, kept for
  reference: 4.18 s against lineage_data's 2.97 s in smallparents-small-20261205-064839.json), and a
  floor that can be beaten is no floor;
- ``ray_data``: the natural Ray Data pipeline ``flat_map -> map_batches -> groupby(doc).map_groups``
  (Ray Data's defaults).

Every system is consumed with ``iter_batches(batch_size=None, batch_format="pyarrow")`` on the driver
(rows counted, nothing written). Each system first runs once untimed on a tenth of the parents (worker
processes and imports warm for every side: a cold first run took twice as long), then ``REPEATS`` times,
interleaved, the order reversed every other repeat (the run right after Ray Data's shuffle starts new
worker processes and is slower: each of the other two systems gets that place equally often); the best
wall of each counts. Headline: ``wall_ratio_vs_floor`` and
``wall_ratio_vs_ray_data`` of lineage_data, and the medians of the per-repeat ratios beside them.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from bench.common import SMOKE_PARTITIONS, code_version, log, stamp
from bench.measure import median_ratio, results_path, write_json

PARENTS = {"smoke": 500, "small": 20_000, "full": 200_000}
MIN_CHILDREN, MAX_CHILDREN = 1, 10
BATCH = 256  # rows per batch of the map, in every system
ORDER = ("floor", "ray_data", "lineage_data", "floor_flat_map")
SOURCE_BLOCKS = 64  # lineage_data's from_items makes at most this many (MAX_SOURCE_BLOCKS)
# Each system runs this many times, interleaved, and its best wall counts: the machine is shared.
REPEATS = {"smoke": 1, "small": 4, "full": 2}


def make_parents(n: int, seed: int) -> list[dict[str, Any]]:
    """``n`` parents ``{"doc", "n_children"}`` with 1..10 children each, uniformly (seeded)."""
    counts = np.random.default_rng(seed).integers(MIN_CHILDREN, MAX_CHILDREN + 1, size=n)
    return [{"doc": f"doc-{i:07d}", "n_children": int(k)} for i, k in enumerate(counts)]


# -- the stage functions (module level: Ray pickles them by reference) -------------------------------


def children(row: dict[str, Any]) -> list[dict[str, Any]]:
    """A parent's ordered children."""
    return [{"doc": row["doc"], "ordinal": i} for i in range(int(row["n_children"]))]


def cheap_map(batch: pa.Table) -> pa.Table:
    """A cheap vectorized CPU step: one short text per child."""
    text = pc.binary_join_element_wise(batch["doc"], pc.cast(batch["ordinal"], pa.string()), ":")
    return batch.append_column("text", text)


def assemble(doc: str, texts: list[str]) -> dict[str, Any]:
    """The parent's row from its children's texts, in ordinal order."""
    return {"doc": doc, "n": len(texts), "text": "|".join(texts)}


def assemble_lineage(parent: dict[str, Any], kids: list[dict[str, Any]]) -> dict[str, Any]:
    """``reduce_lineage`` function: children arrive in ordinal order."""
    return assemble(parent["doc"], [k["text"] for k in kids])


def assemble_group(group: pa.Table) -> pa.Table:
    """``groupby(doc).map_groups`` function: sort by ordinal, then assemble."""
    group = group.sort_by("ordinal")
    return pa.Table.from_pylist([assemble(group["doc"][0].as_py(), group["text"].to_pylist())])


# -- the systems ---------------------------------------------------------------------------------


def _drain(batches: Iterable[pa.Table]) -> int:
    return sum(b.num_rows for b in batches)


def children_of_block(batch: pa.Table) -> pa.Table:
    """Every parent's ``children``, one block of parents at a time (the floor's expansion)."""
    return pa.Table.from_pylist([c for row in batch.to_pylist() for c in children(row)])


def run_floor(parents: list[dict[str, Any]]) -> dict[str, Any]:
    """Expansion per block -> map_batches, children out: the stages with no regroup at all."""
    import ray

    source = ray.data.from_items(parents, override_num_blocks=min(SOURCE_BLOCKS, len(parents)))
    ds = source.map_batches(children_of_block, batch_size=None, batch_format="pyarrow")
    ds = ds.map_batches(cheap_map, batch_size=BATCH, batch_format="pyarrow")
    return {"rows_out": _drain(ds.iter_batches(batch_size=None, batch_format="pyarrow"))}


def run_floor_flat_map(parents: list[dict[str, Any]]) -> dict[str, Any]:
    """flat_map -> map_batches, children out: Ray Data's natural pipeline without the regroup."""
    import ray

    ds = ray.data.from_items(parents).flat_map(children)
    ds = ds.map_batches(cheap_map, batch_size=BATCH, batch_format="pyarrow")
    return {"rows_out": _drain(ds.iter_batches(batch_size=None, batch_format="pyarrow"))}


def run_ray_data(parents: list[dict[str, Any]], partitions: int | None = None) -> dict[str, Any]:
    """flat_map -> map_batches -> groupby(doc).map_groups: Ray Data's natural regroup."""
    import ray

    ds = ray.data.from_items(parents).flat_map(children)
    ds = ds.map_batches(cheap_map, batch_size=BATCH, batch_format="pyarrow")
    grouped = ds.groupby("doc", num_partitions=partitions)
    ds = grouped.map_groups(assemble_group, batch_format="pyarrow")
    return {"rows_out": _drain(ds.iter_batches(batch_size=None, batch_format="pyarrow"))}


def run_lineage_data(parents: list[dict[str, Any]]) -> dict[str, Any]:
    """expand_lineage -> map_batches -> reduce_lineage; the run report's figures as extras."""
    import lineage_data as ld

    ds = (
        ld.from_items(parents, id_column="doc")
        .expand_lineage(children, name="children")
        .map_batches(cheap_map, name="cheap", batch_size=BATCH, batch_format="pyarrow")
        .reduce_lineage(assemble_lineage, name="assemble")
    )
    rows = _drain(ds.iter_batches(batch_size=None, batch_format="pyarrow"))
    report = ds.report()
    outcomes = report.parents.group_by("outcome").len().to_dicts()
    if report.parents.filter(report.parents["outcome"] != "PRESENT").height:
        raise AssertionError(f"lineage_data: parents not PRESENT: {outcomes}")
    return {
        "rows_out": rows,
        "coordinator_calls": report.coordinator_calls,
        "parents_by_outcome": {d["outcome"]: d["len"] for d in outcomes},
    }


SYSTEMS: dict[str, Callable[[list[dict[str, Any]]], dict[str, Any]]] = {
    "floor": run_floor,
    "floor_flat_map": run_floor_flat_map,
    "ray_data": run_ray_data,
    "lineage_data": run_lineage_data,
}


def _system(name: str, scale: str) -> Callable[[list[dict[str, Any]]], dict[str, Any]]:
    if name == "ray_data" and scale == "smoke":
        return lambda parents: run_ray_data(parents, SMOKE_PARTITIONS)
    return SYSTEMS[name]


def run(scale: str, out_dir: Path, *, seed: int = 0) -> dict[str, Any]:
    """Warm every system up, run them ``REPEATS`` times interleaved; write JSON; return the headline."""
    parents = make_parents(PARENTS[scale], seed)
    n_children = sum(p["n_children"] for p in parents)
    log(f"smallparents/{scale}: {len(parents)} parents, {n_children} children, map batch {BATCH}")
    if scale != "smoke":
        for name in ORDER:  # untimed
            _system(name, scale)(parents[: len(parents) // 10])
    systems: dict[str, dict[str, Any]] = {}
    for rep in range(REPEATS[scale]):
        for name in ORDER if rep % 2 == 0 else reversed(ORDER):
            start = time.perf_counter()
            extra = _system(name, scale)(parents)
            wall = time.perf_counter() - start
            expected = n_children if name.startswith("floor") else len(parents)
            if extra["rows_out"] != expected:
                raise AssertionError(f"{name}: {extra['rows_out']} rows out, expected {expected}")
            walls = [*systems.get(name, {}).get("walls_s", []), round(wall, 3)]
            best = min(walls)
            systems[name] = {
                "wall_s": best,
                "walls_s": walls,
                "children_per_s": round(n_children / best, 1),
                **extra,
            }
            log(f"smallparents/{scale} rep {rep}: {name} {wall:.2f}s")
    ld, floor, ray_data = (systems[n]["wall_s"] for n in ("lineage_data", "floor", "ray_data"))
    timed = {name: systems[name]["walls_s"] for name in ORDER}
    per_rep = {
        other: median_ratio(timed["lineage_data"], timed[other]) for other in ("floor", "ray_data")
    }
    headline = {
        "bench": "smallparents",
        "scale": scale,
        "wall_ratio_vs_floor": round(ld / floor, 4),
        "wall_ratio_vs_ray_data": round(ld / ray_data, 4),
        "median_rep_ratio_vs_floor": per_rep["floor"],
        "median_rep_ratio_vs_ray_data": per_rep["ray_data"],
        "wall_s": {name: res["wall_s"] for name, res in systems.items()},
        "parents": len(parents),
        "children": n_children,
    }
    data = {
        "bench": "smallparents",
        "scale": scale,
        "seed": seed,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "code": code_version(),
        "parents": len(parents),
        "children": n_children,
        "children_per_parent": [MIN_CHILDREN, MAX_CHILDREN],
        "map_batch_size": BATCH,
        "repeats": REPEATS[scale],
        "notes": (__doc__ or "").strip(),
        "systems": systems,
        "headline": headline,
    }
    path = results_path(out_dir, "smallparents", scale, "json", stamp())
    write_json(path, data)
    log(f"wrote {path}")
    return headline
