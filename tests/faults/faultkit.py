"""Fault-injection kit: the standard faulted pipeline, its comparable output, and process/actor killers.

Implementation-agnostic on purpose: the tests only use the public API (``ld.from_items`` ...
``iter_rows``), the processes Ray runs (``ray::<title>`` below the raylet) and Ray's actor table. They
never look inside ``lineage_data``.

The pipeline: ~48 parents with 1..20 children (deterministic, long-tailed) -> ``expand_lineage`` ->
a slow actor-pool ``map_batches`` (``concurrency=2, num_cpus=0.25``, batches of 8, 100 ms each) ->
``reduce_lineage`` (children values in ordinal order). Three parents have deterministic non-PRESENT
outcomes (a ``GroupFailure`` child, a ``RecordFailure`` child, an expansion that raises), so outcomes
are compared too. The map and the reduce append one line per call to files under ``log_dir`` so a
test can prove that the pipeline was still computing when a fault was injected.
"""

from __future__ import annotations

import hashlib
import os
import pathlib
import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

import lineage_data as ld
from bench.processes import is_internal, ray_workers, sigkill

N_PARENTS = 48
MAX_CHILDREN = 20
BATCH_SIZE = 8
MAP_STAGE = "slow"
REDUCE_STAGE = "assemble"
MAP_SLEEP_S = 0.1
REDUCE_SLEEP_S = 0.03  # assembly cost per parent: a reduce worker holds whole groups for a while

# Parents with a deterministic non-PRESENT outcome (index into the corpus).
GROUP_FAILURE_PARENT = 3  # ordinal 0 returns GroupFailure -> parent SUPPRESSED "group-bad"
RECORD_FAILURE_PARENT = 8  # ordinal 0 returns RecordFailure -> parent SUPPRESSED "record-bad"
EXPAND_FAILURE_PARENT = 17  # the expansion raises -> parent FAILED "ValueError: unreadable"

POOL_ACTOR_PREFIX = "MapWorker"  # Ray Data's actor-pool workers


# -- the corpus and the pipeline -------------------------------------------------------------------


def die(how: str) -> None:
    """Kill this process as a crashing native library would: ``segv``, ``abort``, ``exit``, ``hang``."""
    import signal

    if how == "segv":
        os.kill(os.getpid(), signal.SIGSEGV)
    elif how == "abort":
        os.abort()
    elif how == "exit":
        os._exit(3)
    elif how == "hang":
        time.sleep(3600)
    time.sleep(30)  # a signal is delivered before this returns


def child_counts(n: int = N_PARENTS, seed: int = 5) -> list[int]:
    """Long-tailed child counts in 1..MAX_CHILDREN (deterministic); both ends of the tail pinned."""
    rng = random.Random(seed)
    counts = [max(1, min(MAX_CHILDREN, int(rng.paretovariate(1.2) * 1.5))) for _ in range(n)]
    counts[0], counts[-1] = MAX_CHILDREN, 1
    for special in (GROUP_FAILURE_PARENT, RECORD_FAILURE_PARENT, EXPAND_FAILURE_PARENT):
        counts[special] = max(counts[special], 6)  # siblings to suppress
    return counts


def corpus(n: int = N_PARENTS, seed: int = 5) -> list[dict[str, Any]]:
    """Parent rows ``{"doc", "n", "salt"}``."""
    return [
        {"doc": f"p{i:03d}", "n": k, "salt": (i * 7919) % 1000}
        for i, k in enumerate(child_counts(n, seed))
    ]


def doc_name(index: int) -> str:
    """The id of the parent at ``index`` in the corpus."""
    return f"p{index:03d}"


def expand_children(row: dict[str, Any]) -> Iterable[dict[str, Any]]:
    """Ordered children with a deterministic value; one parent's expansion raises."""
    if row["doc"] == doc_name(EXPAND_FAILURE_PARENT):
        raise ValueError("unreadable")
    for i in range(int(row["n"])):
        yield {"ordinal": i, "x": (int(row["salt"]) * 31 + i * 17) % 997}


def make_slow_expand(log_dir: str) -> Callable[[dict], Iterable[dict]]:
    """:func:`expand_children` that logs ``expand-<pid>`` then works 0.2 s per parent.

    Fused after a source step, the log line tells a test that this process's source task has run.
    """

    def slow_expand_children(row: dict[str, Any]) -> Iterable[dict[str, Any]]:
        _log_line(log_dir, "expand", f"{time.time()!r} {row['doc']}")
        time.sleep(0.2)
        yield from expand_children(row)

    return slow_expand_children


