"""What a user gets back: the public lineage columns only, Ray's consumer verbs and arguments, and no
helper actor left behind by any consumer."""

import gc
import json
import pathlib
import time

import pyarrow as pa
import pyarrow.dataset  # noqa: F401 - pa.dataset
import pytest
import ray

import lineage_data as ld
from lineage_data._core import columns as C

PUBLIC = {C.ROOT, C.OUTCOME, C.CAUSE}


def pages(row):
    if row["doc"] == "bad":
        raise OSError("unreadable")
    yield from ({"page": i, "text": f"{row['doc']}-{i}"} for i in range(row["n"]))


def docs():
    items = [{"doc": f"d{i}", "n": i % 3 + 1} for i in range(8)] + [{"doc": "bad", "n": 1}]
    return ld.from_items(items, id_column="doc")


PLANS = {
    "closed": lambda: (
        docs()
        .expand_lineage(pages, name="pages")
        .reduce_lineage(lambda p, kids: {"n_pages": len(kids)}, name="docs")
    ),
    "closed_default_reduce": lambda: docs().expand_lineage(pages, name="pages").reduce_lineage(),
    "open": lambda: docs().expand_lineage(pages, name="pages"),
    "source": lambda: docs().filter(lambda r: r["n"] > 1, name="long"),
}


def helpers():
    return [
        a["name"]
        for a in ray.util.list_named_actors(all_namespaces=True)
        if a["name"].startswith("lineage-")
    ]


def wait_no_helpers(timeout=10.0):
    deadline = time.monotonic() + timeout
    while helpers() and time.monotonic() < deadline:
        time.sleep(0.2)
    return helpers()


def reserved(names):
    return {n for n in names if C.is_reserved(n)}


@pytest.mark.parametrize("plan", sorted(PLANS))
def test_every_consumer_returns_exactly_the_public_lineage_columns(plan, tmp_path):
    ds = PLANS[plan]()
    seen = {
        "iter_batches": {
            n for b in ds.iter_batches(batch_format="pyarrow") for n in b.column_names
        },
        "iter_rows": {k for r in ds.iter_rows() for k in r},
        "take": {k for r in ds.take(3) for k in r},
        "take_batch": set(ds.take_batch(3, batch_format="pandas").columns),
        "to_arrow": set(ds.to_arrow().column_names),
        "to_pandas": set(ds.to_pandas().columns),
    }
    ds.write_parquet(str(tmp_path / "parquet"))
    seen["write_parquet"] = set(pa.dataset.dataset(str(tmp_path / "parquet")).schema.names)
    ds.write_json(str(tmp_path / "json"))
    lines = [
        json.loads(ln)
        for f in pathlib.Path(tmp_path / "json").iterdir()
        for ln in f.read_text().splitlines()
        if ln
    ]
    seen["write_json"] = {k for r in lines for k in r}
    if plan != "closed_default_reduce":  # CSV holds no list columns (as in Ray)
        ds.write_csv(str(tmp_path / "csv"))
        seen["write_csv"] = set(
            pa.dataset.dataset(str(tmp_path / "csv"), format="csv").schema.names
        )
    lowered = ds.to_ray()
    seen["to_ray"] = {k for r in lowered.take_all() for k in r}
    seen["materialize"] = {k for r in ds.materialize().take_all() for k in r}
    for consumer, names in seen.items():
        assert reserved(names) == PUBLIC, consumer


def test_keep_lineage_false_gives_committed_rows_and_user_columns_only(tmp_path):
    ds = PLANS["closed"]()
    rows = ds.take_all(keep_lineage=False)
    assert sorted(r["n_pages"] for r in rows) == sorted(i % 3 + 1 for i in range(8))
    assert all(not reserved(r) for r in rows)
    ds.write_parquet(str(tmp_path / "plain"), keep_lineage=False)
    table = pa.dataset.dataset(str(tmp_path / "plain")).to_table()
    assert table.column_names == ["n_pages"] and table.num_rows == 8
    assert ds.report().stages.filter(ds.report().stages["stage"] == "docs")["failed"].to_list() == [
        1
    ]


