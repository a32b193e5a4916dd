"""Where files live: one resolver from a path to an fsspec filesystem, and S3 errors that say why.

S3 goes through s3fs configured by botocore, with what botocore lacks added (:func:`s3_filesystem`;
see the S3 configuration guide). Nothing here imports Ray:

    >>> fs, path = resolve_filesystem("memory://bucket/docs/")
    >>> path
    '/bucket/docs'
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator, Mapping
from typing import Any

import fsspec
from fsspec.implementations.local import LocalFileSystem

from lineage_data.exceptions import (
    LineageError,
    S3AccessError,
    S3BucketNotFoundError,
    S3ConnectionError,
)

__all__ = [
    "S3AccessError",
    "S3BucketNotFoundError",
    "S3ConnectionError",
    "classify_s3_error",
    "is_s3",
    "resolve_filesystem",
    "s3_endpoint",
    "s3_error",
    "s3_errors",
    "s3_filesystem",
]

S3_SCHEMES = ("s3://", "s3a://")


# -- filesystems ---------------------------------------------------------------------------------


def _profile_config(profile: str | None) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(full config, profile section)`` of the shared config file, as botocore reads it."""
    import botocore.exceptions
    import botocore.session

    try:
        session = botocore.session.Session(profile=profile)
        return session.full_config, session.get_scoped_config()
    except botocore.exceptions.BotoCoreError:  # a missing profile fails later, where s3fs uses it
        return {}, {}


def _configured_endpoint(options: Mapping[str, Any], config: Any = None) -> str | None:
    """The endpoint botocore will use for these s3fs options (None: AWS itself), in its order.

    ``config`` is :func:`_profile_config`'s answer when the caller has it already.
    """
    explicit = options.get("endpoint_url") or (options.get("client_kwargs") or {}).get(
        "endpoint_url"
    )
    if explicit:
        return str(explicit)
    full, scoped = config or _profile_config(options.get("profile"))
    ignore = os.environ.get(
        "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS", scoped.get("ignore_configured_endpoint_urls", "")
    )
    if str(ignore).lower() == "true":
        return None
    from_env = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    if from_env:
        return from_env
    services = full.get("services", {}).get(scoped.get("services", ""), {})
    return services.get("s3", {}).get("endpoint_url") or scoped.get("endpoint_url")


def s3_filesystem(**storage_options: Any) -> Any:
    """An ``s3fs.S3FileSystem`` configured by botocore, with the defaults botocore lacks.

    Added unless given: path-style addressing when an endpoint is configured and the profile sets
    no ``addressing_style``; 5 standard retries; 10 s connect and 60 s read timeouts; uncached
    listings. Each call builds a new instance (changed credentials are read again); it pickles with
    its options. ``storage_options`` are ``s3fs.S3FileSystem``'s and win over these defaults.
    """
    try:
        import s3fs
    except ImportError as exc:
        raise ImportError("S3 paths need s3fs: pip install 'lineage-data[s3]'") from exc
    options = dict(storage_options)
    config = dict(options.pop("config_kwargs", None) or {})
    config.setdefault("connect_timeout", 10)
    config.setdefault("read_timeout", 60)
    config.setdefault("retries", {"max_attempts": 5, "mode": "standard"})
    profile = _profile_config(options.get("profile"))
    styled = (profile[1].get("s3") or {}).get("addressing_style")
    if "s3" not in config and not styled and _configured_endpoint(options, profile):
        config["s3"] = {"addressing_style": "path"}
    options.setdefault("use_listings_cache", False)
    options.setdefault("skip_instance_cache", True)
    return s3fs.S3FileSystem(config_kwargs=config, **options)


