"""Ray Data 2.60 conformance: the same small pipelines through plain Ray Data and lineage_data.

For every ``compute``/``concurrency`` spelling and every ``batch_format``: identical user rows, and the
lowered Ray plan runs the user's stage with the strategy Ray itself chooses.
"""

import types

import pandas as pd
import pyarrow as pa
import pytest
import ray
from ray.data import ActorPoolStrategy, TaskPoolStrategy

import lineage_data as ld
from lineage_data._core import columns as C
from lineage_data._ray.lower import lower

ITEMS = [{"x": i} for i in range(12)]
DOCS = [{"doc": f"d{i}", "n": i % 4 + 1} for i in range(6)]


def times(batch, k=2):
    """Add ``y = x * k`` to a batch of any Ray batch format."""
    if isinstance(batch, pa.Table):
        return batch.append_column("y", pa.compute.multiply(batch["x"], k))
    if isinstance(batch, pd.DataFrame):
        return batch.assign(y=batch["x"] * k)
    return {"x": batch["x"], "y": batch["x"] * k}


class Times:
    def __init__(self, k=2):
        self.k = k

    def __call__(self, batch, extra=0):
        return times(batch, self.k + extra)  # fn_args reach __call__


def split(row):
    return [{"x": 10 * int(row["doc"][1:]) + j} for j in range(row["n"])]


SPELLINGS = {
    "actor_pool_size_2": (Times, {"compute": ActorPoolStrategy(size=2)}),
    "actor_pool_1_to_3": (Times, {"compute": ActorPoolStrategy(min_size=1, max_size=3)}),
    "task_pool_size_2": (times, {"compute": TaskPoolStrategy(size=2)}),
    "concurrency_2_function": (times, {"concurrency": 2}),
    "concurrency_2_class": (Times, {"concurrency": 2}),
    "no_strategy_function": (times, {}),
    "no_strategy_class": (Times, {}),
}
FORMATS = ["default", "numpy", "pandas", "pyarrow", None]


def strategy_fields(compute):
    keys = ("size", "min_size", "max_size", "initial_size", "max_tasks_in_flight_per_actor")
    return type(compute).__name__, {k: getattr(compute, k, None) for k in keys}


def map_ops(ds):
    """The MapBatches logical operators of a Ray dataset, by name."""
    out, todo = {}, [ds._logical_plan.dag]
    while todo:
        op = todo.pop()
        out[op.name] = op
        todo.extend(op.input_dependencies)
    return out


def user_rows(rows):
    return sorted(
        ({k: v for k, v in r.items() if not C.is_reserved(k)} for r in rows), key=lambda r: r["x"]
    )


def as_python(rows):
    return [{k: (v.item() if hasattr(v, "item") else v) for k, v in r.items()} for r in rows]


@pytest.mark.parametrize("spelling", sorted(SPELLINGS))
@pytest.mark.parametrize("level", ["source", "children"])
def test_same_rows_as_ray_data_for_each_strategy(spelling, level):
    fn, kwargs = SPELLINGS[spelling]
    opts = dict(kwargs, batch_size=4, num_cpus=0.25)
    if level == "source":
        plain = ray.data.from_items(ITEMS)
        ours = ld.from_items(ITEMS)
    else:
        plain = ray.data.from_items(DOCS).flat_map(split)
        ours = ld.from_items(DOCS, id_column="doc").expand_lineage(split, name="split")
    expected = as_python(user_rows(plain.map_batches(fn, **opts).take_all()))
    got = ours.map_batches(fn, name="times", **opts).take_all(keep_lineage=False)
    assert user_rows(got) == expected
    assert len(expected) == (12 if level == "source" else sum(d["n"] for d in DOCS))


@pytest.mark.parametrize("spelling", sorted(SPELLINGS))
def test_lowered_plan_uses_the_strategy_ray_chooses(spelling):
    fn, kwargs = SPELLINGS[spelling]
    plain = ray.data.from_items(ITEMS).map_batches(fn, num_cpus=0.25, **kwargs)
    ray_op = map_ops(plain)[f"MapBatches({fn.__name__})"]
    for ours in (
        ld.from_items(ITEMS).map_batches(fn, name="times", num_cpus=0.25, **kwargs),
        ld.from_items(DOCS, id_column="doc")
        .expand_lineage(split)
        .map_batches(fn, name="times", num_cpus=0.25, **kwargs),
    ):
        op = map_ops(lower(ours.plan, Offline(), {}))["MapBatches(times)"]
        assert strategy_fields(op.compute) == strategy_fields(ray_op.compute)
        assert op.ray_remote_args.get("num_cpus") == 0.25


