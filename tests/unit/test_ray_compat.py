"""Every touchpoint of :mod:`lineage_data._ray.compat` still holds in the installed Ray (no Ray started).

One test per touchpoint, named after it: a Ray upgrade that moves a private symbol fails here, with the
touchpoint's name, instead of in a worker. Those that need a running Ray are in
``tests/integration/test_ray_compat_ray.py``. The last tests enforce the rule: no other file of the
library imports Ray's internals or patches a Ray object.
"""

import ast
import inspect
import logging
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
import ray
import ray.exceptions

from lineage_data._core.errors import LineageError, UserCodeError
from lineage_data._ray import compat
from lineage_data._ray.compat import Failure

ROOT = Path(__file__).resolve().parents[2]


def test_ray_is_the_version_compat_was_written_against():
    # A new Ray: read compat.py's touchpoints against it, then move WRITTEN_FOR.
    assert ray.__version__ == compat.WRITTEN_FOR


def test_a_missing_symbol_is_a_typed_error_naming_the_touchpoint_and_both_versions():
    with pytest.raises(compat.RayCompatError, match=r"ray\.data\._internal\.util\.no_such") as info:
        compat._private("ray.data._internal.util", "no_such")
    assert isinstance(info.value, LineageError)
    assert compat.WRITTEN_FOR in str(info.value) and ray.__version__ in str(info.value)
    assert compat._optional("ray.no_such_module", "x") is None


# -- starting Ray ------------------------------------------------------------------------------------


def test_touchpoint_auth_logger_and_warning():
    module = sys.modules.get(compat.AUTH_LOGGER) or __import__(compat.AUTH_LOGGER, fromlist=["_"])
    assert module.logger.name == compat.AUTH_LOGGER
    assert compat.AUTH_WARNING in inspect.getsource(module)


def test_touchpoint_get_num_cpus():
    from ray._private.utils import get_num_cpus

    assert get_num_cpus() >= 1
    assert compat.detected_cpus() == int(get_num_cpus())


# -- why a worker died ------------------------------------------------------------------------------


def test_touchpoint_worker_table(monkeypatch):
    from ray._private import state
    from ray.core.generated import common_pb2, gcs_pb2

    assert callable(state.state._connect_and_get_accessor)
    assert hasattr(ray._raylet.GlobalStateAccessor, "get_worker_table")

    def row(worker: bytes, alive: bool, exit_type: str) -> bytes:
        data = gcs_pb2.WorkerTableData(
            is_alive=alive, exit_type=common_pb2.WorkerExitType.Value(exit_type)
        )
        data.worker_address.worker_id = worker
        return data.SerializeToString()

    rows = [
        row(b"\x01" * 28, False, "NODE_OUT_OF_MEMORY"),
        row(b"\x02" * 28, False, "SYSTEM_ERROR"),
        row(b"\x03" * 28, True, "NODE_OUT_OF_MEMORY"),
        row(b"\x04" * 28, False, "NODE_OUT_OF_MEMORY"),  # not asked about
    ]

    class Accessor:
        def get_worker_table(self):
            return rows

    monkeypatch.setattr(state.state, "_connect_and_get_accessor", Accessor)
    asked = {(b * 28).hex() for b in (b"\x01", b"\x02", b"\x03")}
    assert compat.workers_killed_for_memory(asked) == {(b"\x01" * 28).hex()}


def test_touchpoint_global_worker_node_logs_dir():
    from ray._private.node import Node
    from ray._private.worker import global_worker

    assert callable(Node.get_logs_dir_path)
    assert "node" in vars(global_worker)  # None until connected (see the integration test)
    node = global_worker.node  # the session's Ray may already be up when this test runs
    if node is None:
        assert compat.node_logs_dir() is None  # not connected: no node
    else:
        assert compat.node_logs_dir() == node.get_logs_dir_path()


def test_touchpoint_global_worker_mode():
    from ray._private import worker

    assert isinstance(worker.WORKER_MODE, int) and worker.WORKER_MODE != worker.SCRIPT_MODE
    assert "mode" in vars(worker.global_worker)


# -- Ray's key-value store --------------------------------------------------------------------------


def test_touchpoint_internal_kv():
    from ray._raylet import InnerGcsClient
    from ray.experimental import internal_kv

    put = inspect.signature(internal_kv._internal_kv_put).parameters
    assert list(put)[:3] == ["key", "value", "overwrite"] and "namespace" in put
    assert "namespace" in inspect.signature(internal_kv._internal_kv_get).parameters
    delete = inspect.signature(internal_kv._internal_kv_del).parameters
    assert "del_by_prefix" in delete and "namespace" in delete
    assert callable(internal_kv._internal_kv_initialized)
    assert callable(internal_kv.internal_kv_get_gcs_client)
    assert callable(InnerGcsClient.internal_kv_multi_get)  # (GcsClient passes calls on to it)


