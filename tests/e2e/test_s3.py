"""S3 on a real SeaweedFS server on loopback: botocore configuration, typed errors, tooling."""

import os
import pickle
import re
import signal
import socket
import subprocess
import sys
import time
import traceback

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyarrow import fs as pafs

import lineage_data as ld
from lineage_data._core.errors import LineageError
from lineage_data._ray.datasource import _read
from lineage_data.connectors.s3 import (
    S3AccessError,
    S3BucketNotFoundError,
    S3ConnectionError,
    check_access,
    resolve_filesystem,
    s3_filesystem,
)
from lineage_data.connectors.shards import write_shards
from lineage_data.connectors.testing.seaweed import SeaweedError, SeaweedServer

pytestmark = pytest.mark.e2e

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WRONG = "WRONG-secret-value-0123456789"


def _bucket(url: str) -> str:
    return url[len("s3://") :]


def _arrow(server, **changes):
    options = {
        "endpoint_override": server.endpoint_url.split("://", 1)[1],
        "scheme": "http",
        "region": "us-east-1",
        "access_key": server.storage_options["key"],
        "secret_key": server.storage_options["secret"],
        "retry_strategy": pafs.AwsStandardS3RetryStrategy(max_attempts=1),
    }
    return pafs.S3FileSystem(**{**options, **changes})


def assert_names_endpoint_not_secret(err, server, url):
    message = str(err)
    assert isinstance(err, LineageError)
    assert server.endpoint_url in message
    assert url in message
    rendered = "".join(traceback.format_exception(err)) + repr(err)
    assert server.storage_options["secret"] not in rendered
    assert WRONG not in rendered


# -- the server and plain filesystems ----------------------------------------------------------------


def test_server_is_up_quickly(s3_server):
    assert s3_server.running
    assert s3_server.auth
    assert re.fullmatch(r"http://127\.0\.0\.1:\d+", s3_server.endpoint_url)
    assert s3_server.startup_seconds is not None
    assert s3_server.startup_seconds < 15
    assert len(set(s3_server.ports.values())) == len(s3_server.ports)  # one port each


def test_s3fs_round_trip_and_pickling(s3_bucket):
    fs, url = s3_bucket
    bucket = _bucket(url)
    payloads = {f"{bucket}/docs/{i:03d}.bin": os.urandom(100 + i) for i in range(3)}
    payloads[f"{bucket}/docs/nested/deep.txt"] = b"deep"
    for path, data in payloads.items():
        fs.pipe(path, data)
    assert sorted(fs.find(f"{bucket}/docs")) == sorted(payloads)
    assert f"{bucket}/docs/nested" in fs.ls(f"{bucket}/docs", detail=False)
    again = pickle.loads(pickle.dumps(fs))  # what a Ray worker gets
    for path, data in payloads.items():
        assert again.cat(path) == data
    with fs.open(f"{bucket}/docs/001.bin", "rb") as handle:
        handle.seek(10)
        assert handle.read(5) == payloads[f"{bucket}/docs/001.bin"][10:15]
    fs.rm(f"{bucket}/docs/000.bin")
    assert not fs.exists(f"{bucket}/docs/000.bin")


def test_pyarrow_filesystem_is_wrapped_and_reads_what_s3fs_wrote(s3_server, s3_bucket):
    fs, url = s3_bucket
    table = pa.table({"id": list(range(100))})
    arrow = _arrow(s3_server)
    pq.write_table(table, f"{_bucket(url)}/t/part-0.parquet", filesystem=arrow)
    wrapped, path = resolve_filesystem(url + "/t", arrow)
    assert path == f"{_bucket(url)}/t"
    assert wrapped.ls(path, detail=False) == [f"{path}/part-0.parquet"]
    with fs.open(f"{path}/part-0.parquet", "rb") as handle:
        assert pq.read_table(handle).equals(table)
    check_access(wrapped, url)
    with pytest.raises(S3BucketNotFoundError, match=re.escape(s3_server.endpoint_url)):
        check_access(wrapped, "s3://no-such-bucket-here")


