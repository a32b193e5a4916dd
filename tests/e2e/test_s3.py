"""The S3 connector against a real SeaweedFS server on loopback."""

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

from connectors.s3 import (
    S3AccessError,
    S3BucketNotFoundError,
    S3ConnectionError,
    S3Settings,
    check_access,
    pyarrow_s3_filesystem,
    resolve_filesystem,
    s3_filesystem,
)
from connectors.seaweed import SeaweedError, SeaweedServer
from lineage_data._core.errors import LineageError

pytestmark = pytest.mark.e2e

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _bucket(url: str) -> str:
    return url[len("s3://") :]


def test_server_is_up_quickly(s3_server):
    assert s3_server.running
    assert s3_server.auth
    assert re.fullmatch(r"http://127\.0\.0\.1:\d+", s3_server.endpoint_url)
    assert s3_server.startup_seconds is not None
    assert s3_server.startup_seconds < 15
    # every component on its own loopback port
    assert len(set(s3_server.ports.values())) == len(s3_server.ports)


def test_s3fs_round_trip(s3_bucket):
    settings, url = s3_bucket
    bucket = _bucket(url)
    fs = s3_filesystem(settings)
    payloads = {f"{bucket}/docs/{i:03d}.bin": os.urandom(100 + i) for i in range(5)}
    payloads[f"{bucket}/docs/nested/deep.txt"] = b"deep"
    for path, data in payloads.items():
        fs.pipe(path, data)

    assert sorted(fs.find(f"{bucket}/docs")) == sorted(payloads)
    top = fs.ls(f"{bucket}/docs", detail=False)
    assert f"{bucket}/docs/nested" in top
    assert f"{bucket}/docs/000.bin" in top
    for path, data in payloads.items():
        assert fs.cat(path) == data
        assert fs.info(path)["size"] == len(data)
    with fs.open(f"{bucket}/docs/003.bin", "rb") as handle:
        handle.seek(10)
        assert handle.read(5) == payloads[f"{bucket}/docs/003.bin"][10:15]

    fs.rm(f"{bucket}/docs/000.bin")
    assert not fs.exists(f"{bucket}/docs/000.bin")
    assert len(fs.find(f"{bucket}/docs")) == len(payloads) - 1


def test_pyarrow_round_trip_and_cross_read(s3_bucket):
    settings, url = s3_bucket
    bucket = _bucket(url)
    fs = pyarrow_s3_filesystem(settings)
    table = pa.table({"id": list(range(1000)), "text": [f"row {i}" for i in range(1000)]})
    pq.write_table(table, f"{bucket}/tables/part-0.parquet", filesystem=fs)
    with fs.open_output_stream(f"{bucket}/tables/_SUCCESS") as out:
        out.write(b"")

    infos = fs.get_file_info(pafs.FileSelector(f"{bucket}/tables", recursive=True))
    names = sorted(info.path for info in infos if info.type == pafs.FileType.File)
    assert names == [f"{bucket}/tables/_SUCCESS", f"{bucket}/tables/part-0.parquet"]
    assert pq.read_table(f"{bucket}/tables/part-0.parquet", filesystem=fs).equals(table)

    # what pyarrow wrote, s3fs reads, and the other way round
    s3 = s3_filesystem(settings)
    with s3.open(f"{bucket}/tables/part-0.parquet", "rb") as handle:
        assert pq.read_table(handle).equals(table)
    s3.pipe(f"{bucket}/from-s3fs.txt", b"hello arrow")
    with fs.open_input_stream(f"{bucket}/from-s3fs.txt") as handle:
        assert handle.read() == b"hello arrow"


def test_settings_and_filesystems_survive_pickling(s3_bucket):
    settings, url = s3_bucket
    bucket = _bucket(url)
    fs = pickle.loads(pickle.dumps(s3_filesystem(pickle.loads(pickle.dumps(settings)))))
    fs.pipe(f"{bucket}/p.txt", b"pickled")
    arrow = pickle.loads(pickle.dumps(pyarrow_s3_filesystem(settings)))
    with arrow.open_input_stream(f"{bucket}/p.txt") as handle:
        assert handle.read() == b"pickled"


def test_check_access_passes_and_finds_missing_bucket(s3_server, s3_bucket):
    settings, url = s3_bucket
    check_access(s3_filesystem(settings), url)
    check_access(s3_filesystem(settings), url + "/no/such/prefix/yet")
    check_access(pyarrow_s3_filesystem(settings), _bucket(url))
    for fs in (s3_filesystem(settings), pyarrow_s3_filesystem(settings)):
        with pytest.raises(S3BucketNotFoundError, match=re.escape(s3_server.endpoint_url)):
            check_access(fs, "s3://no-such-bucket-here")


