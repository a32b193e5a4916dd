"""The benchmark workload: a long-tailed corpus, a cost model, and the stage functions every system runs.

Every system in one invocation runs the same functions below with the same :class:`CostModel`, so the
only thing that differs between systems is how the work is scheduled and regrouped.

Costs are ``time.sleep`` (not busy loops): the simulated GPUs are logical Ray resources and the machine
may have only two cores, so sleeping keeps the CPU free for the runtime being measured.

Every simulated GPU batch appends one line to a small per-actor file under ``timeline_dir``::

    B <tab> system <tab> actor <tab> start <tab> end <tab> rows

and, for the poison benchmark, one line per row of a watched parent that the function was handed::

    S <tab> system <tab> doc <tab> ordinal
"""

from __future__ import annotations

import math
import os
import time
import uuid
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import pyarrow as pa

MIN_CHILDREN = 1
MAX_CHILDREN = 427
MEAN_CHILDREN = 47.0


@dataclass(frozen=True)
class CostModel:
    """Simulated costs, in seconds.

    Attributes:
        expand_s_per_child: CPU cost of producing one child (rendering a page), per child.
        gpu_s_per_batch: fixed cost of one GPU batch (kernel launch, weights traffic).
        gpu_s_per_item: GPU cost per row in a batch.
        reduce_s_per_parent: fixed cost of assembling one parent from its children.
        reduce_s_per_child: assembly cost per child.
        batch_size: rows per GPU batch (the cap).
        gpus: number of simulated GPUs (actors with ``num_gpus=1``).
        text_bytes: bytes of output text per child (what is written to Parquet).
    """

    expand_s_per_child: float = 0.0005
    gpu_s_per_batch: float = 0.040
    gpu_s_per_item: float = 0.002
    reduce_s_per_parent: float = 0.002
    reduce_s_per_child: float = 0.00002
    batch_size: int = 32
    gpus: int = 4
    text_bytes: int = 200

    def gpu_batch_s(self, rows: int) -> float:
        """Seconds one GPU batch of ``rows`` rows costs."""
        return self.gpu_s_per_batch + self.gpu_s_per_item * rows

    def ideal_gpu_work_s(self, children: int) -> float:
        """GPU seconds for ``children`` rows in full batches (the least any schedule can spend)."""
        return (
            math.ceil(children / self.batch_size) * self.gpu_s_per_batch
            + children * self.gpu_s_per_item
        )

    def as_dict(self) -> dict[str, Any]:
        """Plain data, for JSON and for shipping to workers."""
        return asdict(self)


def _clipped_lognormal(rng: np.random.Generator, mu: float, sigma: float, n: int) -> np.ndarray:
    draws = np.exp(rng.normal(mu, sigma, size=n))
    return np.clip(np.rint(draws), MIN_CHILDREN, MAX_CHILDREN).astype(int)


def _calibrate_mu(sigma: float, mean: float) -> float:
    """The lognormal ``mu`` whose rounded, clipped draws average ``mean`` (bisection, fixed sample)."""
    rng = np.random.default_rng(0)
    z = rng.normal(0.0, 1.0, size=200_000)
    lo, hi = 0.0, 6.0
    for _ in range(50):
        mid = (lo + hi) / 2
        m = np.clip(np.rint(np.exp(mid + sigma * z)), MIN_CHILDREN, MAX_CHILDREN).mean()
        lo, hi = (mid, hi) if m < mean else (lo, mid)
    return (lo + hi) / 2


def child_counts(
    n_parents: int, *, seed: int = 0, sigma: float = 1.2, mean: float = MEAN_CHILDREN
) -> list[int]:
    """Child counts of ``n_parents`` parents: a clipped lognormal long tail over 1..427, mean about 47.

    Like a PDF corpus: most documents have a few pages, a few have hundreds. The largest parent is set to
    427 children so every corpus (even a small one) has the long tail's worst case in it.

    Args:
        n_parents: number of parents.
        seed: seeds the draw; the same seed gives the same corpus.
        sigma: the lognormal's shape (larger = longer tail).
        mean: the target mean of the clipped distribution.

    Returns:
        One count per parent, in corpus order.
    """
    mu = _calibrate_mu(sigma, mean)
    rng = np.random.default_rng(seed)
    counts = _clipped_lognormal(rng, mu, sigma, n_parents)
    if n_parents:
        counts[int(np.argmax(counts))] = MAX_CHILDREN
    return [int(c) for c in counts]


