"""``server``: a page stage that calls a model server over HTTP, against the loopback chat server.

Documents with long-tailed page counts; every page is one chat-completions request
(:class:`lineage_data.connectors.openai.OpenAIChatStage`) to :class:`lineage_data.connectors.testing.chat_server.ChatServer`
in its own process, which answers each request after a fixed ``LATENCY_S`` and serves at most
``SERVER_CAP`` requests at once (the rest queue, as a model server's scheduler does). The stage runs
on a pool of ``ACTORS`` actors with ``MAX_CONCURRENCY`` requests in flight each (``CALLS_PER_ACTOR``
batches at once per actor, Ray Data's ``max_concurrent_calls_per_actor``), so the ideal request
rate is ``min(SERVER_CAP, ACTORS * MAX_CONCURRENCY) / LATENCY_S``. Two systems, one Ray instance, the
same stage and server:

- ``lineage_data``: ``expand_lineage -> map_batches(OpenAIChatStage) -> reduce_lineage``;
- ``ray_data``: Ray Data's natural pipeline ``flat_map -> map_batches(OpenAIChatStage) ->
  groupby(doc).map_groups`` (sort by page, assemble).

Each system is drained on the driver; every document's replies are checked (one per page, in page
order). ``rate_vs_ideal``: requests / (the server's last answer - its first request) over the
ideal rate, for lineage_data; ``wall_ratio_vs_ray_data``: the two walls (best of ``REPEATS``).
"""

from __future__ import annotations

import functools
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from bench.common import SMOKE_PARTITIONS, code_version, log, stamp
from bench.measure import median_ratio, results_path, write_json

LATENCY_S = 0.2
SERVER_CAP = 64
ACTORS = 4
MAX_CONCURRENCY = 16
BATCH = 64  # rows per call of the stage: four rounds of its 16 requests
# Batches in flight per actor (the stage's __call__ is a coroutine): the next batch's requests start
# while the previous batch's last ones are out, within the actor's MAX_CONCURRENCY. The same in both.
CALLS_PER_ACTOR = 2
DOCS = {"smoke": 12, "small": 150, "full": 1000}
REPEATS = {"smoke": 1, "small": 2, "full": 1}
ORDER = ("ray_data", "lineage_data")


def make_docs(n: int, seed: int) -> list[dict[str, Any]]:
    """``n`` documents with 1..200 pages, long-tailed (a Pareto draw, seeded)."""
    rng = np.random.default_rng(seed)
    pages = np.clip((rng.pareto(1.3, size=n) + 1) * 6, 1, 200).astype(int)
    return [{"doc": f"doc-{i:05d}", "n_pages": int(k)} for i, k in enumerate(pages)]


def pages(row: dict[str, Any]) -> list[dict[str, Any]]:
    """A document's pages, in order; each one prompt."""
    return [
        {"doc": row["doc"], "page": p, "text": f"Summarize page {p} of {row['doc']}."}
        for p in range(int(row["n_pages"]))
    ]


def assemble_lineage(parent: dict[str, Any], kids: list[dict[str, Any]]) -> dict[str, Any]:
    """The document's row: its replies in page order."""
    return {"doc": parent["doc"], "replies": [k["generation"] for k in kids]}


def assemble_group(group: pa.Table) -> pa.Table:
    """``groupby(doc).map_groups``: sort by page, then assemble."""
    group = group.sort_by("page")
    doc = group["doc"][0].as_py()
    return pa.Table.from_pylist([{"doc": doc, "replies": group["generation"].to_pylist()}])


def _stage_args(base_url: str, keep: tuple[str, ...] = ()) -> dict[str, Any]:
    from ray.data import ActorPoolStrategy

    from lineage_data.connectors.openai import OpenAIChatStage

    return {
        "fn": OpenAIChatStage,
        "batch_size": BATCH,
        "num_cpus": 0.25,
        "compute": ActorPoolStrategy(size=ACTORS, max_concurrent_calls_per_actor=CALLS_PER_ACTOR),
        "fn_constructor_kwargs": {
            "base_url": base_url,
            "model": "echo",
            "max_concurrency": MAX_CONCURRENCY,
            "sampling_params": {"max_tokens": 64},
            "keep_columns": keep,
        },
    }


def run_lineage_data(docs: list[dict[str, Any]], base_url: str) -> list[dict[str, Any]]:
    """expand_lineage -> map_batches(OpenAIChatStage) -> reduce_lineage."""
    import lineage_data as ld

    args = _stage_args(base_url)
    ds = (
        ld.from_items(docs, id_column="doc")
        .expand_lineage(pages, carry=["doc"], name="pages")
        .map_batches(args.pop("fn"), name="chat", **args)
        .reduce_lineage(assemble_lineage, name="assemble")
    )
    rows = ds.take_all()
    if bad := [r for r in rows if r["_lineage_outcome"] != "PRESENT"]:
        raise AssertionError(f"lineage_data: {len(bad)} documents not PRESENT: {bad[:2]}")
    return rows