def _log_line(log_dir: str, kind: str, text: str) -> None:
    path = pathlib.Path(log_dir) / f"{kind}-{os.getpid()}.log"
    with path.open("a") as f:
        f.write(text + "\n")


class SlowValue:
    """The slow pool stage: sleeps per batch, returns a deterministic value per child."""

    def __init__(self, log_dir: str, sleep_s: float = MAP_SLEEP_S) -> None:
        self._log_dir = log_dir
        self._sleep_s = sleep_s

    def __call__(self, batch: pa.Table) -> dict[str, list]:
        time.sleep(self._sleep_s)
        docs = batch["doc"].to_pylist()
        ordinals = batch["ordinal"].to_pylist()
        xs = batch["x"].to_pylist()
        out: list[Any] = []
        for d, o, x in zip(docs, ordinals, xs, strict=True):
            if d == doc_name(GROUP_FAILURE_PARENT) and o == 0:
                out.append(ld.GroupFailure("group-bad"))
            elif d == doc_name(RECORD_FAILURE_PARENT) and o == 0:
                out.append(ld.RecordFailure("record-bad"))
            else:
                out.append(hashlib.sha1(f"{d}:{o}:{x}".encode()).hexdigest()[:12])
        _log_line(self._log_dir, "map", f"{time.time()!r} {len(out)}")
        return {"doc": docs, "ordinal": ordinals, "x": xs, "value": out}


def make_assemble(log_dir: str) -> Callable[[dict, list[dict]], dict]:
    """The reduce function: children values in ordinal order; logs when each parent is reduced."""

    def assemble(parent: dict, children: list[dict]) -> dict:
        time.sleep(REDUCE_SLEEP_S)
        _log_line(log_dir, "reduce", f"{time.time()!r} {parent['doc']}")
        return {
            "doc": parent["doc"],
            "ordinals": [c["ordinal"] for c in children],
            "values": [c["value"] for c in children],
        }

    return assemble


def pipeline(
    log_dir: str | os.PathLike,
    items: list[dict] | None = None,
    *,
    source: Any = None,
    expand: Callable[[dict], Iterable[dict]] = expand_children,
    reduce_args: dict[str, Any] | None = None,
) -> Any:
    """The standard faulted pipeline (lazy); ``source`` replaces the ``from_items`` source.

    ``reduce_args``: Ray arguments of the reduce (none: it runs in the map's actors, as a reduce
    after a CPU actor pool does; ``num_cpus=1``: as tasks of its own, as after a GPU pool).
    """
    log_dir = str(log_dir)
    os.makedirs(log_dir, exist_ok=True)
    if source is None:
        source = ld.from_items(items if items is not None else corpus(), id_column="doc")
    return (
        source.expand_lineage(expand, name="children", carry=["doc"])
        .map_batches(
            SlowValue,
            name=MAP_STAGE,
            batch_size=BATCH_SIZE,
            concurrency=2,
            num_cpus=0.25,
            fn_constructor_kwargs={"log_dir": log_dir},
            batch_format="pyarrow",
        )
        .reduce_lineage(make_assemble(log_dir), name=REDUCE_STAGE, **(reduce_args or {}))
    )


def nested_corpus(n: int = 16) -> list[dict[str, Any]]:
    """Parents of the two-reduce pipeline: 1..4 sections of 1..6 lines each (deterministic)."""
    return [
        {"doc": f"n{i:02d}", "sections": 1 + (i * 5) % 4, "salt": (i * 7919) % 1000}
        for i in range(n)
    ]


def expand_sections(row: dict[str, Any]) -> Iterable[dict[str, Any]]:
    """A document's sections in order, each with its line count."""
    for s in range(int(row["sections"])):
        yield {"section": s, "lines": 1 + (int(row["salt"]) + 3 * s) % 6}


def expand_lines(row: dict[str, Any]) -> Iterable[dict[str, Any]]:
    """A section's lines in order, each with a deterministic value to map."""
    for i in range(int(row["lines"])):
        yield {"line": i, "x": (int(row["section"]) * 131 + i * 17) % 997}


class SlowLine:
    """The two-reduce pipeline's pool stage: sleeps per batch, a deterministic value per line."""

    def __init__(self, sleep_s: float = MAP_SLEEP_S) -> None:
        self._sleep_s = sleep_s

    def __call__(self, batch: pa.Table) -> dict[str, list]:
        time.sleep(self._sleep_s)
        docs, xs = batch["doc"].to_pylist(), batch["x"].to_pylist()
        values = [
            hashlib.sha1(f"{d}:{x}".encode()).hexdigest()[:8] for d, x in zip(docs, xs, strict=True)
        ]
        return {"line": batch["line"].to_pylist(), "value": values}


