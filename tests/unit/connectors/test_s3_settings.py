"""S3 settings, redaction and error translation: no server, no network."""

import copy
import pickle

import pytest

from connectors.s3 import (
    ENV_VARIABLES,
    S3AccessError,
    S3BucketNotFoundError,
    S3ConnectionError,
    S3Settings,
    pyarrow_s3_filesystem,
    redact,
    resolve_filesystem,
    s3_errors,
    s3_filesystem,
)
from lineage_data._core.errors import LineageError

KEY = "AKIAIOSFODNN7EXAMPLE"
SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
TOKEN = "FwoGZXIvYXdzEXAMPLETOKEN0123456789"

_AWS = ENV_VARIABLES


@pytest.fixture
def clean_env(monkeypatch):
    for name in _AWS:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def _full():
    return S3Settings(
        endpoint_url="http://127.0.0.1:8333",
        access_key=KEY,
        secret_key=SECRET,
        region="eu-west-1",
        session_token=TOKEN,
    )


def test_from_env_reads_standard_variables():
    env = {
        "AWS_ENDPOINT_URL": "http://127.0.0.1:8333",
        "AWS_ACCESS_KEY_ID": KEY,
        "AWS_SECRET_ACCESS_KEY": SECRET,
        "AWS_SESSION_TOKEN": TOKEN,
        "AWS_DEFAULT_REGION": "eu-west-1",
    }
    assert S3Settings.from_env(env) == _full()


def test_from_env_precedence_and_empty_values():
    env = {
        "AWS_ENDPOINT_URL": "http://generic:1",
        "AWS_ENDPOINT_URL_S3": "http://s3-specific:2",
        "AWS_REGION": "ap-south-1",
        "AWS_DEFAULT_REGION": "eu-west-1",
        "AWS_ACCESS_KEY_ID": "",
        "AWS_SECRET_ACCESS_KEY": "  ",
    }
    settings = S3Settings.from_env(env)
    assert settings.endpoint_url == "http://s3-specific:2"
    assert settings.region == "ap-south-1"
    assert settings.access_key is None
    assert settings.secret_key is None
    assert not settings.anonymous


def test_from_env_uses_os_environ(clean_env):
    clean_env.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9000")
    clean_env.setenv("AWS_NO_SIGN_REQUEST", "YES")
    clean_env.setenv("AWS_ACCESS_KEY_ID", KEY)  # ignored: anonymous wins
    settings = S3Settings.from_env()
    assert settings == S3Settings(endpoint_url="http://127.0.0.1:9000", anonymous=True)
    assert S3Settings.from_env({}) == S3Settings()


def test_from_env_refuses_half_a_key_pair():
    with pytest.raises(ValueError, match="AWS_SECRET_ACCESS_KEY"):
        S3Settings.from_env({"AWS_ACCESS_KEY_ID": KEY})


def test_to_env_round_trips():
    for settings in (_full(), S3Settings(endpoint_url="http://h:1", anonymous=True), S3Settings()):
        assert S3Settings.from_env(settings.to_env()) == settings


def test_repr_and_str_hide_credentials():
    settings = _full()
    for shown in (repr(settings), str(settings), f"{settings}", f"{settings!r}", repr([settings])):
        assert SECRET not in shown
        assert TOKEN not in shown
        assert KEY not in shown
        assert "access_key='AK***'" in shown
        assert "secret_key='***'" in shown
        assert "session_token='***'" in shown
        assert "http://127.0.0.1:8333" in shown
    assert settings.access_key_hint == "AK***"
    assert S3Settings(access_key="short", secret_key="x").access_key_hint == "***"
    assert "secret_key=None" in repr(S3Settings())


def test_settings_are_frozen_picklable_and_hashable():
    settings = _full()
    assert pickle.loads(pickle.dumps(settings)) == settings
    assert copy.deepcopy(settings) == settings
    assert hash(settings) == hash(pickle.loads(pickle.dumps(settings)))
    with pytest.raises(AttributeError):
        settings.secret_key = "x"  # type: ignore[misc]
    changed = settings.replace(region="us-west-2")
    assert changed.region == "us-west-2"
    assert changed.secret_key == SECRET


