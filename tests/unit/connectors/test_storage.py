"""The filesystem resolver, S3 defaults and error translation: no server, no network, no Ray."""

import subprocess
import sys

import fsspec
import pytest

from lineage_data._core.errors import LineageError
from lineage_data.connectors.s3 import (
    S3AccessError,
    S3BucketNotFoundError,
    S3ConnectionError,
    check_access,
    resolve_filesystem,
    s3_errors,
    s3_filesystem,
)
from lineage_data.storage import classify_s3_error, s3_endpoint

KEY = "AKIAIOSFODNN7EXAMPLE"
SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
AWS = (
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_S3",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_PROFILE",
    "AWS_DEFAULT_PROFILE",
    "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS",
)


@pytest.fixture
def aws(monkeypatch, tmp_path):
    """No AWS configuration but what the test writes (never the machine's ~/.aws)."""
    for name in AWS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "credentials"))
    return monkeypatch


def test_storage_loads_no_ray():
    code = (
        "import sys, lineage_data.storage, lineage_data.connectors.s3, lineage_data.connectors.manifest\n"
        "import lineage_data.connectors.testing.corpus, lineage_data.connectors.testing.seaweed, lineage_data.connectors.echo_llm\n"
        "sys.exit(1 if any(m == 'ray' or m.startswith('ray.') for m in sys.modules) else 0)"
    )
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


# -- defaults: only what botocore lacks ---------------------------------------------------------------


def test_explicit_endpoint_gets_path_style_and_bounded_retries(aws):
    fs = s3_filesystem(endpoint_url="http://127.0.0.1:8333", key=KEY, secret=SECRET)
    assert fs.config_kwargs["s3"] == {"addressing_style": "path"}
    assert fs.config_kwargs["retries"] == {"max_attempts": 5, "mode": "standard"}
    assert (fs.config_kwargs["connect_timeout"], fs.config_kwargs["read_timeout"]) == (10, 60)
    assert fs.dircache.use_listings_cache is False
    assert (fs.key, fs.secret) == (KEY, SECRET)  # given keys travel with the filesystem
    assert SECRET not in repr(fs)


@pytest.mark.parametrize("variable", ["AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"])
def test_endpoint_from_the_environment_gets_path_style(aws, variable):
    aws.setenv(variable, "http://minio.internal:9000")
    fs, path = resolve_filesystem("s3://bucket/prefix/")
    assert path == "bucket/prefix"
    assert fs.endpoint_url is None  # botocore reads the variable itself
    assert fs.config_kwargs["s3"] == {"addressing_style": "path"}
    assert fs.key is None and fs.secret is None  # credentials: botocore's chain, per process
    assert s3_endpoint(fs) == "http://minio.internal:9000"


def test_endpoint_from_the_profile_and_its_own_addressing_style(aws, tmp_path):
    (tmp_path / "config").write_text(
        "[profile minio]\nendpoint_url = http://minio.internal:9000\n"
        "[profile styled]\nendpoint_url = http://minio.internal:9000\ns3 =\n"
        "    addressing_style = virtual\n"
    )
    assert s3_filesystem(profile="minio").config_kwargs["s3"] == {"addressing_style": "path"}
    assert "s3" not in s3_filesystem(profile="styled").config_kwargs  # the profile decides
    aws.setenv("AWS_PROFILE", "minio")
    assert s3_filesystem().config_kwargs["s3"] == {"addressing_style": "path"}
    aws.setenv("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS", "true")
    assert "s3" not in s3_filesystem().config_kwargs


def test_aws_itself_keeps_botocore_defaults(aws):
    fs = s3_filesystem()
    assert "s3" not in fs.config_kwargs  # virtual-host addressing stays AWS's default
    assert s3_endpoint(fs) == "the default AWS endpoint"
    given = s3_filesystem(config_kwargs={"s3": {"addressing_style": "virtual"}, "read_timeout": 5})
    assert given.config_kwargs["s3"] == {"addressing_style": "virtual"}
    assert given.config_kwargs["read_timeout"] == 5


def test_resolve_filesystem_local_memory_and_explicit(tmp_path):
    fs, path = resolve_filesystem(str(tmp_path) + "/")
    assert path == str(tmp_path)
    assert "file" in fs.protocol
    assert resolve_filesystem("file://" + str(tmp_path))[1] == str(tmp_path)
    mem, mem_path = resolve_filesystem("memory://bucket/x")
    mem.pipe(f"{mem_path}/a", b"1")
    assert mem.cat(f"{mem_path}/a") == b"1"
    assert resolve_filesystem("memory://bucket/k", mem) == (mem, "/bucket/k")  # as given