@pytest.mark.parametrize("option", ["min_rows_per_file", "min_bytes_per_file"])
def test_a_write_takes_rays_options_for_fewer_larger_files(option, tmp_path):
    items = [{"doc": f"d{i}", "n": i % 3 + 1} for i in range(8)]  # none fails: no repair write
    files = {}
    for name, kwargs in {"default": {}, option: {option: 10**9}}.items():
        plan = ld.from_items(items, id_column="doc").expand_lineage(pages, name="pages")
        plan.write_parquet(str(tmp_path / name), **kwargs)
        files[name] = list((tmp_path / name).glob("*.parquet"))
    assert len(files["default"]) > 1  # the plan writes several blocks, so the option has work
    assert len(files[option]) == 1
    assert pa.dataset.dataset(files[option]).count_rows() == sum(i % 3 + 1 for i in range(8))


def test_iter_batches_takes_rays_arguments():
    ds = ld.from_items([{"x": i} for i in range(10)])
    sizes = [len(b["x"]) for b in ds.iter_batches(batch_size=3, prefetch_batches=2)]
    assert sizes == [3, 3, 3, 1]
    sizes = [len(b["x"]) for b in ds.iter_batches(batch_size=3, drop_last=True)]
    assert sizes == [3, 3, 3]
    shuffled = [
        x
        for b in ds.iter_batches(batch_size=4, local_shuffle_buffer_size=5, local_shuffle_seed=1)
        for x in b["x"].tolist()
    ]
    assert sorted(shuffled) == list(range(10))
    assert sorted(r["x"] for r in ds.iter_rows(prefetch_batches=2)) == list(range(10))
    batch = ds.take_batch(4)
    assert isinstance(batch, dict) and batch["x"].tolist() == [0, 1, 2, 3]
    with pytest.raises(ValueError, match="limit"):
        ds.take_all(limit=5)
    with pytest.raises(ValueError, match="limit"):
        ds.to_pandas(limit=5)


def test_limit_take_and_show_run_only_the_first_roots(capsys):
    ds = docs().expand_lineage(pages, name="pages").reduce_lineage(name="docs")
    rows = ds.take(3)
    assert sorted(r[C.ROOT] for r in rows) == ["d0", "d1", "d2"]
    assert ds.report().parents.height == 3  # only those roots ran
    assert ds.limit(2).count() == 2
    open_rows = docs().expand_lineage(pages).take(2)  # rows of the first two roots, every page
    assert sorted((r[C.ROOT], r["page"]) for r in open_rows) == [("d0", 0), ("d1", 0), ("d1", 1)]
    ds.show(2)
    assert capsys.readouterr().out.count("_lineage_root") == 2


def test_schema_columns_stats_and_column_verbs():
    ds = ld.from_items([{"x": i, "y": str(i)} for i in range(5)])
    assert ds.columns() == ["x", "y", C.ROOT, C.OUTCOME, C.CAUSE]
    assert ds.schema().field("x").type == pa.int64()
    out = (
        ds.select_columns(["x"])
        .with_column("z", ray.data.expressions.col("x") * 2)
        .with_column("w", lambda batch: pa.compute.add(batch["x"], 1))
        .rename_columns({"z": "double"})
        .drop_columns("w")
    )
    rows = out.take_all()
    assert sorted((r["x"], r["double"]) for r in rows) == [(i, 2 * i) for i in range(5)]
    assert {k for r in rows for k in r} == {"x", "double"} | PUBLIC
    assert "parents: 5 committed" in out.stats()
    with pytest.raises(ld.PlanError, match="not in the rows"):
        ds.select_columns(["nope"])
    with pytest.raises(ld.UserCodeError, match="drop_columns"):
        ds.map(lambda r: r).drop_columns(["nope"]).take_all()