@pytest.mark.parametrize(
    "kwargs",
    [
        {"anonymous": True, "access_key": KEY, "secret_key": SECRET},
        {"access_key": KEY},
        {"secret_key": SECRET},
        {"endpoint_url": "127.0.0.1:8333"},
    ],
)
def test_invalid_settings_are_rejected(kwargs):
    with pytest.raises(ValueError):
        S3Settings(**kwargs)


def test_signing_region_defaults_for_custom_endpoint():
    assert S3Settings(endpoint_url="http://h:1").signing_region == "us-east-1"
    assert S3Settings().signing_region is None
    assert S3Settings(region="eu-west-1").signing_region == "eu-west-1"


def test_redact_scrubs_every_credential():
    text = f"key={KEY} secret={SECRET} token={TOKEN} url=https://x/?X-Amz-Credential={KEY}/2026"
    scrubbed = redact(text, _full())
    assert SECRET not in scrubbed
    assert TOKEN not in scrubbed
    assert KEY not in scrubbed
    assert "key=AK*** secret=*** token=***" in scrubbed


def test_redact_short_values_only_where_they_stand_alone():
    settings = S3Settings(access_key="ab", secret_key="cd")
    assert redact("abcd cd ab", settings) == "abcd *** ***"


def test_redact_defaults_to_environment(clean_env):
    clean_env.setenv("AWS_ACCESS_KEY_ID", KEY)
    clean_env.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    assert redact(f"boom {SECRET}") == "boom ***"
    assert redact("nothing to hide", S3Settings()) == "nothing to hide"


def test_s3_filesystem_configuration():
    fs = s3_filesystem(_full(), skip_instance_cache=True)
    assert fs.endpoint_url == "http://127.0.0.1:8333"
    assert (fs.key, fs.secret, fs.token, fs.anon) == (KEY, SECRET, TOKEN, False)
    assert fs.config_kwargs["s3"] == {"addressing_style": "path"}
    assert fs.config_kwargs["retries"]["mode"] == "standard"
    assert fs.client_kwargs["region_name"] == "eu-west-1"
    assert fs.dircache.use_listings_cache is False  # listings always fresh
    assert SECRET not in repr(fs)


def test_s3_filesystem_overrides(clean_env):
    clean_env.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:7000")
    fs = s3_filesystem(anonymous=True, region="us-west-2", use_listings_cache=True)
    assert fs.anon is True
    assert fs.endpoint_url == "http://127.0.0.1:7000"
    assert fs.client_kwargs["region_name"] == "us-west-2"
    assert fs.dircache.use_listings_cache is True
    aws = s3_filesystem(S3Settings(region="eu-central-1"), skip_instance_cache=True)
    assert aws.endpoint_url is None
    assert "s3" not in aws.config_kwargs  # virtual-host addressing stays AWS's default


def test_pyarrow_filesystem_configuration():
    fs = pyarrow_s3_filesystem(_full())
    options = fs.__reduce__()[1][0]
    assert options["endpoint_override"] == "127.0.0.1:8333"
    assert options["scheme"] == "http"
    assert options["region"] == "eu-west-1"
    assert options["access_key"] == KEY
    assert options["allow_bucket_creation"] is True
    assert SECRET not in repr(fs)
    anonymous = pyarrow_s3_filesystem(
        S3Settings(endpoint_url="https://s3.example:9000", anonymous=True)
    )
    options = anonymous.__reduce__()[1][0]
    assert (options["anonymous"], options["scheme"]) == (True, "https")


def test_error_classes_share_the_lineage_root():
    assert issubclass(S3AccessError, LineageError)
    assert issubclass(S3AccessError, PermissionError)
    assert issubclass(S3BucketNotFoundError, FileNotFoundError)
    assert issubclass(S3ConnectionError, ConnectionError)
    assert str(S3AccessError("denied")) == "denied"