# -- lowering a plan --------------------------------------------------------------------------------


def test_touchpoint_get_compute_strategy():
    from ray.data import ActorPoolStrategy, TaskPoolStrategy

    class Model:
        def __call__(self, batch):
            return batch

    def fn(batch):
        return batch

    given = ActorPoolStrategy(size=2)
    assert compat.compute_strategy(Model, None, given, None) is given
    assert isinstance(compat.compute_strategy(fn, None, None, None), TaskPoolStrategy)
    fixed = compat.compute_strategy(Model, None, None, 3)
    assert isinstance(fixed, ActorPoolStrategy) and fixed.min_size == fixed.max_size == 3
    pool = compat.compute_strategy(Model, None, None, (1, 4))
    assert (pool.min_size, pool.max_size) == (1, 4)


def test_touchpoint_actor_pool_enable_true_multi_threading():
    from ray.data import ActorPoolStrategy

    mine = ActorPoolStrategy(size=2, max_tasks_in_flight_per_actor=4)
    threaded = compat.with_true_threads(mine, True)
    assert threaded.enable_true_multi_threading and not mine.enable_true_multi_threading
    assert (threaded.min_size, threaded.max_tasks_in_flight_per_actor) == (2, 4)
    assert not compat.with_true_threads(threaded, False).enable_true_multi_threading


def test_touchpoint_dataset_copy_deep_copy():
    assert "_deep_copy" in inspect.signature(ray.data.Dataset.copy).parameters


def test_touchpoint_logical_plan_input_data():
    from ray.data._internal.logical.operators.input_data_operator import InputData

    assert "input_data" in inspect.signature(InputData.__init__).parameters
    assert "_logical_plan" in inspect.getsource(ray.data.Dataset.__init__)
    assert compat.in_memory_blocks(object()) is None  # no plan: the caller's fallback


def test_touchpoint_task_context_current():
    from ray.data._internal.execution.interfaces.task_context import TaskContext

    assert compat.map_task_name() is None  # not in a map task
    TaskContext.set_current(TaskContext(task_idx=3, op_name="MapBatches(ocr)"))
    try:
        assert compat.map_task_name() == "MapBatches(ocr)#3"
    finally:
        TaskContext.reset_current()


def test_touchpoint_combine_chunks_of_extension_columns():
    from ray.data._internal.tensor_extensions.arrow import ArrowTensorArray

    chunk = ArrowTensorArray.from_numpy(np.arange(12).reshape(3, 2, 2))
    table = pa.Table.from_batches([pa.record_batch([chunk], names=["t"])] * 2)
    assert table["t"].num_chunks == 2
    combined = compat.combine_chunks(table)
    assert combined["t"].num_chunks == 1 and combined.equals(table)


# -- column verbs -----------------------------------------------------------------------------------


def test_touchpoint_eval_expr():
    from ray.data.expressions import col, lit

    batch = pa.table({"x": [1, 2, 3]})
    assert compat.eval_expression(col("x") + 1, batch).to_pylist() == [2, 3, 4]
    assert compat.eval_expression(col("x") > lit(1), batch).to_pylist() == [False, True, True]


# -- execution and writes ---------------------------------------------------------------------------


def test_touchpoint_meta_count():
    assert callable(ray.data.Dataset._meta_count)
    assert compat.known_row_count(object()) is None  # the caller's fallback


def test_touchpoint_iter_internal_ref_bundles():
    from ray.data._internal.execution.interfaces import RefBundle

    assert callable(ray.data.Dataset.iter_internal_ref_bundles)
    fields = {f.name for f in __import__("dataclasses").fields(RefBundle)}
    assert "blocks" in fields
    with pytest.raises(compat.RayCompatError, match="iter_internal_ref_bundles"):
        compat.output_blocks(object())


def test_touchpoint_task_context_for_writes():
    context = compat.write_task_context(2, "Write(x)")
    assert (context.task_idx, context.op_name) == (2, "Write(x)")


