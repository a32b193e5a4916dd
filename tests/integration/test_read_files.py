"""``read_files`` takes Ray Data's file-reader arguments with Ray's meaning (on local Ray)."""

import pytest
from ray.data.datasource.partitioning import PathPartitionFilter

import lineage_data as ld


@pytest.fixture
def tree(tmp_path):
    """``year=2023/a.pdf``, ``year=2024/b.PDF``, ``year=2024/c.txt``, ``year=2024/d.pdf``."""
    for name, data in {
        "year=2023/a.pdf": b"a",
        "year=2024/b.PDF": b"bb",
        "year=2024/c.txt": b"ccc",
        "year=2024/d.pdf": b"dddd",
    }.items():
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_bytes(data)
    return tmp_path


def names(ds):
    return [uri.rsplit("/", 1)[-1] for uri, _ in ds.plan.source.files]


def user_rows(ds):
    rows = sorted(ds.take_all(), key=lambda r: r[ld.ROOT])
    return [{k: v for k, v in r.items() if not k.startswith("_lineage_")} for r in rows]


def test_default_rows_have_path_size_and_bytes(tree):
    rows = user_rows(ld.read_files(str(tree)))
    assert rows[0] == {"path": str(tree / "year=2023/a.pdf"), "size": 1, "bytes": b"a"}
    assert len(rows) == 4


def test_include_paths_false_drops_the_path_column_but_not_the_root(tree):
    ds = ld.read_files(str(tree / "year=2023"), include_paths=False)
    (row,) = ds.take_all()
    assert row[ld.ROOT] == str(tree / "year=2023/a.pdf")
    assert {k for k in row if not k.startswith("_lineage_")} == {"size", "bytes"}
    assert ds.plan.columns == frozenset({"size", "bytes"})


def test_columns_choose_what_is_read(tree):
    rows = user_rows(ld.read_files(str(tree), columns=["path", "size"]))
    assert [r["size"] for r in rows] == [1, 2, 3, 4]  # from the listing: no file was read
    assert all(set(r) == {"path", "size"} for r in rows)
    with pytest.raises(ld.LineageError, match="unknown columns"):
        ld.read_files(str(tree), columns=["path", "text"])
    with pytest.raises(ld.LineageError, match="include_paths=False"):
        ld.read_files(str(tree), columns=["path"], include_paths=False)
    with pytest.raises(ld.PlanError, match="carry"):  # the plan knows the chosen columns
        ld.read_files(str(tree), columns=["bytes"]).expand_lineage(lambda r: [], carry=["path"])


def test_file_extensions_follow_ray_and_suffixes_is_an_alias(tree):
    assert names(ld.read_files(str(tree), file_extensions=["pdf"])) == ["a.pdf", "b.PDF", "d.pdf"]
    assert names(ld.read_files(str(tree), file_extensions=[".TXT"])) == ["c.txt"]
    assert names(ld.read_files(str(tree), suffixes=[".pdf"])) == ["a.pdf", "b.PDF", "d.pdf"]
    with pytest.raises(ld.LineageError, match="not both"):
        ld.read_files(str(tree), suffixes=["pdf"], file_extensions=["pdf"])
    with pytest.raises(ld.LineageError, match="no files found"):
        ld.read_files(str(tree), file_extensions=["mp4"])


def test_partition_filter_ray_style_or_a_predicate(tree):
    hive = PathPartitionFilter.of(lambda p: p.get("year") == "2024", base_dir=str(tree))
    assert names(ld.read_files(str(tree), partition_filter=hive)) == ["b.PDF", "c.txt", "d.pdf"]
    both = ld.read_files(str(tree), partition_filter=hive, file_extensions=["pdf"])
    assert names(both) == ["b.PDF", "d.pdf"]
    assert user_rows(both)[1]["bytes"] == b"dddd"
    only_a = ld.read_files(str(tree), partition_filter=lambda path: path.endswith("a.pdf"))
    assert names(only_a) == ["a.pdf"]


def test_ignore_missing_paths(tree):
    paths = [str(tree / "year=2023"), str(tree / "no-such-dir")]
    with pytest.raises(ld.LineageError, match="does not exist"):
        ld.read_files(paths)
    assert names(ld.read_files(paths, ignore_missing_paths=True)) == ["a.pdf"]


def test_a_directory_of_symbolic_links_is_read_as_ray_data_reads_it(tree, tmp_path_factory):
    """Links to files and to directories are followed; hidden entries are left out, as in Ray."""
    import ray

    links = tmp_path_factory.mktemp("links")
    (links / "a.pdf").symlink_to(tree / "year=2023/a.pdf")
    (links / "later").symlink_to(tree / "year=2024", target_is_directory=True)
    (links / ".staging.pdf").write_bytes(b"hidden")
    (links / "_SUCCESS").write_bytes(b"")
    ds = ld.read_files(str(links))
    ours = sorted(r["path"] for r in user_rows(ds))
    plain = ray.data.read_binary_files(str(links), include_paths=True).take_all()
    assert ours == sorted(r["path"] for r in plain)
    assert [p.rsplit("/", 1)[-1] for p in ours] == ["a.pdf", "b.PDF", "c.txt", "d.pdf"]
    assert next(r for r in user_rows(ds) if r["path"].endswith("a.pdf"))["bytes"] == b"a"
    (links / "loop").symlink_to(links, target_is_directory=True)  # entered once, not for ever
    (links / "gone.pdf").symlink_to(links / "nowhere.pdf")  # dangling: nothing to read
    assert names(ld.read_files(str(links))) == ["a.pdf", "b.PDF", "c.txt", "d.pdf"]