class _ClientError(Exception):
    """Shaped like botocore's ClientError: the error code lives in ``response``."""

    def __init__(self, code, message):
        super().__init__(message)
        self.response = {"Error": {"Code": code, "Message": message}}


class NoCredentialsError(Exception):
    """Named like botocore's: classification goes by the type name."""


def _raise_translated(code, message, kind=PermissionError):
    """What s3fs raises: a Python OSError whose __cause__ is the ClientError."""
    err = kind(message)
    err.__cause__ = _ClientError(code, message)
    raise err


def test_s3_errors_translates_denied_without_leaking():
    settings = _full()
    with pytest.raises(S3AccessError) as info, s3_errors("s3://bucket/a/b", settings):
        _raise_translated("SignatureDoesNotMatch", f"bad signature for {KEY} / {SECRET}")
    message = str(info.value)
    assert message.startswith("access denied to s3://bucket/a/b: check AWS_ACCESS_KEY_ID")
    assert "http://127.0.0.1:8333" in message
    assert "SignatureDoesNotMatch" in message
    assert SECRET not in message
    assert KEY not in message
    assert info.value.__suppress_context__


def test_s3_errors_other_kinds():
    settings = S3Settings(endpoint_url="http://127.0.0.1:8333", anonymous=True)
    with pytest.raises(S3AccessError, match="anonymous access denied"), s3_errors("b", settings):
        _raise_translated("AccessDenied", "Access Denied.")
    with pytest.raises(S3BucketNotFoundError, match="s3://b "), s3_errors("s3://b/k", settings):
        _raise_translated("NoSuchBucket", "no bucket", FileNotFoundError)
    with pytest.raises(S3AccessError, match="no S3 credentials"), s3_errors("s3://b", settings):
        raise NoCredentialsError("Unable to locate credentials")
    with pytest.raises(S3ConnectionError, match="cannot reach"), s3_errors("s3://b", settings):
        raise OSError("AWS Error NETWORK_CONNECTION: curlCode: 7, Couldn't connect to server")
    with pytest.raises(S3AccessError), s3_errors("s3://b", settings):
        raise OSError("AWS Error ACCESS_DENIED during HeadBucket operation: No response body.")


def test_s3_errors_leaves_other_errors_alone():
    with pytest.raises(FileNotFoundError) as info, s3_errors("s3://b/k"):
        _raise_translated("NoSuchKey", "missing key", FileNotFoundError)
    assert not isinstance(info.value, LineageError)
    with pytest.raises(ValueError, match="plain"), s3_errors("s3://b/k"):
        raise ValueError("plain")


def test_resolve_filesystem_local_and_memory(tmp_path):
    fs, path = resolve_filesystem(str(tmp_path) + "/")
    assert path == str(tmp_path)
    assert fs.protocol[0] == "file" or "file" in fs.protocol
    mem, mem_path = resolve_filesystem("memory://bucket/x")
    mem.pipe(f"{mem_path}/a", b"1")
    assert mem.cat(f"{mem_path}/a") == b"1"


def test_resolve_filesystem_s3_url_uses_env(clean_env):
    clean_env.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:7001")
    clean_env.setenv("AWS_ACCESS_KEY_ID", KEY)
    clean_env.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    fs, path = resolve_filesystem("s3://bucket/prefix/")
    assert path == "bucket/prefix"
    assert fs.endpoint_url == "http://127.0.0.1:7001"
    assert fs.key == KEY
    fs2, path2 = resolve_filesystem("s3a://bucket/k.parquet", fs)
    assert (fs2, path2) == (fs, "bucket/k.parquet")


def test_resolve_filesystem_rejects_bad_input():
    with pytest.raises(ValueError):
        resolve_filesystem("")
    with pytest.raises(TypeError):
        resolve_filesystem("s3://b/k", filesystem=object())