def join_section(parent: dict, children: list[dict]) -> dict:
    """A section's line values in order."""
    return {"section": parent["section"], "values": [c["value"] for c in children]}


def make_join_document(log_dir: str) -> Callable[[dict, list[dict]], dict]:
    """A document's sections in order; logs when each document is reduced."""

    def join_document(parent: dict, children: list[dict]) -> dict:
        _log_line(log_dir, "reduce", f"{time.time()!r} {parent['doc']}")
        return {"doc": parent["doc"], "sections": [c["values"] for c in children]}

    return join_document


def nested_pipeline(log_dir: str | os.PathLike) -> Any:
    """documents -> sections -> lines -> a slow pool map -> reduce sections -> reduce documents."""
    log_dir = str(log_dir)
    os.makedirs(log_dir, exist_ok=True)
    return (
        ld.from_items(nested_corpus(), id_column="doc")
        .expand_lineage(expand_sections, name="sections", carry=["doc"])
        .expand_lineage(expand_lines, name="lines", carry=["doc"])
        .map_batches(
            SlowLine,
            name=MAP_STAGE,
            batch_size=BATCH_SIZE,
            concurrency=2,
            num_cpus=0.25,
            batch_format="pyarrow",
        )
        .reduce_lineage(join_section, name="join_section")
        .reduce_lineage(make_join_document(log_dir), name="join_document")
    )


def nested_expected() -> dict[str, Outcome]:
    """The two-reduce pipeline's output computed in plain Python."""
    out: dict[str, Outcome] = {}
    for row in nested_corpus():
        doc = row["doc"]
        sections = tuple(
            tuple(
                hashlib.sha1(f"{doc}:{line['x']}".encode()).hexdigest()[:8]
                for line in expand_lines(section)
            )
            for section in expand_sections(row)
        )
        out[doc] = ("PRESENT", None, (("doc", doc), ("sections", sections)))
    return out


def expected(items: list[dict] | None = None) -> dict[str, Outcome]:
    """The pipeline's output computed in plain Python: what every run, faulted or not, must give."""
    out: dict[str, Outcome] = {}
    for row in items if items is not None else corpus():
        doc = row["doc"]
        if doc == doc_name(EXPAND_FAILURE_PARENT):
            out[doc] = ("FAILED", "ValueError: unreadable", ())
        elif doc == doc_name(GROUP_FAILURE_PARENT):
            out[doc] = ("SUPPRESSED", "group-bad", ())
        elif doc == doc_name(RECORD_FAILURE_PARENT):
            out[doc] = ("SUPPRESSED", "record-bad", ())
        else:
            children = list(expand_children(row))
            values = tuple(
                hashlib.sha1(f"{doc}:{c['ordinal']}:{c['x']}".encode()).hexdigest()[:12]
                for c in children
            )
            ordinals = tuple(c["ordinal"] for c in children)
            out[doc] = ("PRESENT", None, (("doc", doc), ("ordinals", ordinals), ("values", values)))
    return out


def log_times(log_dir: str | os.PathLike, kind: str) -> list[float]:
    """Sorted times of the ``map`` batch ends or ``reduce`` calls logged under ``log_dir``."""
    times = []
    for f in pathlib.Path(log_dir).glob(f"{kind}-*.log"):
        for line in f.read_text().splitlines():
            try:
                times.append(float(line.split()[0]))
            except (ValueError, IndexError):
                pass  # a line cut by a kill
    return sorted(times)


# -- comparable output -----------------------------------------------------------------------------

Outcome = tuple[str, str | None, tuple]


def comparable(rows: list[dict]) -> tuple[dict[str, Outcome], list[str]]:
    """``root -> (outcome, cause, user values)`` and the roots seen more than once."""
    counts = Counter(r["_lineage_root"] for r in rows)
    out: dict[str, Outcome] = {}
    for r in rows:
        # A column that is null in a row and one that the row's block lacks are the same to a user
        # (Ray Data does not unify column sets across blocks; DESIGN §7).
        user = tuple(
            sorted(
                (k, _freeze(v))
                for k, v in r.items()
                if not k.startswith("_lineage_") and v is not None
            )
        )
        out[r["_lineage_root"]] = (r["_lineage_outcome"], r.get("_lineage_cause"), user)
    return out, sorted(k for k, c in counts.items() if c > 1)


def _freeze(value: Any) -> Any:
    if isinstance(value, list):
        return tuple(_freeze(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, _freeze(v)) for k, v in value.items()))
    return value


def _short(outcome: Outcome) -> str:
    return repr(outcome)[:300]