class Offline:
    """A coordinator client for lowering only (no helper is started: nothing runs)."""

    helper = types.SimpleNamespace(name="offline")
    name = "offline"

    def for_stage(self, stage):
        return self


def tagged(batch):
    """``times`` plus a column naming the type of batch the function was given."""
    out = times(batch)
    name = type(batch).__name__
    if isinstance(out, pa.Table):
        return out.append_column("t", pa.array([name] * out.num_rows))
    if isinstance(out, pd.DataFrame):
        return out.assign(t=name)
    return {**out, "t": [name] * len(out["x"])}


@pytest.mark.parametrize("batch_format", FORMATS)
def test_same_rows_and_batch_types_as_ray_data_for_each_batch_format(batch_format):
    kwargs = {} if batch_format == "default" else {"batch_format": batch_format}
    expected = as_python(
        user_rows(ray.data.from_items(ITEMS).map_batches(tagged, **kwargs).take_all())
    )
    got = ld.from_items(ITEMS).map_batches(tagged, **kwargs).take_all(keep_lineage=False)
    assert user_rows(got) == expected
    children = ld.from_items(DOCS, id_column="doc").expand_lineage(split)
    plain_children = ray.data.from_items(DOCS).flat_map(split)
    expected = as_python(user_rows(plain_children.map_batches(tagged, **kwargs).take_all()))
    assert (
        user_rows(children.map_batches(tagged, **kwargs).take_all(keep_lineage=False)) == expected
    )


def test_default_batch_format_is_a_dict_of_numpy_arrays():
    import numpy as np

    def check(batch):
        assert isinstance(batch, dict) and isinstance(batch["x"], np.ndarray)
        return batch

    assert len(ld.from_items(ITEMS).map_batches(check, on_error="raise").take_all()) == 12


def test_fn_args_kwargs_and_constructor_args_follow_ray():
    ours = ld.from_items(ITEMS).map_batches(
        Times, fn_args=(1,), fn_constructor_args=(3,), batch_format="pyarrow", num_cpus=0.25
    )
    plain = ray.data.from_items(ITEMS).map_batches(
        Times, fn_args=(1,), fn_constructor_args=(3,), batch_format="pyarrow", num_cpus=0.25
    )
    assert user_rows(ours.take_all()) == user_rows(plain.take_all())
    rows = ld.from_items(ITEMS).map(lambda r, k: {"y": r["x"] * k}, fn_kwargs={"k": 5}).take_all()
    assert sorted(r["y"] for r in rows) == [5 * i for i in range(12)]


def test_strategy_errors_follow_ray_and_are_plan_errors():
    with pytest.raises(ld.PlanError, match="callable class cannot run with TaskPoolStrategy"):
        ld.from_items(ITEMS).map_batches(Times, compute=TaskPoolStrategy(size=2))
    with pytest.raises(ld.PlanError, match="function cannot run with ActorPoolStrategy"):
        ld.from_items(ITEMS).map(lambda r: r, compute=ActorPoolStrategy(size=2))
    with pytest.raises(ld.PlanError, match="concurrency is a tuple"):
        ld.from_items(ITEMS).map_batches(times, concurrency=(1, 2))
    with pytest.raises(ld.PlanError, match="batch_size when asking for GPUs"):
        ld.from_items(ITEMS).map_batches(Times, num_gpus=1)
    with pytest.raises(ld.PlanError, match="batch_format"):
        ld.from_items(ITEMS).map_batches(times, batch_format="arrow")


def test_filter_takes_a_ray_expression_like_ray():
    from ray.data.expressions import col

    predicate = (col("x") > 3) & (col("x") % 2 == 0)
    ours = ld.from_items(ITEMS).filter(expr=predicate)
    plain = ray.data.from_items(ITEMS).filter(expr=predicate)
    assert user_rows(ours.take_all(keep_lineage=False)) == user_rows(plain.take_all())
    rows = ld.from_items(DOCS, id_column="doc").filter(expr=col("n") > 2).take_all()
    assert {r["_lineage_root"]: r["_lineage_outcome"] for r in rows} == {
        d["doc"]: "PRESENT" if d["n"] > 2 else "DROPPED" for d in DOCS
    }
    with pytest.raises(ld.PlanError, match="exactly one of fn and expr"):
        ld.from_items(ITEMS).filter(lambda r: True, expr=predicate)
    with pytest.raises(ld.PlanError, match="need fn, not expr"):
        ld.from_items(ITEMS).filter(expr=predicate, fn_kwargs={"k": 1})