def test_touchpoint_execution_callback():
    from ray.data import DataContext
    from ray.data._internal.execution.execution_callback import ExecutionCallback

    for method in ("before_execution_starts", "after_execution_succeeds", "after_execution_fails"):
        assert callable(getattr(ExecutionCallback, method))
    assert "custom_execution_callback_classes" in DataContext.__dataclass_fields__

    class Fake:
        context = DataContext()

    calls: list[str] = []
    ds = Fake()
    compat.on_execution_end(ds, lambda: calls.append("start"), lambda: calls.append("end"))
    (callback_class,) = ds.context.custom_execution_callback_classes
    callback = callback_class()
    assert isinstance(callback, ExecutionCallback)
    callback.before_execution_starts(None)
    callback.after_execution_fails(None, RuntimeError("x"))
    callback.after_execution_succeeds(None)
    assert calls == ["start", "end", "end"]


def test_touchpoint_file_datasink_skip_write(tmp_path):
    from ray.data import SaveMode
    from ray.data.datasource import BlockBasedFileDatasink

    class Sink(BlockBasedFileDatasink):
        def write_block_to_file(self, block, file):
            pass

    (tmp_path / "there").mkdir()
    assert compat.start_file_sink(Sink(str(tmp_path / "there"), mode=SaveMode.IGNORE)) is True
    fresh = Sink(str(tmp_path / "fresh"), mode=SaveMode.IGNORE)
    assert compat.start_file_sink(fresh) is False
    assert (tmp_path / "fresh").is_dir()  # Ray's own preparation ran
    assert compat.start_file_sink(object()) is None


def test_touchpoint_write_datasink_is_where_every_write_ends():
    writes = [n for n in dir(ray.data.Dataset) if n.startswith("write_") and n != "write_datasink"]
    assert len(writes) > 5
    for name in writes:  # each ends in write_datasink, or in another write_* that does
        source = inspect.getsource(getattr(ray.data.Dataset, name))
        assert "self.write_datasink(" in source or any(f"self.{w}(" in source for w in writes), name

    class Fake:
        def write_datasink(self, sink, **kwargs):
            return ("original", sink, kwargs)

    ds = Fake()
    assert compat.wrap_write_datasink(ds, lambda f: lambda s, **k: ("wrapped", f(s, **k))) is ds
    assert ds.write_datasink("s", a=1) == ("wrapped", ("original", "s", {"a": 1}))
    assert Fake().write_datasink("s") == ("original", "s", {})  # this object only


# -- helper actors, progress, bench -----------------------------------------------------------------


def test_touchpoint_actor_ray_ready():
    assert "def __ray_ready__" in inspect.getsource(ray.actor)
    with pytest.raises(compat.RayCompatError, match="__ray_ready__"):
        compat.actor_ready(object())


def test_touchpoint_tqdm_ray_bar_manager():
    from ray.experimental import tqdm_ray

    assert callable(tqdm_ray.instance)
    assert callable(tqdm_ray._BarManager.hide_bars) and callable(tqdm_ray._BarManager.unhide_bars)


def test_touchpoint_ray_console_handlers():
    logger = logging.getLogger("ray")
    assert any(isinstance(h, logging.StreamHandler) for h in logger.handlers)  # Ray's own
    handler = logging.StreamHandler(sys.stderr)  # one on the terminal, whatever pytest captures
    logger.addHandler(handler)
    seen: list[str] = []
    try:
        undo = compat.wrap_ray_console_emit(
            lambda emit: lambda record: (seen.append(record.getMessage()), emit(record))
        )
        wrapped = [h for h in logger.handlers if "emit" in vars(h)]
        assert handler in wrapped
        logger.warning("while wrapped")
        undo()
        assert not any("emit" in vars(h) for h in logger.handlers)
        logger.warning("after")
    finally:
        logger.removeHandler(handler)
    assert seen == ["while wrapped"] * len(wrapped)


def test_touchpoint_memory_info_reply():
    from ray._private import internal_api, state
    from ray.core.generated import node_manager_pb2

    assert list(inspect.signature(internal_api.get_memory_info_reply).parameters)[0] == "state"
    assert state.state is not None
    fields = node_manager_pb2.ObjectStoreStats.DESCRIPTOR.fields_by_name
    assert "object_store_bytes_used" in fields and "spilled_bytes_total" in fields


# -- classifying Ray's failures ---------------------------------------------------------------------


def _task_error(cause: BaseException, text: str = "Traceback ...") -> ray.exceptions.RayTaskError:
    return ray.exceptions.RayTaskError("MapBatches(ocr)", text, cause)