def diff(reference: dict[str, Outcome], got: dict[str, Outcome], duplicated: list[str]) -> str:
    """A short description of how ``got`` differs from ``reference`` ('' when equal)."""
    problems = []
    missing = sorted(set(reference) - set(got))
    extra = sorted(set(got) - set(reference))
    changed = sorted(k for k in set(reference) & set(got) if reference[k] != got[k])
    if missing:
        problems.append(f"{len(missing)} root(s) missing {missing[:8]}")
    if duplicated:
        problems.append(f"{len(duplicated)} root(s) more than once {duplicated[:8]}")
    if extra:
        problems.append(f"{len(extra)} unknown root(s) {extra[:8]}")
    if changed:
        k = changed[0]
        problems.append(
            f"{len(changed)} root(s) with another result {changed[:8]}; "
            f"e.g. {k}: {_short(got[k])} instead of {_short(reference[k])}"
        )
    return "; ".join(problems)


# -- consuming a run with faults injected ----------------------------------------------------------


@dataclass
class RunResult:
    """What one consumption of the pipeline gave."""

    rows: list[dict] = field(default_factory=list)
    row_times: list[float] = field(default_factory=list)
    error: BaseException | None = None
    ended_at: float = 0.0


def consume(ds: Any, on_row: Callable[[int], None] | None = None) -> RunResult:
    """Iterate ``ds.iter_rows()``; ``on_row(n)`` is called after the n-th row (1-based).

    An exception escaping the consumer is recorded, not raised, so the caller can report it
    together with what the fault injection did.
    """
    result = RunResult()
    try:
        for row in ds.iter_rows():
            result.rows.append(row)
            result.row_times.append(time.time())
            if on_row is not None:
                on_row(len(result.rows))
    except Exception as exc:  # noqa: BLE001 - reported by the test
        result.error = exc
    result.ended_at = time.time()
    return result


def is_raw_ray_error(error: BaseException | None) -> bool:
    """A Ray error (``UnserializableException``, ``RayTaskError``, ...) rather than a typed one."""
    import ray

    return error is not None and (
        isinstance(error, ray.exceptions.RayError)
        or type(error).__name__ in ("UnserializableException", "RayTaskError", "RayActorError")
    )


def describe_error(error: BaseException) -> str:
    """One line: whether a raw Ray error escaped (which ``lineage_data`` must never let through)."""
    kind = (
        "a raw Ray error escaped the consumer"
        if is_raw_ray_error(error)
        else "a LineageError escaped the consumer"
        if isinstance(error, ld.LineageError)
        else "an exception escaped the consumer"
    )
    text = " ".join(str(error).split())
    return f"{kind}: {type(error).__module__}.{type(error).__name__}: {text[:600]}"


# -- processes -------------------------------------------------------------------------------------


def busy_workers(before: dict[int, str] | None = None, pattern: Any = None) -> dict[int, str]:
    """Non-idle, non-internal ``ray::`` workers now; leftovers from before the run are left out."""
    before = before or {}
    out = {}
    for pid, title in ray_workers().items():
        if is_internal(title) or before.get(pid) == title:
            continue
        if pattern is not None and not pattern.search(title):
            continue
        out[pid] = title
    return out


@dataclass
class Kill:
    """One injected fault."""

    at_row: int
    at: float
    pid: int | None
    title: str
    how: str
    confirmed: bool


class Killer(threading.Thread):
    """SIGKILLs one random busy ``ray::`` worker per armed row count (seeded), from a polling thread.

    Kill ``i`` is armed once the consumer has seen ``at_rows[i]`` rows; the thread then polls the
    process table until a candidate (busy, not Ray-internal, matching ``pattern``) exists, kills it,
    and waits for the next arming. Short-lived task workers (the reduce step) are caught this way.
    """

    def __init__(
        self,
        at_rows: Iterable[int],
        seed: int,
        pattern: Any = None,
        before: dict[int, str] | None = None,
        poll_s: float = 0.02,
    ) -> None:
        super().__init__(daemon=True, name="fault-killer")
        self.pending = sorted(at_rows)
        self.rng = random.Random(seed)
        self.pattern = pattern
        self.before = before if before is not None else ray_workers()
        self.poll_s = poll_s
        self.rows = 0
        self.kills: list[Kill] = []
        self.titles_seen: set[str] = set()
        self._stop_event = threading.Event()

    def on_row(self, n: int) -> None:
        """The consumer saw its ``n``-th row."""
        self.rows = n

    def run(self) -> None:
        while self.pending and not self._stop_event.is_set():
            if self.rows >= self.pending[0]:
                self.titles_seen.update(ray_workers().values())
                candidates = busy_workers(self.before, self.pattern)
                if candidates:
                    pid = self.rng.choice(sorted(candidates))
                    now = time.time()
                    confirmed = sigkill(pid)
                    self.kills.append(
                        Kill(self.rows, now, pid, candidates[pid], "SIGKILL", confirmed)
                    )
                    if confirmed:
                        self.pending.pop(0)
                    continue
            self._stop_event.wait(self.poll_s)

    def stop(self) -> None:
        """Stop polling (the run has ended)."""
        self._stop_event.set()
        self.join(timeout=10)

    def summary(self) -> str:
        """The kills, for assertion messages."""
        done = [f"row {k.at_row}: {k.title} (pid {k.pid}, dead={k.confirmed})" for k in self.kills]
        return (
            f"kills={done}; still pending at rows {self.pending}; "
            f"ray:: titles seen={sorted(self.titles_seen)}"
        )


