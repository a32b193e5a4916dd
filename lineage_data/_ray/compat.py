"""Every private Ray symbol the library uses and every Ray object it patches: one door to Ray's insides.

Written against Ray 2.60.0 (:data:`WRITTEN_FOR`). Nothing else in ``lineage_data`` or ``connectors``
reaches into Ray's internals (``tests/unit/test_ray_compat.py`` enforces it). Each touchpoint says
what it relies on and what public API would replace it; each has a test that fails with its name
when a Ray upgrade moves it. A **required** touchpoint that moved raises :class:`RayCompatError`
naming it and both Ray versions; an **optional** one (a sizing hint, a courtesy) gives the fallback
it notes.
Symbols are looked up lazily, once: importing this module loads no ``ray.data``.
"""

from __future__ import annotations

import contextlib
import copy
import enum
import functools
import importlib
import logging
import os
import re
import sys
from collections.abc import Callable, Generator, Iterator, Sequence
from typing import Any

import pyarrow as pa
import ray
import ray.exceptions

from lineage_data.exceptions import LineageError, RayCompatError

#: The Ray release every touchpoint here was written against and tested with.
WRITTEN_FOR = "2.60.0"


def _broken(touchpoint: str, exc: BaseException) -> RayCompatError:
    return RayCompatError(
        f"Ray {ray.__version__} broke a touchpoint lineage_data uses: {touchpoint} ({exc}); it was "
        f"written against Ray {WRITTEN_FOR}, see lineage_data/_ray/compat.py"
    )


@functools.cache
def _private(module: str, name: str) -> Any:
    """``module.name`` from Ray's internals (imported on first use), or :class:`RayCompatError`."""
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:
        raise _broken(f"{module}.{name}", exc) from exc


def _optional(module: str, name: str) -> Any:
    """``module.name`` from Ray's internals, or None where it moved (an optional touchpoint)."""
    try:
        return _private(module, name)
    except RayCompatError:
        return None


# -- starting Ray (init.py) ----------------------------------------------------------------------

#: Ray 2.60 enables token authentication for a new local cluster when RAY_AUTH_MODE is unset and
#: warns so from this (private) logger; the library keeps the default and drops the warning.
AUTH_LOGGER = "ray._private.authentication.authentication_token_setup"
AUTH_WARNING = "Token authentication is enabled for this Ray cluster"


def detected_cpus() -> int:
    """The CPUs Ray would detect here (cgroup quotas honoured), else the affinity mask's.

    Optional: ``ray._private.utils.get_num_cpus``. Public replacement: none before ``ray.init``.
    """
    try:
        return int(_private("ray._private.utils", "get_num_cpus")())
    except Exception:  # noqa: BLE001 - a private helper: fall back to the affinity mask
        return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1


def _not_auth_warning(record: logging.LogRecord) -> bool:
    return not record.getMessage().startswith(AUTH_WARNING)


@contextlib.contextmanager
def default_auth_warning_dropped() -> Iterator[None]:
    """Drop Ray's "token authentication is enabled" warning while a local instance starts.

    A parse of a Ray message (:data:`AUTH_LOGGER`, its text). Public: ``RAY_AUTH_MODE``, if set.
    """
    logger = logging.getLogger(AUTH_LOGGER)
    logger.addFilter(_not_auth_warning)
    try:
        yield
    finally:
        logger.removeFilter(_not_auth_warning)


# -- why a worker died (deaths.py) ---------------------------------------------------------------
def workers_killed_for_memory(workers: set[str]) -> set[str]:
    """Those of ``workers`` (hex ids) the GCS worker table says Ray's memory monitor killed.

    Optional (failure: no cause known): ``ray._private.state.state._connect_and_get_accessor()
    .get_worker_table()``, protobufs ``WorkerTableData`` / ``WorkerExitType.NODE_OUT_OF_MEMORY``.
    Public replacement: ``ray.util.state.list_workers``, which needs the dashboard.
    """
    state = _private("ray._private.state", "state")
    common_pb2 = _private("ray.core.generated", "common_pb2")
    gcs_pb2 = _private("ray.core.generated", "gcs_pb2")
    oom = common_pb2.WorkerExitType.Value("NODE_OUT_OF_MEMORY")
    out = set()
    for raw in state._connect_and_get_accessor().get_worker_table():
        data = gcs_pb2.WorkerTableData.FromString(raw)
        worker = data.worker_address.worker_id.hex()
        if worker in workers and not data.is_alive and data.exit_type == oom:
            out.add(worker)
    return out