def test_reduce_lineage_takes_a_callable_class_with_resources():
    class Join:
        def __init__(self, sep):
            self.sep = sep

        def __call__(self, parent, children, suffix=""):
            return {"text": self.sep.join(str(c["x"]) for c in children) + suffix}

    docs = (
        ld.from_items(DOCS, id_column="doc")
        .expand_lineage(split, name="split")
        .reduce_lineage(
            Join,
            name="join",
            fn_constructor_args=("-",),
            fn_kwargs={"suffix": "!"},
            compute=ActorPoolStrategy(size=1),
            num_cpus=0.25,
        )
    )
    ops = map_ops(lower(docs.plan, Offline(), {}))
    assert type(ops["MapBatches(join)"].compute).__name__ == "ActorPoolStrategy"
    rows = {r["_lineage_root"]: r["text"] for r in docs.take_all()}
    assert rows["d2"] == "20-21-22!" and rows["d0"] == "0!"


def test_filter_and_expand_take_gpu_and_named_remote_args():
    ds = (
        ld.from_items(ITEMS)
        .filter(lambda r: r["x"] % 2 == 0, name="even", num_gpus=1, num_cpus=0.25)
        .map(lambda r: r, name="same", max_calls=100, num_cpus=0.25)
    )
    ops = map_ops(lower(ds.plan, Offline(), {}))
    assert ops["MapBatches(even)"].ray_remote_args["num_gpus"] == 1
    assert ops["MapBatches(same)"].ray_remote_args["max_calls"] == 100
    rows = ds.take_all()
    assert sorted(r["x"] for r in rows if r["_lineage_outcome"] == "PRESENT") == list(
        range(0, 12, 2)
    )
    assert "num_gpus=1" in ds.explain()


def test_stage_names_are_ray_operator_and_actor_names():
    ds = ld.from_items(ITEMS).map_batches(
        Times, name="ocr", compute=ActorPoolStrategy(size=1), num_cpus=0.25
    )
    assert "MapBatches(ocr)" in map_ops(lower(ds.plan, Offline(), {}))

    class Broken:
        def __init__(self):
            raise RuntimeError("no weights here")

        def __call__(self, batch):
            return batch

    with pytest.raises(ld.UserCodeError, match=r"stage 'ocr'.*RuntimeError: no weights here"):
        ld.from_items(ITEMS).map_batches(Broken, name="ocr", num_cpus=0.25).take_all()


def test_functools_partial_stage_is_named_after_the_function():
    import functools

    ds = ld.from_items(ITEMS).map_batches(functools.partial(times, k=3))
    assert "map 'times'" in ds.explain()


def test_task_stage_output_blocks_leave_in_one_piece_fused_into_the_stage():
    """Ray chunks a task's output block once per batch; the plan's last task stage joins them."""
    items = [{"x": i} for i in range(64)]
    ds = ld.from_items(items).map_batches(
        times, name="times", batch_size=4, batch_format="pyarrow", num_cpus=0.25
    )
    ops = map_ops(lower(ds.plan, Offline(), {}))
    piece, stage = ops["MapBatches(one_piece)"], ops["MapBatches(times)"]
    assert piece.input_dependencies == [stage]  # right after the stage: Ray fuses them when the
    assert strategy_fields(piece.compute) == strategy_fields(stage.compute)  # strategy and
    assert piece.ray_remote_args == stage.ray_remote_args  # the resources are the same
    plain = ray.data.from_items(items, override_num_blocks=1).map_batches(
        times, batch_size=4, batch_format="pyarrow"
    )
    chunked = [b for b in plain.iter_batches(batch_size=None, batch_format="pyarrow")]
    assert max(b["x"].num_chunks for b in chunked) > 1  # what Ray Data alone hands on
    tables = list(ds.iter_batches(batch_size=None, batch_format="pyarrow"))
    assert sum(t.num_rows for t in tables) == 64
    assert all(column.num_chunks == 1 for t in tables for column in t.columns)
    assert sorted(x for t in tables for x in t["y"].to_pylist()) == [2 * i for i in range(64)]


def test_actor_and_expansion_stages_get_no_one_piece_step():
    by_actor = ld.from_items(ITEMS).map_batches(
        Times, name="times", compute=ActorPoolStrategy(size=1), num_cpus=0.25
    )
    expanded = ld.from_items(DOCS, id_column="doc").expand_lineage(split, name="split")
    for ds in (by_actor, expanded):
        assert "MapBatches(one_piece)" not in map_ops(lower(ds.plan, Offline(), {}))