def test_check_access_passes_and_finds_missing_bucket(s3_server, s3_bucket):
    fs, url = s3_bucket
    check_access(fs, url)
    check_access(fs, url + "/no/such/prefix/yet")
    with pytest.raises(S3BucketNotFoundError, match="create_bucket=True") as info:
        check_access(fs, "s3://no-such-bucket-here")
    assert s3_server.endpoint_url in str(info.value)
    assert not fs.exists("no-such-bucket-here")


@pytest.mark.parametrize("mistake", ["secret", "key", "anonymous", "arrow"])
def test_wrong_credentials_are_refused_without_leaking(s3_server, s3_bucket, mistake):
    _, url = s3_bucket
    if mistake == "secret":
        bad = s3_server.filesystem(secret=WRONG)
    elif mistake == "key":
        bad = s3_server.filesystem(key="AKIANOSUCHKEY0000", secret=WRONG)
    elif mistake == "anonymous":
        bad = s3_filesystem(endpoint_url=s3_server.endpoint_url, anon=True)
    else:
        bad = resolve_filesystem(url, _arrow(s3_server, secret_key=WRONG))[0]
    with pytest.raises(S3AccessError) as info:
        check_access(bad, url)
    assert isinstance(info.value, PermissionError)
    assert_names_endpoint_not_secret(info.value, s3_server, url)


def test_unreachable_endpoint_is_a_connection_error(aws_env):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    fs = s3_filesystem(
        endpoint_url=f"http://127.0.0.1:{port}",
        key="AKIAX",
        secret="s3cr3t-x",
        config_kwargs={"retries": {"max_attempts": 1}, "connect_timeout": 2},
    )
    fs.retries = 1
    with pytest.raises(S3ConnectionError, match=f"127.0.0.1:{port}") as info:
        check_access(fs, "s3://anything")
    assert "s3cr3t-x" not in str(info.value)


# -- botocore's own configuration -----------------------------------------------------------------


def test_aws_variables_configure_s3_urls(s3_env, s3_bucket):
    _, url = s3_bucket
    fs, path = resolve_filesystem(url + "/shards/")
    assert path == f"{_bucket(url)}/shards"
    assert fs.config_kwargs["s3"] == {"addressing_style": "path"}  # AWS_ENDPOINT_URL is custom
    fs.pipe(f"{path}/one.txt", b"via env")
    assert fs.cat(f"{path}/one.txt") == b"via env"
    assert [f.rsplit("/", 1)[-1] for f, _ in ld.read_files(url + "/shards").plan.source.files] == [
        "one.txt"
    ]


def _profile_files(tmp_path, server, *, secret):
    credentials = tmp_path / "credentials"
    credentials.write_text(
        f"[ldtest]\naws_access_key_id = {server.storage_options['key']}\n"
        f"aws_secret_access_key = {secret}\n"
    )
    config = tmp_path / "config"
    config.write_text(
        f"[profile ldtest]\nregion = us-east-1\nendpoint_url = {server.endpoint_url}\n"
    )
    return {
        "AWS_PROFILE": "ldtest",
        "AWS_SHARED_CREDENTIALS_FILE": str(credentials),
        "AWS_CONFIG_FILE": str(config),
    }


def test_aws_profile_with_shared_files_works(s3_server, s3_bucket, aws_env, tmp_path):
    fs, url = s3_bucket
    fs.pipe(f"{_bucket(url)}/in/a.pdf", b"%PDF")
    for name, value in _profile_files(
        tmp_path, s3_server, secret=s3_server.storage_options["secret"]
    ).items():
        aws_env.setenv(name, value)
    profiled, path = resolve_filesystem(url + "/in")
    assert profiled.config_kwargs["s3"] == {"addressing_style": "path"}  # the profile's endpoint
    assert profiled.ls(path, detail=False) == [f"{path}/a.pdf"]
    files = ld.read_files(url + "/in").plan.source.files
    assert list(files) == [(f"{url}/in/a.pdf", 4)]
    check_access(profiled, url)