def test_touchpoint_failure_types():
    ours = UserCodeError("stage 'ocr' raised")
    assert compat.classify(_task_error(ours)) is Failure.OURS
    wrapped = _task_error(ours).as_instanceof_cause()  # also an instance of UserCodeError
    assert isinstance(wrapped, LineageError) and compat.classify(wrapped) is Failure.OURS
    constructor = ray.exceptions.ActorDiedError(_task_error(RuntimeError("no weights here")))
    assert constructor.actor_init_failed
    assert compat.classify(constructor) is Failure.CONSTRUCTOR
    assert compat.classify(_task_error(constructor)) is Failure.CONSTRUCTOR
    from ray.data.exceptions import SystemException

    for system in (
        ray.exceptions.ActorDiedError(),
        ray.exceptions.WorkerCrashedError(),
        ray.exceptions.OutOfMemoryError("killed"),
        ray.exceptions.ObjectLostError("ab" * 14, None, ""),
        ray.exceptions.TaskCancelledError(),
        ray.exceptions.NodeDiedError("gone"),
        _task_error(ValueError("unpicklable")),
        SystemException(),
    ):
        assert compat.classify(system) is Failure.RAY, type(system)
    for other in (ValueError("user"), LineageError("ours"), KeyboardInterrupt()):
        assert compat.classify(other) is Failure.OTHER, type(other)


def test_touchpoint_constructor_message():
    traceback = (
        "ray::MapWorker(MapBatches(ocr)).__init__() (pid=1, ip=1.2.3.4)\n"
        '  File "model.py", line 3, in __init__\n'
        '    raise RuntimeError("no weights here")\n'
        "RuntimeError: no weights here"
    )
    error = ray.exceptions.ActorDiedError(_task_error(RuntimeError("x"), traceback))
    assert "creation task" in str(error)
    assert compat.constructor_raised(error) == "RuntimeError: no weights here"
    assert compat.stage_named(error, ["pages", "ocr"]) == "ocr"
    assert compat.stage_named(error, ["pages"]) is None
    assert compat.first_line(ray.exceptions.WorkerCrashedError()).startswith("The worker died")


# -- the rule: one door -----------------------------------------------------------------------------

_PRIVATE_MODULES = (
    "ray._private",
    "ray._raylet",
    "ray.core.generated",
    "ray.data._internal",
    "ray.experimental.internal_kv",
)
# Private members of public Ray objects that compat reads or patches, by name.
_PRIVATE_MEMBERS = {
    "__ray_ready__",
    "_meta_count",
    "_logical_plan",
    "_enable_true_multi_threading",
    "_skip_write",
    "_FileDatasink",
    "iter_internal_ref_bundles",
    "_internal_kv_put",
    "_internal_kv_get",
    "_internal_kv_del",
}
_PATCHED = {"write_datasink", "emit"}  # Ray methods compat replaces on an object


def _library_files() -> list[Path]:
    files = {p.resolve() for d in ("lineage_data", "connectors") for p in (ROOT / d).rglob("*.py")}
    return sorted(f for f in files if f != (ROOT / "lineage_data/_ray/compat.py").resolve())


def _is_private(module: str) -> bool:
    return any(module == m or module.startswith(m + ".") for m in _PRIVATE_MODULES)


def _dotted(node: ast.AST) -> str:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    return ".".join([node.id, *reversed(parts)]) if isinstance(node, ast.Name) else ""


def _touches(tree: ast.AST) -> list[str]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names if _is_private(a.name)]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [f"{node.module}.{a.name}" for a in node.names]
            found += [n for n in [node.module, *names] if _is_private(n)][:1]
        elif isinstance(node, ast.Attribute):
            if node.attr in _PRIVATE_MEMBERS or _is_private(_dotted(node)):
                found.append(f"line {node.lineno}: .{node.attr}")
            if isinstance(node.ctx, ast.Store | ast.Del) and node.attr in _PATCHED:
                found.append(f"line {node.lineno}: patches .{node.attr}")
        elif isinstance(node, ast.keyword) and node.arg == "_deep_copy":
            found.append("_deep_copy=")
    return found


def test_the_rule_finds_what_it_forbids():
    code = (
        "from ray._private import state\nimport ray.data._internal.util\n"
        "from ray.experimental import internal_kv\nds.write_datasink = f\n"
        "ray._private.worker.global_worker\nh.__ray_ready__.remote()\n"
        "ray.data.Dataset.copy(ds, _deep_copy=True)\n"
    )
    assert len(_touches(ast.parse(code))) >= 7


def test_no_file_but_compat_imports_rays_internals_or_patches_a_ray_object():
    offenders = {}
    for path in _library_files():
        found = _touches(ast.parse(path.read_text(), str(path)))
        if found:
            offenders[str(path.relative_to(ROOT))] = found
    assert offenders == {}, "Ray's internals belong in lineage_data/_ray/compat.py"