def run_ray_data(
    docs: list[dict[str, Any]], base_url: str, partitions: int | None = None
) -> list[dict[str, Any]]:
    """flat_map -> map_batches(OpenAIChatStage) -> groupby(doc).map_groups (``partitions``: smoke)."""
    import ray

    args = _stage_args(base_url, keep=("doc", "page"))
    ds = ray.data.from_items(docs).flat_map(pages)
    ds = ds.map_batches(args.pop("fn"), batch_format="pyarrow", **args)
    # map_batches keeps only what the stage returns: it passes doc and page through for the groupby
    ds = ds.groupby("doc", num_partitions=partitions).map_groups(
        assemble_group, batch_format="pyarrow"
    )
    return ds.take_all()


def _check(rows: list[dict[str, Any]], docs: list[dict[str, Any]], name: str) -> None:
    from lineage_data.connectors.testing.chat_server import reply_text

    by_doc = {r["doc"]: list(r["replies"]) for r in rows}
    if len(by_doc) != len(docs) or len(rows) != len(docs):
        raise AssertionError(f"{name}: {len(rows)} rows for {len(docs)} documents")
    for doc in docs:
        want = [reply_text(p["text"])[:64] for p in pages(doc)]
        if by_doc[doc["doc"]] != want:
            raise AssertionError(f"{name}: wrong replies for {doc['doc']}")


SYSTEMS = {"lineage_data": run_lineage_data, "ray_data": run_ray_data}


def _system(name: str, scale: str) -> Any:
    """The system's runner; at smoke scale Ray Data's groupby has a few partitions (as longtail)."""
    if name == "ray_data" and scale == "smoke":
        return functools.partial(run_ray_data, partitions=SMOKE_PARTITIONS)
    return SYSTEMS[name]


def run(scale: str, out_dir: Path, *, seed: int = 0) -> dict[str, Any]:
    """Run both systems against one server ``REPEATS`` times, interleaved; write JSON; headline."""
    from lineage_data.connectors.testing.chat_server import ChatServer

    docs = make_docs(DOCS[scale], seed)
    requests = sum(d["n_pages"] for d in docs)
    ideal = min(SERVER_CAP, ACTORS * MAX_CONCURRENCY) / LATENCY_S
    log(f"server/{scale}: {len(docs)} documents, {requests} requests, ideal {ideal:.0f} req/s")
    systems: dict[str, dict[str, Any]] = {}
    with ChatServer(latency_s=LATENCY_S, max_concurrency=SERVER_CAP) as server:
        if scale != "smoke":
            for name in ORDER:  # untimed: workers and imports warm on both sides
                SYSTEMS[name](docs[: max(2, len(docs) // 10)], server.base_url)
        for rep in range(REPEATS[scale]):
            for name in ORDER:
                server.stats(reset=True)
                start = time.perf_counter()
                rows = _system(name, scale)(docs, server.base_url)
                wall = time.perf_counter() - start
                stats = server.stats()
                _check(rows, docs, name)
                if stats["requests"] != requests:
                    raise AssertionError(f"{name}: {stats['requests']} requests, not {requests}")
                phase = stats["last_at"] - stats["first_at"]
                rate = requests / phase
                previous = systems.get(name, {})
                walls = [*previous.get("walls_s", []), round(wall, 3)]
                rates = [*previous.get("rates_per_s", []), round(rate, 1)]
                systems[name] = {
                    "wall_s": min(walls),
                    "walls_s": walls,
                    "rates_per_s": rates,
                    "rate_per_s": max(rates),
                    "max_in_flight": max(previous.get("max_in_flight", 0), stats["max_in_flight"]),
                }
                log(
                    f"server/{scale} rep {rep}: {name} {wall:.2f}s, {rate:.0f} req/s over "
                    f"{phase:.2f}s of requests, peak {stats['max_in_flight']} in flight"
                )
    ld, ray_data = systems["lineage_data"], systems["ray_data"]
    headline = {
        "bench": "server",
        "scale": scale,
        "rate_vs_ideal": round(ld["rate_per_s"] / ideal, 4),
        "wall_ratio_vs_ray_data": round(ld["wall_s"] / ray_data["wall_s"], 4),
        "median_rep_ratio_vs_ray_data": median_ratio(ld["walls_s"], ray_data["walls_s"]),
        "ray_data_rate_vs_ideal": round(ray_data["rate_per_s"] / ideal, 4),
        "wall_s": {name: res["wall_s"] for name, res in systems.items()},
        "requests": requests,
        "ideal_rate_per_s": ideal,
    }
    data = {
        "bench": "server",
        "scale": scale,
        "seed": seed,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "code": code_version(),
        "documents": len(docs),
        "requests": requests,
        "latency_s": LATENCY_S,
        "server_cap": SERVER_CAP,
        "actors": ACTORS,
        "max_concurrency": MAX_CONCURRENCY,
        "batch_size": BATCH,
        "calls_per_actor": CALLS_PER_ACTOR,
        "repeats": REPEATS[scale],
        "notes": (__doc__ or "").strip(),
        "systems": systems,
        "headline": headline,
    }
    path = results_path(out_dir, "server", scale, "json", stamp())
    write_json(path, data)
    log(f"wrote {path}")
    return headline