def node_logs_dir(*, workers_only: bool = False) -> str | None:
    """This Ray process's node's log directory (workers' ``.err`` files), or None.

    ``workers_only``: None in a driver. Optional: ``ray._private.worker.global_worker.node
    .get_logs_dir_path()``, ``global_worker.mode`` and ``WORKER_MODE``. Public: none.
    """
    worker = _optional("ray._private.worker", "global_worker")
    node = getattr(worker, "node", None)
    if workers_only and getattr(worker, "mode", None) != _optional(
        "ray._private.worker", "WORKER_MODE"
    ):
        return None
    try:
        return node.get_logs_dir_path() if node is not None else None
    except Exception:  # noqa: BLE001 - not in a Ray process with a node: nothing to read
        return None


# -- Ray's key-value store (typestore.py) ----------------------------------------------------------
# Required: ``ray.experimental.internal_kv`` (``_internal_kv_*``, the GCS client's
# ``internal_kv_multi_get``). Public replacement: none (a named actor costs a process and a round
# trip per call, which a flat plan avoids).

_KV = "ray.experimental.internal_kv"


def kv_multi_get(keys: list[bytes], namespace: str) -> dict[bytes, bytes]:
    """The values of those ``keys`` that have one, in one call to the GCS."""
    client = _private(_KV, "internal_kv_get_gcs_client")()
    return dict(client.internal_kv_multi_get(keys, namespace.encode()))


def kv_put_new(key: bytes, value: str, namespace: str) -> bool:
    """Put ``value`` unless ``key`` has one already; True when it had (nothing was written)."""
    return bool(_private(_KV, "_internal_kv_put")(key, value, overwrite=False, namespace=namespace))


def kv_get(key: bytes, namespace: str) -> bytes | None:
    """The value of ``key``, or None."""
    value: bytes | None = _private(_KV, "_internal_kv_get")(key, namespace=namespace)
    return value


def kv_delete_prefix(prefix: str, namespace: str) -> None:
    """Delete every key starting with ``prefix`` (nothing once Ray is shut down)."""
    if ray.is_initialized() and _private(_KV, "_internal_kv_initialized")():
        _private(_KV, "_internal_kv_del")(prefix, del_by_prefix=True, namespace=namespace)


# -- lowering a plan (lower.py) --------------------------------------------------------------------
def compute_strategy(fn: Any, constructor_args: Any, compute: Any, concurrency: Any) -> Any:
    """The compute strategy Ray Data itself chooses for ``map_batches(fn, ...)``.

    Required: ``ray.data._internal.util.get_compute_strategy``. Public replacement: none.
    """
    get = _private("ray.data._internal.util", "get_compute_strategy")
    return get(fn, fn_constructor_args=constructor_args, compute=compute, concurrency=concurrency)


def with_true_threads(compute: Any, threads: bool) -> Any:
    """A copy of an ``ActorPoolStrategy`` with ``enable_true_multi_threading`` set to ``threads``.

    Required: the private ``_enable_true_multi_threading``. Public replacement: a new
    ``ActorPoolStrategy``, were every field of the user's strategy readable.
    """
    compute = copy.copy(compute)
    compute._enable_true_multi_threading = threads
    if compute.enable_true_multi_threading != threads:
        raise _broken(
            "ActorPoolStrategy._enable_true_multi_threading",
            AttributeError("setting it does not set enable_true_multi_threading"),
        )
    return compute