def make_corpus(n_parents: int, *, seed: int = 0) -> list[dict[str, Any]]:
    """Parent rows ``{"doc": id, "n_children": k}`` with long-tailed ``k``."""
    return [
        {"doc": f"doc-{i:05d}", "n_children": k}
        for i, k in enumerate(child_counts(n_parents, seed=seed))
    ]


def poisoned_docs(corpus: list[dict[str, Any]], frac: float = 0.05) -> list[str]:
    """The largest ``frac`` of parents (at least one), by child count; ties broken by id."""
    k = max(1, round(len(corpus) * frac))
    ranked = sorted(corpus, key=lambda r: (-r["n_children"], r["doc"]))
    return [r["doc"] for r in ranked[:k]]


# -- stage functions (module level, so Ray pickles them by reference) ------------------------------


def _sleep(seconds: float) -> None:
    if seconds > 0:
        time.sleep(seconds)


def expand_children(row: dict[str, Any], *, cost: dict[str, Any]) -> list[dict[str, Any]]:
    """One parent -> its ordered children (the CPU 'render' cost is paid per child)."""
    n = int(row["n_children"])
    _sleep(cost["expand_s_per_child"] * n)
    return [{"doc": row["doc"], "ordinal": i} for i in range(n)]


def expand_children_iter(row: dict[str, Any], *, cost: dict[str, Any]) -> Any:
    """Generator form of :func:`expand_children` (children are yielded as they are 'rendered')."""
    per_child = cost["expand_s_per_child"]
    for i in range(int(row["n_children"])):
        _sleep(per_child)
        yield {"doc": row["doc"], "ordinal": i}


def _text(doc: str, ordinal: int, nbytes: int) -> str:
    head = f"{doc}:{ordinal}:"
    return head + "x" * max(0, nbytes - len(head))


class _Timeline:
    """A per-actor append-only file of GPU batch intervals."""

    def __init__(self, timeline_dir: str, system: str) -> None:
        self.system = system
        self.actor = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
        os.makedirs(timeline_dir, exist_ok=True)
        self._file = open(  # noqa: SIM115 - kept open for the actor's life, line-buffered
            os.path.join(timeline_dir, f"{system}-{self.actor}.tsv"), "a", buffering=1
        )

    def batch(self, start: float, end: float, rows: int) -> None:
        self._file.write(f"B\t{self.system}\t{self.actor}\t{start!r}\t{end!r}\t{rows}\n")

    def seen(self, doc: str, ordinal: int) -> None:
        self._file.write(f"S\t{self.system}\t{doc}\t{ordinal}\n")