def resolve_filesystem(path: str, filesystem: Any = None) -> tuple[Any, str]:
    """The filesystem for ``path`` and the path as that filesystem expects it (no trailing ``/``).

    - an explicit ``filesystem`` (fsspec, or a ``pyarrow.fs.FileSystem``, wrapped in fsspec's
      ``ArrowFSWrapper``) is used as given;
    - ``s3://`` / ``s3a://``: :func:`s3_filesystem`, the path as ``bucket/key``;
    - a local path or ``file://`` URL: the local filesystem and an absolute path;
    - any other URL (``memory://``, ``gs://`` ...): whatever fsspec resolves it to.

    Raises:
        ValueError: ``path`` is empty.
        TypeError: ``filesystem`` is neither an fsspec nor a pyarrow filesystem.
    """
    if not isinstance(path, str) or not path:
        raise ValueError(f"path must be a non-empty string, got {path!r}")
    if filesystem is not None:
        if isinstance(filesystem, fsspec.AbstractFileSystem):
            return filesystem, filesystem._strip_protocol(path)
        from pyarrow import fs as pafs

        if not isinstance(filesystem, pafs.FileSystem):
            raise TypeError(
                "filesystem must be an fsspec or pyarrow filesystem, "
                f"got {type(filesystem).__name__}"
            )
        from fsspec.implementations.arrow import ArrowFSWrapper

        wrapped = ArrowFSWrapper(filesystem)
        return wrapped, wrapped._strip_protocol(path.split("://", 1)[-1])
    if path.startswith(S3_SCHEMES):
        s3 = s3_filesystem()
        return s3, s3._strip_protocol(path)
    if "://" not in path or path.startswith("file://"):
        local = LocalFileSystem()
        return local, local._strip_protocol(os.path.expanduser(path))
    return fsspec.core.url_to_fs(path)


# -- errors --------------------------------------------------------------------------------------

# botocore ``Error.Code`` values and pyarrow's AWS error names, by what they mean.
_CREDENTIAL_CODES = frozenset(
    {
        "InvalidAccessKeyId",
        "SignatureDoesNotMatch",
        "ExpiredToken",
        "InvalidToken",
        "TokenRefreshRequired",
        "INVALID_ACCESS_KEY_ID",
        "SIGNATURE_DOES_NOT_MATCH",
        "EXPIRED_TOKEN",
    }
)
_DENIED_CODES = frozenset(
    {"AccessDenied", "AllAccessDisabled", "Forbidden", "403", "ACCESS_DENIED"}
)
_NO_CREDENTIALS = frozenset({"NoCredentialsError", "PartialCredentialsError", "ProfileNotFound"})
_UNREACHABLE = frozenset({"EndpointConnectionError", "ConnectTimeoutError", "ConnectTimeout"})
_UNREACHABLE_TEXT = ("Couldn't connect to server", "curlCode: 7", "NETWORK_CONNECTION")
_ARROW_CODE = re.compile(r"AWS Error ([A-Z_]+)")


def is_s3(fs: Any = None, path: str = "") -> bool:
    """Whether ``path`` or ``fs`` (s3fs, or pyarrow's S3 filesystem, wrapped or not) is S3."""
    if path.startswith(S3_SCHEMES):
        return True
    inner = getattr(fs, "fs", fs)  # fsspec's ArrowFSWrapper keeps the pyarrow filesystem as .fs
    if getattr(inner, "type_name", None) == "s3":
        return True
    protocol = getattr(fs, "protocol", ())
    return bool({"s3", "s3a"} & set((protocol,) if isinstance(protocol, str) else protocol))


def _error_code(exc: BaseException) -> str | None:
    """The S3 error code behind ``exc`` (s3fs keeps botocore's ClientError as ``__cause__``)."""
    for current in _chain(exc):
        response = getattr(current, "response", None)
        if isinstance(response, dict) and response.get("Error", {}).get("Code"):
            return str(response["Error"]["Code"])
        match = _ARROW_CODE.search(str(current))
        if match:
            return match.group(1)
    return None


def _chain(exc: BaseException) -> list[BaseException]:
    found: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in found:
        found.append(current)
        current = current.__cause__ or current.__context__
    return found