def deep_copy(ds: Any) -> Any:
    """A copy of ``ds`` with its own ``DataContext`` (settings on it never reach ``ds``'s).

    Required: ``Dataset.copy(ds, _deep_copy=True)``, a private keyword. Public replacement: none.
    """
    try:
        return ray.data.Dataset.copy(ds, _deep_copy=True)
    except TypeError as exc:  # the keyword is gone
        raise _broken("ray.data.Dataset.copy(_deep_copy=True)", exc) from exc


def in_memory_blocks(ds: Any) -> list[Any] | None:
    """The block metadata of a dataset held in memory (``from_items``, ``from_arrow``, kept).

    Optional ([] for a lazy read): ``ds._logical_plan.dag.input_data``'s ``metadata``. Public: none.
    """
    try:
        bundles = getattr(ds._logical_plan.dag, "input_data", None) or ()
        return [meta for bundle in bundles for meta in bundle.metadata]
    except AttributeError:
        return None


def map_task_name() -> str | None:
    """``"<operator>#<task index>"`` of the Ray Data map task running here, or None outside one.

    The same for a retried task. Optional: ``ray.data._internal.execution.interfaces.task_context.
    TaskContext.get_current()``. Public replacement: none (a task id changes on a retry).
    """
    cls = _optional("ray.data._internal.execution.interfaces.task_context", "TaskContext")
    context = cls.get_current() if cls is not None else None
    return f"{context.op_name}#{context.task_idx}" if context is not None else None


def combine_chunks(table: pa.Table) -> pa.Table:
    """``table`` with one chunk per column, Ray's tensor extension columns joined too.

    Optional (else pyarrow's): ``ray.data._internal.arrow_ops.transform_pyarrow.combine_chunks``.
    Public: none.
    """
    combine = _optional("ray.data._internal.arrow_ops.transform_pyarrow", "combine_chunks")
    return combine(table) if combine is not None else table.combine_chunks()


# -- column verbs (column_verbs.py) ----------------------------------------------------------------
def eval_expression(expr: Any, batch: pa.Table) -> Any:
    """A Ray Data expression's values over ``batch`` (Ray's own evaluator).

    Required: ``ray.data._internal.planner.plan_expression.expression_evaluator.eval_expr``.
    Public: none.
    """
    module = "ray.data._internal.planner.plan_expression.expression_evaluator"
    return _private(module, "eval_expr")(expr, batch)


# -- execution and writes (execute.py, rolled.py, sinks.py) --------------------------------------
def known_row_count(ds: Any) -> int | None:
    """The rows ``ds`` will give, where Ray knows without running anything (None: unknown).

    Optional: ``Dataset._meta_count()``. Public replacement: none (``count()`` may execute).
    """
    try:
        rows = ds._meta_count()
    except Exception:  # noqa: BLE001 - a sizing hint only
        return None
    return rows if isinstance(rows, int) else None


def output_blocks(ds: Any) -> Generator[tuple[Any, int, int], None, None]:
    """Execute ``ds``: each output block as ``(object ref, rows, bytes)``, no row on the driver.

    Closing the iterator stops Ray Data's executor. Required: the DeveloperAPI
    ``Dataset.iter_internal_ref_bundles()``, its blocks' ``ref`` and ``metadata``. Public: none.
    """
    try:
        bundles = ds.iter_internal_ref_bundles()
    except AttributeError as exc:
        raise _broken("ray.data.Dataset.iter_internal_ref_bundles", exc) from exc
    return _blocks_of(bundles)


def _blocks_of(bundles: Iterator[Any]) -> Generator[tuple[Any, int, int], None, None]:
    try:
        for bundle in bundles:
            for entry in bundle.blocks:
                meta = entry.metadata
                yield entry.ref, int(meta.num_rows or 0), int(meta.size_bytes or 0)
    except GeneratorExit:  # closed before its end: stop the stream
        close = getattr(bundles, "close", None)
        if close is not None:
            close()
        raise