# -- actors ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ActorInfo:
    """One row of Ray's actor table."""

    actor_id: str
    class_name: str
    name: str
    namespace: str | None
    pid: int
    state: str
    restarts: int


_STATE_API = [True]  # the state API needs the dashboard; the test session starts Ray without one


def actors() -> dict[str, ActorInfo]:
    """Every actor of the cluster by id (state API when the dashboard is up, else the GCS table)."""
    try:
        if not _STATE_API[0]:
            raise RuntimeError("no state API")
        from ray.util.state import list_actors

        rows = list_actors(detail=True, limit=10_000, raise_on_missing_output=False)
        return {
            a.actor_id: ActorInfo(
                a.actor_id,
                a.class_name,
                a.name or "",
                a.ray_namespace,
                int(a.pid or 0),
                a.state,
                int(getattr(a, "num_restarts", 0) or 0),
            )
            for a in rows
        }
    except Exception:  # noqa: BLE001 - no dashboard: read the GCS actor table instead
        _STATE_API[0] = False
    import ray
    import ray._private.state

    namespaces: dict[str, str] = {}
    for entry in ray.util.list_named_actors(all_namespaces=True):
        namespaces.setdefault(entry["name"], entry["namespace"])
    table = ray._private.state.actors()
    return {
        aid: ActorInfo(
            aid,
            a.get("ActorClassName", ""),
            a.get("Name", "") or "",
            namespaces.get(a.get("Name", "") or "") if a.get("Name") else None,
            int(a.get("Pid", 0) or 0),
            a.get("State", ""),
            int(a.get("NumRestarts", 0) or 0),
        )
        for aid, a in table.items()
    }


def alive_actors() -> dict[str, ActorInfo]:
    """The ALIVE actors by id."""
    return {k: a for k, a in actors().items() if a.state == "ALIVE"}


def is_helper(actor: ActorInfo) -> bool:
    """Not one of Ray Data's pool actors nor a Ray-internal actor."""
    return not actor.class_name.startswith(POOL_ACTOR_PREFIX) and not is_internal(
        "ray::" + actor.class_name
    )


def helpers_started(before: dict[str, ActorInfo]) -> dict[str, ActorInfo]:
    """Helper actors ALIVE now that were not ALIVE in ``before``."""
    return {k: a for k, a in alive_actors().items() if k not in before and is_helper(a)}


def actor_gone(actor: ActorInfo, timeout: float = 15.0) -> bool:
    """Wait until ``actor`` is dead, restarting, or alive again in another process."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        now = actors().get(actor.actor_id)
        if (
            now is None
            or now.state != "ALIVE"
            or now.pid != actor.pid
            or now.restarts > actor.restarts
        ):
            return True
        time.sleep(0.1)
    return False


def kill_actor(actor: ActorInfo, method: str) -> str:
    """Kill ``actor`` with ``ray.kill`` (no restart) or SIGKILL of its process; say how."""
    import ray

    if method == "sigkill":
        if not sigkill(actor.pid):
            raise AssertionError(f"could not SIGKILL {actor}")
        return f"SIGKILL pid {actor.pid}"
    if actor.name:
        handle = ray.get_actor(actor.name, namespace=actor.namespace)
        how = f"ray.kill(ray.get_actor({actor.name!r}, namespace={actor.namespace!r}))"
    else:  # unnamed: a handle from its id (Ray's core worker; no public API for that)
        from ray._raylet import ActorID

        worker = ray._private.worker.global_worker
        handle = worker.core_worker.get_actor_handle(ActorID.from_hex(actor.actor_id))
        how = f"ray.kill(<unnamed {actor.class_name} by id>)"
    ray.kill(handle, no_restart=True)
    return how