class SimGPU:
    """The simulated GPU stage: ``fixed + per_item * rows`` seconds per batch, then one text per row.

    Args:
        cost: :meth:`CostModel.as_dict`.
        timeline_dir: where the per-actor timeline file goes.
        system: the system's name (tags the timeline).
        poison: parents whose ordinal 0 fails; rows of these parents that the function sees are logged.
        failure: how a poisoned row reports: ``"group"`` returns ``ld.GroupFailure("poison")`` in the text
            column (lineage_data); ``"flag"`` sets a ``poisoned`` column (plain Ray Data filters later);
            ``"crash"`` kills the process with SIGSEGV (``poison --crash``).
    """

    def __init__(
        self,
        cost: dict[str, Any],
        timeline_dir: str,
        system: str,
        poison: list[str] | None = None,
        failure: str = "flag",
    ) -> None:
        self._cost = cost
        self._timeline = _Timeline(timeline_dir, system)
        self._poison = frozenset(poison or ())
        self._failure = failure

    def __call__(self, batch: pa.Table) -> dict[str, list]:
        start = time.time()
        rows = batch.num_rows
        _sleep(self._cost["gpu_s_per_batch"] + self._cost["gpu_s_per_item"] * rows)
        docs = batch["doc"].to_pylist()
        ordinals = batch["ordinal"].to_pylist()
        nbytes = self._cost["text_bytes"]
        texts: list[Any] = [_text(d, o, nbytes) for d, o in zip(docs, ordinals, strict=True)]
        out: dict[str, list] = {"doc": docs, "ordinal": ordinals, "text": texts}
        if self._poison:
            flags = [False] * rows
            for i, (d, o) in enumerate(zip(docs, ordinals, strict=True)):
                if d in self._poison:
                    self._timeline.seen(d, o)
                    if o == 0:
                        flags[i] = True
            if self._failure == "crash" and any(flags):
                # a crashing native decoder: the process dies, every time it sees this row
                import signal

                os.kill(os.getpid(), signal.SIGSEGV)
                time.sleep(
                    60
                )  # a native crash never returns; the signal may land on another thread
            if self._failure == "group":
                import lineage_data as ld

                texts[:] = [
                    ld.GroupFailure("poison") if f else t for f, t in zip(flags, texts, strict=True)
                ]
            else:
                out["poisoned"] = flags
        self._timeline.batch(start, time.time(), rows)
        return out


def assemble(
    doc: str, ordinals: list[int], texts: list[str], cost: dict[str, Any]
) -> dict[str, Any]:
    """The per-parent reduce: check order, pay the assembly cost, build the parent's training row."""
    if ordinals != list(range(len(ordinals))):
        raise AssertionError(f"{doc}: children out of order or missing: {ordinals[:10]}...")
    _sleep(cost["reduce_s_per_parent"] + cost["reduce_s_per_child"] * len(ordinals))
    return {"doc": doc, "n_children": len(ordinals), "text": "\n".join(texts)}


def assemble_lineage(
    parent: dict[str, Any], children: list[dict[str, Any]], *, cost: dict[str, Any]
) -> dict:
    """``reduce_lineage`` function: children arrive in ordinal order."""
    return assemble(
        parent["doc"], [c["ordinal"] for c in children], [c["text"] for c in children], cost
    )


def assemble_group(group: pa.Table, *, cost: dict[str, Any]) -> pa.Table:
    """``groupby(doc).map_groups`` function: sort by ordinal, then assemble (and flag poisoned groups)."""
    group = group.sort_by("ordinal")
    row = assemble(
        group["doc"][0].as_py(), group["ordinal"].to_pylist(), group["text"].to_pylist(), cost
    )
    row["failed"] = (
        bool(any(group["poisoned"].to_pylist())) if "poisoned" in group.column_names else False
    )
    return pa.Table.from_pylist([row])


class PerDocument:
    """One actor handles a whole parent: expand, GPU batches of that parent only, assemble.

    This is the 'no cross-parent batching' baseline: small parents waste the GPU's fixed batch cost.
    """

    def __init__(self, cost: dict[str, Any], timeline_dir: str, system: str) -> None:
        self._cost = cost
        self._timeline = _Timeline(timeline_dir, system)

    def __call__(self, batch: pa.Table) -> pa.Table:
        cost = self._cost
        out = []
        for row in batch.to_pylist():
            children = expand_children(row, cost=cost)
            texts: list[str] = []
            size = int(cost["batch_size"])
            for lo in range(0, len(children), size):
                chunk = children[lo : lo + size]
                start = time.time()
                _sleep(cost["gpu_s_per_batch"] + cost["gpu_s_per_item"] * len(chunk))
                texts.extend(_text(c["doc"], c["ordinal"], cost["text_bytes"]) for c in chunk)
                self._timeline.batch(start, time.time(), len(chunk))
            out.append(assemble(row["doc"], [c["ordinal"] for c in children], texts, cost))
        return pa.Table.from_pylist(out)


def identity(batch: Any) -> Any:
    """The identity UDF of the overhead benchmark."""
    return batch