def classify_s3_error(exc: BaseException) -> str | None:
    """What an exception from an S3 call means, or None when it is none of these.

    ``"credentials"`` (keys wrong, expired or missing: every request of the job will fail),
    ``"denied"`` (the request is not allowed; one object's policy can cause it), ``"bucket"``
    (no such bucket) or ``"unreachable"`` (no answer from the endpoint).
    """
    if isinstance(exc, LineageError):
        return None
    code = _error_code(exc)
    chain = _chain(exc)
    names = {type(e).__name__ for e in chain}
    if names & _NO_CREDENTIALS or code in _CREDENTIAL_CODES:
        return "credentials"
    if code in ("NoSuchBucket", "NO_SUCH_BUCKET"):
        return "bucket"
    if code in _DENIED_CODES or (code is None and isinstance(exc, PermissionError)):
        return "denied"
    if names & _UNREACHABLE or any(isinstance(e, ConnectionError) for e in chain):
        return "unreachable"
    if any(marker in str(exc) for marker in _UNREACHABLE_TEXT):
        return "unreachable"
    return None


def s3_endpoint(fs: Any = None) -> str:
    """The endpoint ``fs`` talks to (or would talk to), as messages show it."""
    endpoint = None
    inner = getattr(fs, "fs", None)  # a pyarrow S3FileSystem in fsspec's ArrowFSWrapper
    if getattr(inner, "type_name", None) == "s3":
        with contextlib.suppress(Exception):
            reduced: Any = inner.__reduce__()  # (rebuild, (options,))
            options = reduced[1][0]
            override = options.get("endpoint_override")
            endpoint = override and f"{options.get('scheme') or 'https'}://{override}"
    elif is_s3(fs):
        client = getattr(fs, "_s3", None)  # s3fs, once connected: botocore's own answer
        endpoint = getattr(getattr(client, "meta", None), "endpoint_url", None)
        endpoint = endpoint or _configured_endpoint(fs.storage_options)
    return str(endpoint) if endpoint else "the default AWS endpoint"


def s3_error(exc: BaseException, path: str, fs: Any = None) -> LineageError | None:
    """``exc`` from an S3 call on ``path`` as one of the errors above, or None to keep it.

    Only the error code goes into the message: the text of a botocore error can hold signed
    headers, so it is left out.
    """
    if not is_s3(fs, path):
        return None
    kind = classify_s3_error(exc)
    if kind is None:
        return None
    url = "s3://" + (path.split("://", 1)[1] if path.startswith(S3_SCHEMES) else path).strip("/")
    endpoint = s3_endpoint(fs)
    why = _error_code(exc) or type(exc).__name__
    if kind == "credentials":
        return S3AccessError(
            f"S3 refused the credentials for {url} at endpoint {endpoint} ({why}): check "
            "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or AWS_PROFILE, or the filesystem's key/secret"
        )
    if kind == "denied":
        return S3AccessError(f"access denied to {url} at endpoint {endpoint} ({why})")
    if kind == "bucket":
        bucket = url[len("s3://") :].split("/", 1)[0]
        return S3BucketNotFoundError(f"bucket s3://{bucket} does not exist at endpoint {endpoint}")
    return S3ConnectionError(
        f"cannot reach S3 endpoint {endpoint} for {url} ({why}): check AWS_ENDPOINT_URL"
    )


@contextlib.contextmanager
def s3_errors(path: str, fs: Any = None) -> Iterator[None]:
    """Raise credential, missing-bucket and connection failures of S3 calls as our errors.

    Inside the block, on an S3 ``path`` (the URL or ``bucket/key`` accessed) or ``fs``, they become
    :class:`S3AccessError`, :class:`S3BucketNotFoundError` or :class:`S3ConnectionError` (not
    chained to the original, whose text can hold signed headers); the rest passes through.
    """
    try:
        yield
    except Exception as exc:
        error = s3_error(exc, path, fs)
        if error is None:
            raise
        raise error from None