def write_task_context(index: int, op_name: str) -> Any:
    """The context a Ray Data write task hands ``Datasink.write`` (for a write task of our own).

    Required: ``ray.data._internal.execution.interfaces.task_context.TaskContext(...)``. Public:
    none.
    """
    cls = _private("ray.data._internal.execution.interfaces.task_context", "TaskContext")
    return cls(task_idx=index, op_name=op_name)


def on_execution_end(
    ds: Any, before_start: Callable[[], None], after_end: Callable[[], None]
) -> None:
    """``before_start()`` as ``ds`` (or one derived from it) starts executing, then ``after_end()``.

    Either way it ends. Required: ``ray.data._internal.execution.execution_callback.
    ExecutionCallback`` on ``DataContext.custom_execution_callback_classes``. Public: none.
    """
    base = _private("ray.data._internal.execution.execution_callback", "ExecutionCallback")

    class LineageCallback(base):  # type: ignore[valid-type,misc]
        def before_execution_starts(self, executor: Any) -> None:
            before_start()

        def after_execution_succeeds(self, executor: Any) -> None:
            after_end()

        def after_execution_fails(self, executor: Any, error: Exception) -> None:
            after_end()

    ds.context.custom_execution_callback_classes = [
        *ds.context.custom_execution_callback_classes,
        LineageCallback,
    ]


def start_file_sink(datasink: Any) -> bool | None:
    """For one of Ray's file sinks: run its ``on_write_start`` now; True when Ray skips the write.

    None for any other sink (Ray prepares a file sink itself, but not through our wrapper).
    Required: ``ray.data.datasource.file_datasink._FileDatasink`` and ``_skip_write``. Public: none.
    """
    file_sink = _private("ray.data.datasource.file_datasink", "_FileDatasink")
    if not isinstance(datasink, file_sink):
        return None
    datasink.on_write_start()
    return bool(getattr(datasink, "_skip_write", False))


def wrap_write_datasink(ds: Any, wrap: Callable[[Callable[..., Any]], Callable[..., Any]]) -> Any:
    """``ds`` whose ``write_datasink`` is ``wrap(the original)``, on this dataset object only.

    A patch of a Ray object: every ``Dataset.write_*`` of Ray 2.60 ends in it. Public: none.
    """
    ds.write_datasink = wrap(ds.write_datasink)
    return ds


# -- helper actors (actors.py) -------------------------------------------------------------------
def actor_ready(handle: Any) -> Any:
    """An object ref that resolves once the actor behind ``handle`` is up (its constructor ran).

    Required: the private ``__ray_ready__`` of every actor. Public: a method of our own.
    """
    try:
        return handle.__ray_ready__.remote()
    except AttributeError as exc:
        raise _broken("ActorHandle.__ray_ready__", exc) from exc


# -- progress on a terminal (progress.py) --------------------------------------------------------
@contextlib.contextmanager
def ray_bars_hidden() -> Iterator[None]:
    """Ray's ``tqdm_ray`` bars off the terminal for one write (as Ray does around ``print``).

    Required: ``ray.experimental.tqdm_ray.instance()``, its ``hide_bars`` / ``unhide_bars``. Public:
    none.
    """
    manager = _private("ray.experimental.tqdm_ray", "instance")()
    manager.hide_bars()
    try:
        yield
    finally:
        manager.unhide_bars()


def wrap_ray_console_emit(
    wrap: Callable[[Callable[[logging.LogRecord], None]], Callable[[logging.LogRecord], None]],
) -> Callable[[], None]:
    """Wrap the ``emit`` of Ray's terminal handlers (of ``ray``, ``ray.data``); returns the undo.

    A patch of Ray's objects (``emit`` set on the instance). Public replacement: none.
    """
    wrapped: list[logging.Handler] = []
    for name in ("ray", "ray.data"):
        for handler in logging.getLogger(name).handlers:
            stream = getattr(handler, "stream", None)
            if stream in (sys.stderr, sys.stdout) and "emit" not in vars(handler):
                wrapped.append(handler)
                handler.emit = wrap(handler.emit)  # type: ignore[method-assign,assignment]

    def undo() -> None:
        for handler in wrapped:
            del handler.emit  # the class's own again
        wrapped.clear()

    return undo