def test_one_piece_joins_small_chunks_and_leaves_big_ones():
    import numpy as np

    from lineage_data._ray.lower import one_piece

    small = pa.concat_tables([pa.table({"x": [i, i + 1], "s": ["a", None]}) for i in range(5)])
    joined = one_piece(small)
    assert [c.num_chunks for c in joined.columns] == [1, 1] and joined.equals(small)
    whole = small.combine_chunks()
    assert one_piece(whole) is whole  # one chunk per column already: untouched
    big = pa.concat_tables([pa.table({"b": [np.zeros(1 << 20, np.uint8).tobytes()]})] * 3)
    assert one_piece(big) is big  # MBs per chunk: the copy would cost more than it saves
    assert one_piece(pa.table({})).num_columns == 0
    from ray.data._internal.tensor_extensions.arrow import ArrowTensorArray

    shapes = [(2, 3), (1, 3), (2, 4)]  # the last: another shape, a variable-shaped column
    tensors = pa.chunked_array([ArrowTensorArray.from_numpy(np.ones(s)) for s in shapes[:2]])
    joined = one_piece(pa.table({"t": tensors, "x": pa.chunked_array([[1, 2], [3]])}))
    assert joined["t"].num_chunks == 1 and len(joined) == 3
    ragged = [
        ArrowTensorArray.from_numpy([np.ones(s) for s in pair]) for pair in (shapes, shapes[1:])
    ]
    joined = one_piece(pa.table({"t": pa.chunked_array(ragged)}))
    assert joined["t"].num_chunks == 1 and len(joined) == 5


def _lines(row):
    return [{"doc": row["doc"], "x": 10 * int(row["doc"][1:]) + j} for j in range(row["n"])]


def _joined(parent, children):
    return {"doc": parent["doc"], "xs": [c["y"] for c in children]}


def test_reduces_after_a_cpu_actor_pool_run_in_its_actors():
    """Ray Data fuses no task step into an actor pool's: the lowering folds the reduces in itself."""
    ds = (  # documents -> one page each -> lines -> a model on a CPU pool -> page -> document
        ld.from_items(DOCS, id_column="doc")
        .expand_lineage(lambda row: [row], name="pages")
        .expand_lineage(_lines, name="lines")
        .map_batches(
            Times, name="model", batch_size=3, num_cpus=0.25, compute=ActorPoolStrategy(size=2)
        )
        .reduce_lineage(_joined, name="page")
        .reduce_lineage(name="document")
    )
    ops = map_ops(lower(ds.plan, Offline(), {}))
    model = ops["MapBatches(model->page->document)"]
    assert type(model.compute).__name__ == "ActorPoolStrategy"
    assert not {"MapBatches(page)", "MapBatches(document)", "MapBatches(model)"} & set(ops)
    rows = {r["_lineage_root"]: r for r in ds.take_all()}
    assert {root: r["_lineage_outcome"] for root, r in rows.items()} == {
        d["doc"]: "PRESENT" for d in DOCS
    }
    for d in DOCS:
        first = 10 * int(d["doc"][1:])
        assert list(rows[d["doc"]]["xs"]) == [[2 * (first + j) for j in range(d["n"])]]


@pytest.mark.parametrize(
    ("model", "reduce"),
    [
        ({"compute": ActorPoolStrategy(size=1), "num_gpus": 1}, {}),
        ({"compute": ActorPoolStrategy(size=1), "resources": {"accelerator": 1}}, {}),
        ({"compute": ActorPoolStrategy(size=1)}, {"num_cpus": 0.5}),
        ({"compute": ActorPoolStrategy(size=1)}, {"compute": TaskPoolStrategy(size=1)}),
        ({}, {}),  # a class with no strategy: Ray's autoscaling pool, folded
    ],
    ids=["gpu_actor", "custom_resource_actor", "reduce_resources", "reduce_strategy", "default"],
)
def test_a_reduce_stays_a_step_of_its_own_after_an_accelerator_or_when_given_compute(model, reduce):
    """An accelerator would wait while the reduce ran; a reduce with compute of its own gets it."""
    ds = (
        ld.from_items(DOCS, id_column="doc")
        .expand_lineage(_lines, name="lines")
        .map_batches(Times, name="model", batch_size=3, num_cpus=0.25, **model)
        .reduce_lineage(_joined, name="page", **reduce)
    )
    ops = map_ops(lower(ds.plan, Offline(), {}))
    folded = not model.get("num_gpus") and "resources" not in model and not reduce
    assert ("MapBatches(model->page)" in ops) == folded
    assert ("MapBatches(page)" in ops) == (not folded)
    assert ("MapBatches(model)" in ops) == (not folded)