def test_materialize_returns_a_lineage_dataset_read_again_without_rerunning():
    calls = ld.from_items([{"x": i} for i in range(6)]).map(lambda r: {"x": r["x"] + 1}, name="inc")
    mat = calls.materialize()
    assert isinstance(mat, ld.LineageDataset)
    first = mat.take_all()
    assert mat.take_all() == first and mat.count() == 6
    assert mat.report() is calls.report()
    more = mat.map(lambda r: {"x": r["x"] * 10}, name="times10").take_all()
    assert sorted(r["x"] for r in more) == [10 * (i + 1) for i in range(6)]
    assert sorted(r["x"] for r in mat.take(2)) == [1, 2]


def test_iter_torch_batches_gives_tensors_of_committed_rows():
    import torch

    ds = ld.from_items([{"x": float(i)} for i in range(7)]).filter(lambda r: r["x"] != 3)
    batches = list(ds.iter_torch_batches(batch_size=4))
    assert all(isinstance(b["x"], torch.Tensor) for b in batches)
    assert sorted(torch.cat([b["x"] for b in batches]).tolist()) == [0, 1, 2, 4, 5, 6]
    assert set(batches[0]) == {"x"}


def test_no_helper_survives_take_an_abandoned_iterator_or_a_consumed_to_ray():
    ds = docs().expand_lineage(pages, name="pages").reduce_lineage(name="docs")
    assert wait_no_helpers() == []
    ds.take(3)
    assert helpers() == []
    it = ds.iter_batches(batch_size=1)
    assert helpers() == []  # an iterator that never ran starts nothing
    next(it)
    assert helpers() != []
    del it
    gc.collect()
    assert wait_no_helpers() == []
    lowered = ds.to_ray()
    assert helpers() != []
    assert len(lowered.take_all()) == 9
    assert wait_no_helpers() == []
    with pytest.raises(Exception, match="executes once"):
        lowered.map(lambda r: r).take_all()
    with pytest.raises(ld.UserCodeError):
        ds.map(lambda r: 1 / 0, on_error="raise").take_all()
    assert wait_no_helpers() == []


def test_a_from_ray_run_leaves_the_users_dataset_as_it_was():
    src = ray.data.range(6)
    before = src.context.raise_original_map_exception
    lowered = ld.from_ray(src).map(lambda r: {"id": r["id"] + 1}).to_ray()
    assert sorted(r["id"] for r in lowered.take_all()) == [1, 2, 3, 4, 5, 6]
    assert src.context.custom_execution_callback_classes == []
    assert src.context.raise_original_map_exception == before
    # the user's dataset and those derived from it still run, as often as they like
    assert sorted(r["id"] for r in src.map(lambda r: r).take_all()) == list(range(6))
    assert ld.from_ray(src).count() == 6


def test_the_last_progress_line_never_waits_for_a_stopped_coordinator(monkeypatch, tmp_path):
    # The final line of a consumer is drawn after its pass stopped the helpers. It asked the stopped
    # coordinator, and the call waited helper_timeout_s (30 s) for it: every run with progress on
    # (`lineage-data run`, a terminal) ended 30 s late. It must come from the pass's last counts.
    import threading

    from lineage_data._ray import execute
    from lineage_data._ray.coordinator import CoordinatorClient

    monkeypatch.setenv("LINEAGE_DATA_PROGRESS", "1")
    monkeypatch.setenv("LINEAGE_DATA_PROGRESS_INTERVAL_S", "0.05")
    stopped, late = set(), []
    close, snapshot = execute._Pass.close, CoordinatorClient.snapshot

    def closing(self):
        if isinstance(self.client, CoordinatorClient):
            stopped.add(self.client.name)
        close(self)

    def snapshot_of(self):
        if self.name in stopped and threading.current_thread() is threading.main_thread():
            late.append(self.name)
        return snapshot(self)

    monkeypatch.setattr(execute._Pass, "close", closing)
    monkeypatch.setattr(CoordinatorClient, "snapshot", snapshot_of)
    assert len(PLANS["closed"]().take_all()) == 9
    PLANS["open"]().write_parquet(str(tmp_path / "open"))
    written = pa.dataset.dataset(str(tmp_path / "open")).count_rows()
    assert written == 16  # 15 pages, the stand-in of "bad"
    assert stopped and late == []
