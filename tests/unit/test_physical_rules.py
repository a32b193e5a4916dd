"""The physical rules, one by one: the facts in, the decision out; and explain's physical section."""

import pathlib
import threading

import pytest

import lineage_data as ld
from lineage_data._core.guard import Watchdog
from lineage_data._core.physical import Batches, Runner, Step, physical_plan
from lineage_data._core.physical.batches import CutBatches, who_cuts
from lineage_data._core.physical.block_rows import SizeBlocks
from lineage_data._core.physical.fold import FoldReduces, folds_into
from lineage_data._core.physical.one_piece import OnePiece, leaves_in_one_piece
from lineage_data._core.physical.runner import ChooseRunner, batches_in_flight, runner
from lineage_data._core.physical.source_blocks import (
    MAX_SOURCE_BLOCKS,
    items_per_block,
    source_block_rows,
)
from lineage_data._core.physical.steps import PhysicalPlan
from lineage_data._core.physical.terminal import EndInLastStep
from lineage_data._core.plan import Plan, RaySource


class ActorPoolStrategy:  # Ray's fields, without Ray (Compute.check reads the class name)
    def __init__(self, *, max_concurrent_calls_per_actor=None, enable_true_multi_threading=False):
        self.max_concurrent_calls_per_actor = max_concurrent_calls_per_actor
        self.enable_true_multi_threading = enable_true_multi_threading


class Model:
    def __call__(self, batch):
        return batch


class AsyncModel:
    async def __call__(self, batch):
        return batch


def pages(row):
    return ({"page": i} for i in range(row["n"]))


def docs(n=3):
    return ld.from_items([{"d": str(i), "n": 2} for i in range(n)], id_column="d")


def stage(ds, index=-1):
    return ds.plan.stages[index]


def apply(rule, ds, **facts):
    return rule.apply(PhysicalPlan.of(ds.plan, **facts))


# -- runner: tasks or an actor pool, batches in flight ------------------------------------------
@pytest.mark.parametrize(
    ("build", "expected"),
    [
        (lambda ds: ds.map_batches(Model), Runner.POOL),
        (lambda ds: ds.map_batches(Model, concurrency=2), Runner.POOL),
        (lambda ds: ds.map_batches(len), Runner.TASKS),
        (lambda ds: ds.map_batches(len, concurrency=2), Runner.TASKS),
        (lambda ds: ds.map(dict), Runner.POOL),  # dict is a class: Ray Data builds one per actor
        (lambda ds: ds.expand_lineage(pages).reduce_lineage(), Runner.TASKS),  # no fn
    ],
)
def test_a_callable_class_runs_on_an_actor_pool_anything_else_as_tasks(build, expected):
    assert runner(stage(build(docs()))) is expected


@pytest.mark.parametrize(
    ("fn", "strategy", "expected"),
    [
        (AsyncModel, ActorPoolStrategy(max_concurrent_calls_per_actor=4), 4),
        (Model, ActorPoolStrategy(max_concurrent_calls_per_actor=4), 1),
        (
            Model,
            ActorPoolStrategy(max_concurrent_calls_per_actor=4, enable_true_multi_threading=True),
            4,
        ),
        (AsyncModel, ActorPoolStrategy(), 1),
        (AsyncModel, None, 1),  # the pool Ray builds without a strategy: one call at a time
    ],
)
def test_an_actor_runs_several_batches_at_once_by_ray_datas_rule(fn, strategy, expected):
    ds = docs().map_batches(fn, compute=strategy)
    assert batches_in_flight(stage(ds)) == expected
    assert apply(ChooseRunner(), ds).steps[-1].threads == expected


def test_an_expansion_on_an_actor_pool_runs_one_batch_at_a_time():
    class Pages:
        async def __call__(self, row):
            yield {"page": 0}

    strategy = ActorPoolStrategy(max_concurrent_calls_per_actor=4)
    assert batches_in_flight(stage(docs().expand_lineage(Pages, compute=strategy))) == 1


# -- block_rows: rows per block of an expansion's children ---------------------------------------
def test_a_fixed_block_size_overrides_the_rule_for_every_step():
    ds = docs().expand_lineage(pages).map_batches(Model, batch_size=8)
    assert [s.rows_per_block for s in apply(SizeBlocks(), ds).steps] == [8, 1024]
    assert [s.rows_per_block for s in apply(SizeBlocks(), ds, rows_per_block=5).steps] == [5, 5]