def test_aws_profile_with_a_wrong_secret_is_refused(s3_server, s3_bucket, aws_env, tmp_path):
    _, url = s3_bucket
    for name, value in _profile_files(tmp_path, s3_server, secret=WRONG).items():
        aws_env.setenv(name, value)
    with pytest.raises(S3AccessError) as info:
        ld.read_files(url + "/")
    assert_names_endpoint_not_secret(info.value, s3_server, url)


# -- typed errors on every path: read_files, read tasks, write_shards ---------------------------------


def test_read_files_listing_with_a_wrong_secret(s3_server, s3_bucket):
    fs, url = s3_bucket
    fs.pipe(f"{_bucket(url)}/in/a.pdf", b"%PDF")
    with pytest.raises(S3AccessError) as info:
        ld.read_files(url + "/in/", filesystem=s3_server.filesystem(secret=WRONG))
    assert_names_endpoint_not_secret(info.value, s3_server, url)
    assert len(str(info.value).splitlines()) == 1


def test_read_files_wrong_secret_from_the_environment(s3_env, s3_bucket, aws_env):
    fs, url = s3_bucket
    fs.pipe(f"{_bucket(url)}/in/a.pdf", b"%PDF")
    aws_env.setenv("AWS_SECRET_ACCESS_KEY", WRONG)
    with pytest.raises(S3AccessError) as info:
        ld.read_files(url + "/in/")
    assert_names_endpoint_not_secret(info.value, s3_env, url)


def test_read_files_in_a_missing_bucket(s3_server, bucket_name):
    with pytest.raises(S3BucketNotFoundError, match=f"s3://{bucket_name} does not exist"):
        ld.read_files(f"s3://{bucket_name}/in/", filesystem=s3_server.filesystem())


def test_read_task_with_a_wrong_secret_raises_instead_of_failing_roots(s3_server, s3_bucket):
    fs, url = s3_bucket
    fs.pipe(f"{_bucket(url)}/in/a.pdf", b"%PDF")
    files = [(f"{url}/in/a.pdf", 4)]
    (table,) = list(_read(fs, files))  # right keys: the bytes
    assert table["bytes"].to_pylist() == [b"%PDF"]
    with pytest.raises(S3AccessError) as info:
        list(_read(s3_server.filesystem(secret=WRONG), files))
    assert_names_endpoint_not_secret(info.value, s3_server, url)


def test_a_deleted_object_still_fails_its_root_only(s3_bucket):
    fs, url = s3_bucket
    fs.pipe(f"{_bucket(url)}/in/a.pdf", b"%PDF")
    files = [(f"{url}/in/a.pdf", 4), (f"{url}/in/gone.pdf", 4)]
    (table,) = list(_read(fs, files))
    rows = {r["path"]: r for r in table.to_pylist()}
    assert rows[f"{url}/in/a.pdf"]["_lineage_outcome"] == "PRESENT"
    assert rows[f"{url}/in/gone.pdf"]["_lineage_outcome"] == "FAILED"
    assert rows[f"{url}/in/gone.pdf"]["_lineage_cause"].startswith("FileNotFoundError")


def _docs():
    return ld.from_items([{"doc": "a"}, {"doc": "b"}], id_column="doc")


def test_write_shards_with_a_wrong_secret(s3_server, s3_bucket):
    _, url = s3_bucket
    with pytest.raises(S3AccessError) as info:  # checked before anything runs: no Ray here
        write_shards(_docs(), url + "/out", filesystem=s3_server.filesystem(secret=WRONG))
    assert_names_endpoint_not_secret(info.value, s3_server, url)


def test_write_shards_to_a_missing_bucket_is_an_error(s3_server, bucket_name):
    fs = s3_server.filesystem()
    with pytest.raises(S3BucketNotFoundError, match="create_bucket=True"):
        write_shards(_docs(), f"s3://{bucket_name}/out", filesystem=fs)
    assert not fs.exists(bucket_name)  # a mistyped bucket is not created