# -- bench (bench/documents.py) ------------------------------------------------------------------
def object_store_stats() -> tuple[int, int]:
    """Bytes in use in the object store and bytes spilled so far, cluster-wide (for bench/).

    Required: ``ray._private.internal_api.get_memory_info_reply(state).store_stats``. Public: the
    ``ray memory --stats-only`` command's text.
    """
    reply = _private("ray._private.internal_api", "get_memory_info_reply")
    stats = reply(_private("ray._private.state", "state")).store_stats
    return int(stats.object_store_bytes_used), int(stats.spilled_bytes_total)


# -- classifying Ray's failures (execute.py) -------------------------------------------------------
class Failure(enum.Enum):
    """What a failure that ended a run is, as far as the consumer should see it."""

    OURS = "ours"  #: one of the library's errors, raised in a worker (``RayTaskError.cause``)
    CONSTRUCTOR = "constructor"  #: a callable class's constructor raised (its actor never started)
    RAY = "ray"  #: Ray itself failed (a worker, actor, object or node lost; out of memory ...)
    OTHER = "other"  #: not Ray's: a user error Ray passed on as itself, or one of ours


def classify(exc: BaseException) -> Failure:
    """What ``exc``, raised out of a Ray Data execution, is: by Ray's exception types.

    With ``raise_original_map_exception`` a user's error arrives unwrapped (OTHER); a
    ``RayTaskError`` wraps one of ours (OURS) or a system failure (RAY); a ``RayActorError`` with
    ``actor_init_failed``, wrapped or not, is a constructor that raised (CONSTRUCTOR).
    """
    cause = getattr(exc, "cause", None) if isinstance(exc, ray.exceptions.RayTaskError) else None
    # (first: Ray's wrapper of one of ours is also an instance of its class)
    if isinstance(cause, LineageError):
        return Failure.OURS
    if isinstance(exc, LineageError) or not isinstance(exc, Exception):
        return Failure.OTHER
    if any(
        isinstance(e, ray.exceptions.RayActorError) and e.actor_init_failed for e in (exc, cause)
    ):
        return Failure.CONSTRUCTOR
    # Ray Data's errors outside ray.exceptions (imported here: only where a run failed)
    from ray.data.exceptions import ExecutionTimeoutError, SystemException

    if isinstance(exc, ray.exceptions.RayError | SystemException | ExecutionTimeoutError):
        return Failure.RAY
    # Ray raises a few errors outside both trees (internal ones of Ray Data, of ray.util): they
    # share no base class, only the package that defines them.
    return Failure.RAY if type(exc).__module__.startswith("ray.") else Failure.OTHER


# "SomeError: message" as the last line of a Python traceback
_EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt)\b(: .*)?$")


def constructor_raised(exc: BaseException) -> str:
    """``"Type: message"`` of what a constructor raised, from a :data:`Failure.CONSTRUCTOR` error.

    A parse of a Ray message: the constructor's error is only its traceback's text in the error.
    """
    text = str(exc)
    raised = [ln.strip() for ln in text.splitlines() if _EXCEPTION_LINE.match(ln.strip())]
    return raised[-1] if raised else text.strip().splitlines()[0]


def stage_named(exc: BaseException, names: Sequence[str]) -> str | None:
    """The last of ``names`` that Ray's message of ``exc`` names as its operator, or None.

    A parse of a Ray message: ``MapBatches(<name>)``, ``MapWorker(MapBatches(<name>))``, ``_<name>``
    (a task).
    """
    text = str(exc)
    return next((n for n in reversed(names) if f"({n})" in text or f"_{n}" in text), None)


def first_line(exc: BaseException) -> str:
    """The first line of Ray's message of ``exc``, or its type's name when it has none."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
