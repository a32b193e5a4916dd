"""Typed stages and sources: each verb builds its own stage type, options are checked when it is built."""

import itertools

import pytest

import lineage_data as ld
from lineage_data._core.outcomes import Outcome, passed_as
from lineage_data._core.plan import ItemsSource, Source
from lineage_data._core.stages import (
    Compute,
    Expand,
    Filter,
    MapBatches,
    MapRows,
    Reduce,
    UserFn,
    from_options,
)


def pages(row):
    return [{"p": i} for i in range(row["n"])]


class Model:
    def __init__(self, scale):
        self.scale = scale

    def __call__(self, batch, *args, **kwargs):
        return self.scale, batch, args, kwargs


def test_each_verb_builds_its_own_stage_type_with_its_own_options():
    ds = (
        ld.from_items([{"doc": "a", "n": 2}], id_column="doc")
        .filter(lambda r: True, name="keep")
        .expand_lineage(pages, name="pages", carry=["doc"], batch_size=4)
        .map_batches(Model, name="ocr", batch_size=8, fn_constructor_args=(2,), num_gpus=1)
        .map(lambda r: r, name="clean")
        .reduce_lineage(name="docs", on_child_failure="skip")
    )
    stages = ds.plan.stages
    assert [type(s) for s in stages] == [Filter, Expand, MapBatches, MapRows, Reduce]
    keep, expand, ocr, clean, docs = stages
    assert expand.carry == ("doc",) and expand.batch_size == 4
    assert ocr.batch_size == 8 and ocr.batch_format == "default" and ocr.max_retries == 1
    assert ocr.call == UserFn(Model, constructor_args=(2,))
    assert ocr.compute == Compute(num_gpus=1)
    assert docs.on_child_failure == "skip" and docs.call.fn is None
    assert [s.level_out for s in stages] == [0, 1, 1, 1, 0]
    assert not hasattr(keep, "batch_size") and not hasattr(clean, "carry")


def test_ray_options_split_into_the_call_and_where_it_runs():
    call, compute = from_options(
        Model,
        {
            "fn_args": [1],
            "fn_kwargs": {"k": 2},
            "fn_constructor_kwargs": {"scale": 3},
            "concurrency": 2,
            "num_cpus": 0.5,
            "memory": 1e9,
            "resources": {"gpu_sim": 1},
            "runtime_env": None,
        },
    )
    assert call == UserFn(Model, args=(1,), kwargs={"k": 2}, constructor_kwargs={"scale": 3})
    assert compute.concurrency == 2
    assert compute.resources() == {"resources": {"gpu_sim": 1}, "num_cpus": 0.5, "memory": 1e9}
    # Ray calls fn(batch, *fn_args, **fn_kwargs) on the instance built with the constructor args
    assert call.bind()(7) == (3, 7, (1,), {"k": 2})


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (
            lambda: MapBatches(name="m", level=0, call=UserFn(len), batch_format="arrow"),
            "batch_format",
        ),
        (lambda: MapBatches(name="m", level=0, call=UserFn(len), batch_size=0), "batch_size"),
        (lambda: MapBatches(name="m", level=0, call=UserFn(len), max_retries=-1), "max_retries"),
        (lambda: MapRows(name="m", level=0, call=UserFn(len), on_error="ignore"), "on_error"),
        (lambda: Reduce(name="r", level=1, call=UserFn(None), on_child_failure="x"), "on_child"),
        (lambda: Filter(name="f", level=0, call=UserFn(None)), "fn is required"),
        (lambda: Expand(name="e", level=0, call=UserFn(3)), "must be callable"),
        (lambda: MapRows(name="m", level=0, call=UserFn(len, constructor_args=(1,))), "class"),
        (
            lambda: MapRows(name="m", level=0, call=UserFn(len), compute=Compute(concurrency=0)),
            "concurrency",
        ),
    ],
)
def test_a_bad_option_is_a_plan_error_when_the_stage_is_built(build, message):
    with pytest.raises(ld.PlanError, match=message):
        build()


def test_workers_get_the_source_without_its_rows_or_roots():
    plan = ld.from_items([{"doc": "a"}, {"doc": "b"}], id_column="doc").plan
    assert isinstance(plan.source, ItemsSource) and plan.source.roots == ("a", "b")
    shipped = plan.for_workers().source
    assert type(shipped) is Source and shipped.roots is None and shipped.id_column == "doc"


def test_outcome_at_each_stage_follows_the_final_outcome_and_the_deciding_stage():
    # Written out by hand, independently of passed_as: before the deciding stage a root passed
    # PRESENT, at it FAILED (or DROPPED), after it SUPPRESSED (or DROPPED); PRESENT stays PRESENT.
    expected = {"before": "PRESENT", "at": None, "after": None}
    for final, position in itertools.product(Outcome, range(4)):
        got = passed_as(final, position, 2).value
        where = "before" if position < 2 else "at" if position == 2 else "after"
        if final is Outcome.PRESENT or where == "before":
            assert got == expected["before"]
        elif final is Outcome.DROPPED:
            assert got == "DROPPED"
        else:
            assert got == {"at": "FAILED", "after": "SUPPRESSED"}[where]
        assert passed_as(final, position, None) is Outcome.PRESENT


def test_a_connector_s_native_call_brings_its_own_timeout_which_the_user_can_change():
    import functools
    import math

    from lineage_data.connectors.pdf import PAGE_TIMEOUT_S, PdfPages, render_pages
    from lineage_data.connectors.video import CLIP_TIMEOUT_S, clip_audio, split_clips

    docs = ld.from_items([{"doc": "a"}], id_column="doc")

    def timeout(ds):
        return ds.plan.stages[-1].timeout_s

    assert timeout(docs.expand_lineage(render_pages)) == PAGE_TIMEOUT_S
    assert timeout(docs.expand_lineage(PdfPages, fn_constructor_kwargs={"dpi": 50})) == 120.0
    assert timeout(docs.expand_lineage(functools.partial(split_clips, clip_seconds=2))) == (
        CLIP_TIMEOUT_S
    )
    assert timeout(docs.map(clip_audio)) == CLIP_TIMEOUT_S
    assert timeout(docs.expand_lineage(render_pages, timeout_s=5)) == 5  # the user's number wins
    assert timeout(docs.expand_lineage(render_pages, timeout_s=math.inf)) is None  # none at all
    assert timeout(docs.expand_lineage(lambda r: [r])) is None  # a plain function: no limit