def test_write_shards_creates_the_bucket_when_asked(ray_session, s3_server, bucket_name):
    fs = s3_server.filesystem()
    result = write_shards(_docs(), f"s3://{bucket_name}/out", filesystem=fs, create_bucket=True)
    assert (result.rows, result.dead_letter_rows) == (2, 0)
    assert fs.exists(bucket_name)


# -- the command line ---------------------------------------------------------------------------------


def _cli(args, env, cwd=ROOT):
    clean = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    return subprocess.run(
        [sys.executable, "-m", "lineage_data.connectors.cli", *args],
        cwd=cwd,
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_cli_wrong_secret_is_one_line_without_traceback(s3_server, s3_bucket, tmp_path):
    _, url = s3_bucket
    env = {
        **s3_server.env,
        "AWS_SECRET_ACCESS_KEY": WRONG,
        "AWS_CONFIG_FILE": str(tmp_path / "x"),
        "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "y"),
    }
    report = _cli(["report", url + "/out"], env)
    script = tmp_path / "pipeline.py"
    script.write_text(f"import lineage_data as ld\nld.read_files({url + '/in/'!r})\n")
    run = _cli(["run", str(script)], env)
    for proc in (report, run):
        assert proc.returncode != 0
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1, proc.stderr
        assert lines[0].startswith("lineage-data: S3AccessError: ")
        assert s3_server.endpoint_url in lines[0]
        assert "Traceback" not in proc.stderr + proc.stdout
        assert WRONG not in proc.stderr + proc.stdout


# -- the SeaweedFS tooling ----------------------------------------------------------------------------


def test_make_bucket_is_idempotent_and_validates(s3_server):
    assert s3_server.make_bucket("idempotent-bucket") == "s3://idempotent-bucket"
    assert s3_server.make_bucket("idempotent-bucket") == "s3://idempotent-bucket"
    with pytest.raises(ValueError, match="bucket name"):
        s3_server.make_bucket("No_Such")


def test_anonymous_server_in_own_directory(tmp_path):
    started = time.monotonic()
    with SeaweedServer(tmp_path / "data", s3_port=0) as server:
        assert time.monotonic() - started < 15
        assert not server.auth
        assert server.storage_options["anon"] is True
        url = server.make_bucket("open-bucket")
        fs = server.filesystem()
        fs.pipe("open-bucket/a.txt", b"anyone")
        check_access(fs, url)
        assert "secret" not in repr(server)
    assert not server.running
    assert (tmp_path / "data").is_dir()  # a given data directory is kept
    with pytest.raises(SeaweedError, match="not running"):
        server.make_bucket("too-late")
    server.stop()  # twice is fine


def test_start_failure_reports_log_tail(tmp_path):
    fake = tmp_path / "weed"
    fake.write_text("#!/bin/sh\necho 'fake weed: cannot start' >&2\nexit 3\n")
    fake.chmod(0o755)
    server = SeaweedServer(s3_port=0, binary=str(fake), start_timeout=5)
    with pytest.raises(SeaweedError, match=r"(?s)exited with code 3.*fake weed: cannot start"):
        server.start()
    assert not server.running


def test_busy_s3_port_is_reported():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        with pytest.raises(SeaweedError, match="already in use"):
            SeaweedServer(s3_port=port).start()


def test_seaweed_module_serves_in_foreground(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "lineage_data.connectors.testing.seaweed",
            "--dir",
            str(tmp_path),
            "--port",
            "0",
            "--bucket",
            "cli-bucket",
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        line = proc.stdout.readline()
        match = re.search(r"endpoint: (http://127\.0\.0\.1:\d+)", line)
        assert match, line
        fs = s3_filesystem(endpoint_url=match.group(1), anon=True)
        assert fs.ls("cli-bucket") == []
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()