def test_resolve_filesystem_wraps_pyarrow(tmp_path):
    from pyarrow import fs as pafs

    wrapped, path = resolve_filesystem(str(tmp_path), pafs.LocalFileSystem())
    assert isinstance(wrapped, fsspec.AbstractFileSystem)
    assert path == str(tmp_path)


def test_resolve_filesystem_rejects_bad_input():
    with pytest.raises(ValueError):
        resolve_filesystem("")
    with pytest.raises(TypeError):
        resolve_filesystem("s3://b/k", filesystem=object())


# -- error translation --------------------------------------------------------------------------------


class _ClientError(Exception):
    """Shaped like botocore's ClientError: the error code lives in ``response``."""

    def __init__(self, code, message):
        super().__init__(message)
        self.response = {"Error": {"Code": code, "Message": message}}


class NoCredentialsError(Exception):
    """Named like botocore's: classification goes by the type name."""


class EndpointConnectionError(Exception):
    """Named like botocore's."""


def _s3fs_error(code, message, kind=PermissionError):
    """What s3fs raises: a Python OSError whose __cause__ is the ClientError."""
    err = kind(message)
    err.__cause__ = _ClientError(code, message)
    return err


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        (_s3fs_error("SignatureDoesNotMatch", "bad signature"), "credentials"),
        (_s3fs_error("InvalidAccessKeyId", "no such key"), "credentials"),
        (NoCredentialsError("Unable to locate credentials"), "credentials"),
        (_s3fs_error("AccessDenied", "Access Denied."), "denied"),
        (_s3fs_error("403", "Forbidden"), "denied"),
        (OSError("AWS Error ACCESS_DENIED during HeadBucket operation"), "denied"),
        (_s3fs_error("NoSuchBucket", "no bucket", FileNotFoundError), "bucket"),
        (EndpointConnectionError("Could not connect to the endpoint URL"), "unreachable"),
        (OSError("AWS Error NETWORK_CONNECTION: curlCode: 7, Couldn't connect"), "unreachable"),
        (_s3fs_error("NoSuchKey", "missing key", FileNotFoundError), None),
        (ValueError("plain"), None),
        (S3AccessError("ours already"), None),
    ],
)
def test_classification(error, kind):
    assert classify_s3_error(error) == kind


def test_s3_errors_translate_without_leaking():
    fs = s3_filesystem(endpoint_url="http://127.0.0.1:8333", key=KEY, secret=SECRET)
    with pytest.raises(S3AccessError) as info, s3_errors("s3://bucket/a/b", fs):
        raise _s3fs_error("SignatureDoesNotMatch", f"bad signature for {KEY} / {SECRET}")
    message = str(info.value)
    assert message.startswith("S3 refused the credentials for s3://bucket/a/b at endpoint ")
    assert "http://127.0.0.1:8333" in message
    assert "(SignatureDoesNotMatch)" in message
    assert SECRET not in message and KEY not in message
    assert info.value.__suppress_context__ and info.value.__cause__ is None
    assert isinstance(info.value, LineageError) and isinstance(info.value, PermissionError)


def test_s3_errors_other_kinds():
    fs = s3_filesystem(endpoint_url="http://127.0.0.1:8333", anon=True)
    with pytest.raises(S3AccessError, match="access denied to s3://b"), s3_errors("b", fs):
        raise _s3fs_error("AccessDenied", "Access Denied.")
    with pytest.raises(S3BucketNotFoundError, match="s3://b does not"), s3_errors("s3://b/k", fs):
        raise _s3fs_error("NoSuchBucket", "no bucket", FileNotFoundError)
    with pytest.raises(S3ConnectionError, match="cannot reach"), s3_errors("s3://b", fs):
        raise EndpointConnectionError("Could not connect")


def test_s3_errors_leave_other_errors_and_other_filesystems_alone(tmp_path):
    with pytest.raises(FileNotFoundError) as info, s3_errors("s3://b/k"):
        raise _s3fs_error("NoSuchKey", "missing key", FileNotFoundError)
    assert not isinstance(info.value, LineageError)
    local = fsspec.filesystem("file")
    with pytest.raises(PermissionError) as info, s3_errors(str(tmp_path), local):
        raise PermissionError("a local file")
    assert not isinstance(info.value, LineageError)


def test_check_access_ignores_filesystems_that_are_not_s3(tmp_path):
    check_access(fsspec.filesystem("file"), str(tmp_path / "nothing-here"))
    with pytest.raises(ValueError, match="no bucket"):
        check_access(s3_filesystem(anon=True), "s3://")