# -- fold: a reduce runs in the actors of the 1:1 stage before it --------------------------------
@pytest.mark.parametrize(
    ("build", "expected"),
    [
        (lambda ds: ds.map_batches(Model), True),  # a CPU actor pool
        (lambda ds: ds.map(Model), True),
        (lambda ds: ds.filter(Model), True),
        (lambda ds: ds.map_batches(Model, num_gpus=1, batch_size=4), False),  # the GPU would wait
        (lambda ds: ds.map_batches(Model, resources={"tpu": 1}), False),
        (lambda ds: ds.map_batches(len), False),  # tasks: Ray fuses the reduce itself
    ],
)
def test_a_reduce_folds_into_a_cpu_actor_pool_only(build, expected):
    ds = build(docs().expand_lineage(pages)).reduce_lineage()
    assert folds_into(stage(ds, -2), stage(ds)) is expected


@pytest.mark.parametrize(
    "options",
    [{"num_cpus": 1}, {"concurrency": 2}, {"memory": 10**9}, {"scheduling_strategy": "SPREAD"}],
)
def test_a_reduce_with_compute_of_its_own_runs_as_a_step_of_its_own(options):
    ds = docs().expand_lineage(pages).map_batches(Model).reduce_lineage(**options)
    assert not folds_into(stage(ds, -2), stage(ds))


def test_a_reduce_folds_into_nothing_but_a_1_to_1_stage():
    class Join:
        def __call__(self, parent, children):
            return parent

    ds = docs().expand_lineage(pages).map_batches(Model)
    assert not folds_into(stage(ds), stage(ds.reduce_lineage(Join)))  # its own actor pool
    nested = docs().expand_lineage(pages).expand_lineage(pages).reduce_lineage()
    assert not folds_into(stage(nested, -2), stage(nested))  # after an expansion


def test_consecutive_reduces_fold_into_the_same_host():
    ds = (
        docs()
        .expand_lineage(pages)
        .expand_lineage(pages, name="lines")
        .map_batches(Model)
        .reduce_lineage()
        .reduce_lineage(name="docs")
    )
    steps = FoldReduces().apply(apply(ChooseRunner(), ds)).steps
    assert [s.index for s in steps] == [0, 1, 2]
    assert [s.index for s in steps[-1].then] == [3, 4]


# -- batches: who cuts batch_size batches ---------------------------------------------------------
@pytest.mark.parametrize(
    ("build", "source_rows", "expected"),
    [
        (
            lambda ds: ds.map_batches(len, batch_size=32),
            64,
            Batches.OPERATOR,
        ),  # whole source blocks
        (lambda ds: ds.map_batches(len, batch_size=32), 16, Batches.RAY),  # Ray bundles small ones
        (lambda ds: ds.map_batches(len, batch_size=32), 0, Batches.RAY),  # unknown
        (lambda ds: ds.map_batches(Model, batch_size=32), 64, Batches.RAY),  # an actor's work items
        (lambda ds: ds.map_batches(len), 64, Batches.WHOLE),  # no batch_size
        (lambda ds: ds.map(len), 64, Batches.WHOLE),
        (lambda ds: ds.expand_lineage(pages, batch_size=4), 64, Batches.RAY),
        (lambda ds: ds.expand_lineage(pages), 64, Batches.WHOLE),
        # children of a CPU function: blocks of several batches, one hand-off per block
        (lambda ds: ds.expand_lineage(pages).map_batches(len, batch_size=32), 0, Batches.OPERATOR),
        (lambda ds: ds.expand_lineage(pages).map_batches(len, batch_size=4096), 0, Batches.RAY),
        (lambda ds: ds.expand_lineage(pages).map_batches(Model, batch_size=32), 0, Batches.RAY),
        (lambda ds: ds.expand_lineage(pages).reduce_lineage(), 64, Batches.WHOLE),
    ],
)
def test_who_cuts_the_batches(build, source_rows, expected):
    ds = build(docs())
    index = len(ds.plan.stages) - 1
    assert who_cuts(ds.plan, index, source_rows) is expected
    step = apply(CutBatches(), ds, source_block_rows=source_rows).steps[-1]
    assert step.batches is expected
    assert step.batch_size == getattr(stage(ds), "batch_size", None)


# -- terminal: the step that runs the last stage reports the terminal rows -----------------------
def test_the_last_stage_reports_the_terminal_rows_folded_or_not():
    plain = docs().expand_lineage(pages).map_batches(len)
    assert [s.terminal for s in apply(EndInLastStep(), plain).steps] == [False, True]
    folded = docs().expand_lineage(pages).map_batches(Model).reduce_lineage()
    host = physical_plan(folded.plan).steps[-1]
    assert not host.terminal and [s.terminal for s in host.then] == [True]
    assert physical_plan(docs().plan).steps == ()  # no stage: the terminal rows alone