def _wrong(settings, **changes):
    return settings.replace(**changes)


@pytest.mark.parametrize("make_fs", [s3_filesystem, pyarrow_s3_filesystem])
@pytest.mark.parametrize("mistake", ["secret", "key", "anonymous"])
def test_wrong_credentials_are_refused_without_leaking(s3_server, s3_bucket, make_fs, mistake):
    settings, url = s3_bucket
    right_secret = settings.secret_key
    wrong_secret = "WRONG-secret-value-0123456789"
    if mistake == "secret":
        bad = settings.replace(secret_key=wrong_secret)
    elif mistake == "key":
        bad = settings.replace(access_key="AKIANOSUCHKEY0000", secret_key=wrong_secret)
    else:
        bad = settings.replace(access_key=None, secret_key=None, anonymous=True)

    with pytest.raises(S3AccessError) as info:
        check_access(make_fs(bad), url)

    err = info.value
    message = str(err)
    assert isinstance(err, LineageError)
    assert isinstance(err, PermissionError)
    assert s3_server.endpoint_url in message
    assert url in message
    assert "AWS_ACCESS_KEY_ID" in message
    rendered = "".join(traceback.format_exception(err)) + repr(err)
    assert right_secret not in rendered
    assert wrong_secret not in rendered
    assert settings.access_key not in rendered


def test_wrong_credentials_on_plain_operations(s3_bucket):
    """Without check_access, s3fs still refuses (as PermissionError): the server enforces keys."""
    settings, url = s3_bucket
    bad = s3_filesystem(settings.replace(secret_key="another-wrong-secret-42"))
    with pytest.raises(PermissionError):
        bad.pipe(f"{_bucket(url)}/x.txt", b"nope")
    assert not s3_filesystem(settings).exists(f"{_bucket(url)}/x.txt")


def test_unreachable_endpoint_is_a_connection_error():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    settings = S3Settings(
        endpoint_url=f"http://127.0.0.1:{port}", access_key="AKIAX", secret_key="s3cr3t-x"
    )
    quick_s3 = s3_filesystem(
        settings, config_kwargs={"retries": {"max_attempts": 1}}, skip_instance_cache=True
    )
    quick_s3.retries = 1
    quick_arrow = pyarrow_s3_filesystem(
        settings, retry_strategy=pafs.AwsStandardS3RetryStrategy(max_attempts=1)
    )
    for fs in (quick_s3, quick_arrow):
        with pytest.raises(S3ConnectionError, match=f"127.0.0.1:{port}") as info:
            check_access(fs, "s3://anything")
        assert "s3cr3t-x" not in str(info.value)


def test_resolve_filesystem_local(tmp_path):
    target = tmp_path / "in" / "a.txt"
    target.parent.mkdir()
    target.write_bytes(b"local")
    for given in (str(tmp_path / "in") + "/", "file://" + str(tmp_path / "in")):
        fs, path = resolve_filesystem(given)
        assert path == str(tmp_path / "in")
        assert fs.cat(f"{path}/a.txt") == b"local"


def test_resolve_filesystem_s3_url_from_env(s3_env, s3_bucket):
    settings, url = s3_bucket
    assert s3_env == settings
    fs, path = resolve_filesystem(url + "/shards/")
    assert path == f"{_bucket(url)}/shards"
    assert fs.endpoint_url == settings.endpoint_url
    fs.pipe(f"{path}/one.txt", b"via env")
    assert fs.cat(f"{path}/one.txt") == b"via env"
    check_access(fs, url)

    # an explicit filesystem wins, pyarrow ones included
    arrow_fs, arrow_path = resolve_filesystem(url + "/shards", pyarrow_s3_filesystem(settings))
    assert arrow_path == f"{_bucket(url)}/shards"
    assert arrow_fs.cat_file(f"{arrow_path}/one.txt") == b"via env"


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
        assert server.settings.anonymous
        url = server.make_bucket("open-bucket")
        fs = s3_filesystem(server.settings)
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


def test_cli_serves_in_foreground(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "connectors.seaweed",
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
        fs = s3_filesystem(S3Settings(endpoint_url=match.group(1), anonymous=True))
        assert fs.ls("cli-bucket") == []
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()