# -- one_piece: the last task step joins its chunks ----------------------------------------------
@pytest.mark.parametrize(
    ("build", "expected"),
    [
        (lambda ds: ds.map_batches(len, batch_size=4), True),
        (lambda ds: ds.expand_lineage(pages).reduce_lineage(), True),
        (lambda ds: ds.map_batches(Model), False),  # an actor pool: Ray would not fuse it
        (lambda ds: ds.expand_lineage(pages), False),  # its blocks are re-cut after it
    ],
)
def test_only_the_last_step_as_tasks_and_not_an_expansion_leaves_in_one_piece(build, expected):
    ds = build(docs())
    steps = OnePiece().apply(apply(ChooseRunner(), ds)).steps
    assert steps[-1].one_piece is expected
    assert not any(s.one_piece for s in steps[:-1])
    assert leaves_in_one_piece(stage(ds), steps[-1]) is expected


def test_one_piece_leaves_a_plan_without_steps_alone():
    plan = PhysicalPlan.of(docs().plan)
    assert OnePiece().apply(plan) == plan


# -- source blocks --------------------------------------------------------------------------------
def test_from_items_makes_at_most_max_source_blocks():
    assert [items_per_block(n) for n in (0, 1, MAX_SOURCE_BLOCKS, MAX_SOURCE_BLOCKS + 1)] == [
        1,
        1,
        1,
        2,
    ]
    assert source_block_rows(docs(200).plan) == 4
    assert source_block_rows(docs(200).exclude_roots(["0"]).plan) == 4  # 199 rows
    assert source_block_rows(docs(200).plan.restricted(frozenset({"1"}))) == 1


def test_a_ray_dataset_source_asks_the_engine():
    plan = Plan(RaySource(dataset="the user's dataset"))
    assert source_block_rows(plan) == 0  # nothing known without the engine
    assert source_block_rows(plan, lambda ds: 7 if ds == "the user's dataset" else 0) == 7
    assert source_block_rows(plan.restricted(frozenset()), lambda ds: 7) == 0  # rows are cut


# -- the optimizer and explain ---------------------------------------------------------------------
def test_the_rules_together_make_the_plan_the_lowering_translates():
    ds = (
        docs()
        .expand_lineage(pages)
        .map_batches(Model, batch_size=8)
        .reduce_lineage()
        .map_batches(len, batch_size=2)
    )
    physical = physical_plan(ds.plan, source_block_rows=4, keep_parents=True)
    assert physical.keep_parents and physical.source_block_rows == 4
    expand, model, after = physical.steps
    assert expand == Step(0, rows_per_block=8)
    assert model == Step(
        1,
        runner=Runner.POOL,
        batches=Batches.RAY,
        batch_size=8,
        then=(Step(2, rows_per_block=1024),),
        rows_per_block=1024,
    )
    assert after.batches is Batches.RAY and after.terminal and after.one_piece  # not the source's


def test_explain_prints_the_physical_plan_after_the_lineage_plan():
    text = (
        docs()
        .expand_lineage(pages, name="pages")
        .map_batches(Model, name="ocr", batch_size=32)
        .reduce_lineage(name="docs")
        .explain()
    )
    logical, physical = text.split("physical plan: the Ray Data steps after the source\n")
    assert "[2] reduce 'docs': level 1 -> 0" in logical
    assert physical.splitlines() == [
        "  1. [0] expand 'pages': tasks; whole blocks; children in blocks of 32 rows",
        "  2. [1] map 'ocr': actor pool; Ray Data cuts batches of 32; "
        "then [2] reduce 'docs' in its actors; reports the terminal rows",
    ]
    assert "1. the terminal rows (no stage left to run)" in docs().explain()
    threaded = docs().map_batches(
        AsyncModel, compute=ActorPoolStrategy(max_concurrent_calls_per_actor=3)
    )
    assert "actor pool (3 batches in flight per actor)" in threaded.explain()


# -- the watchdog's process actions are the worker's -----------------------------------------------
def test_the_watchdog_ends_the_process_only_through_what_it_is_given():
    backstops, expired, ended, never = [], threading.Event(), threading.Event(), threading.Event()

    def end():
        ended.set()
        never.wait()  # as os._exit: it does not return

    watchdog = Watchdog(end=end, backstop=backstops.append)
    watchdog.arm(3600, expired.set)
    assert backstops and backstops[-1] > 3600  # the C-level timer, past the deadline
    watchdog.disarm()
    assert backstops[-1] is None and not ended.is_set()
    watchdog.arm(0, expired.set)
    assert ended.wait(10) and expired.is_set()  # journaled first, then the end


def test_the_core_takes_no_process_level_action():
    core = pathlib.Path(ld.__file__).parent / "_core"
    for path in core.rglob("*.py"):
        text = path.read_text()
        assert "os._exit(" not in text and "import faulthandler" not in text, path
