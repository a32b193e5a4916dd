"""S3 access for lineage_data: settings, filesystems, and errors that never leak secrets.

Everything here is plain Python on top of s3fs/fsspec and pyarrow; nothing imports Ray. The
settings object is picklable so it can travel to Ray workers, and its ``repr`` hides the
credentials:

    >>> S3Settings(access_key="AKIAEXAMPLE", secret_key="s3cr3t-value").access_key_hint
    'AK***'
    >>> "s3cr3t" in repr(S3Settings(access_key="AKIAEXAMPLE", secret_key="s3cr3t-value"))
    False

A typical driver-side use::

    fs, path = resolve_filesystem("s3://bucket/pdfs/")   # settings from AWS_* variables
    check_access(fs, path)                                # S3AccessError if the keys are wrong
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import fsspec
from fsspec.implementations.local import LocalFileSystem

from lineage_data._core.errors import LineageError

__all__ = [
    "S3AccessError",
    "S3BucketNotFoundError",
    "S3ConnectionError",
    "S3Settings",
    "check_access",
    "pyarrow_s3_filesystem",
    "redact",
    "resolve_filesystem",
    "s3_errors",
    "s3_filesystem",
]

_DEFAULT_REGION = "us-east-1"
_S3_SCHEMES = ("s3://", "s3a://")
_TRUE = frozenset({"1", "true", "yes", "on"})
# Codes (botocore ``Error.Code`` or pyarrow's AWS error names) that mean "your credentials".
_DENIED_CODES = frozenset(
    {
        "AccessDenied",
        "AllAccessDisabled",
        "ExpiredToken",
        "Forbidden",
        "InvalidAccessKeyId",
        "InvalidToken",
        "SignatureDoesNotMatch",
        "403",
    }
)
_DENIED_MARKERS = (
    "ACCESS_DENIED",
    "SIGNATURE_DOES_NOT_MATCH",
    "INVALID_ACCESS_KEY_ID",
    "EXPIRED_TOKEN",
    "HTTP response code: 403",
)
_CONNECT_MARKERS = ("Couldn't connect to server", "curlCode: 7", "Could not connect")


class S3AccessError(LineageError, PermissionError):
    """The S3 endpoint refused the request because of the credentials (HTTP 403).

    The message names the endpoint and the bucket, never a secret. It is also a
    :class:`PermissionError`, so code written against fsspec's errors keeps working.
    """


class S3BucketNotFoundError(LineageError, FileNotFoundError):
    """The bucket does not exist at the endpoint."""


class S3ConnectionError(LineageError, ConnectionError):
    """The S3 endpoint could not be reached at all."""


#: Every environment variable :meth:`S3Settings.from_env` reads (tests clear them for isolation).
ENV_VARIABLES = (
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_S3",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_REGION",
    "AWS_DEFAULT_REGION",
    "AWS_NO_SIGN_REQUEST",
)


def _mask(value: str | None) -> str | None:
    """A credential as it may be shown: the first two characters of a key, then ``***``."""
    if value is None:
        return None
    return value[:2] + "***" if len(value) >= 8 else "***"


@dataclass(frozen=True, repr=False)
class S3Settings:
    """Where and how to reach S3; immutable, picklable, and safe to print.

    Attributes:
        endpoint_url: Endpoint such as ``"http://127.0.0.1:8333"``; ``None`` means AWS itself.
        access_key: ``AWS_ACCESS_KEY_ID``; ``None`` lets the client use its default chain.
        secret_key: ``AWS_SECRET_ACCESS_KEY``; shown only as ``'***'``.
        region: Signing region; ``us-east-1`` is used for a custom endpoint when unset.
        anonymous: Send unsigned requests (public buckets, an open local server).
        session_token: ``AWS_SESSION_TOKEN`` for temporary credentials; shown only as ``'***'``.
    """

    endpoint_url: str | None = None
    access_key: str | None = None
    secret_key: str | None = None
    region: str | None = None
    anonymous: bool = False
    session_token: str | None = None

    def __post_init__(self) -> None:
        if self.anonymous and (self.access_key or self.secret_key or self.session_token):
            raise ValueError("anonymous S3Settings cannot also carry credentials")
        if bool(self.access_key) != bool(self.secret_key):
            raise ValueError("S3Settings needs both access_key and secret_key, or neither")
        if self.endpoint_url is not None and urlsplit(self.endpoint_url).scheme not in (
            "http",
            "https",
        ):
            raise ValueError(
                f"endpoint_url must start with http:// or https://, got {self.endpoint_url!r}"
            )

    def __repr__(self) -> str:
        return (
            f"S3Settings(endpoint_url={self.endpoint_url!r}, "
            f"access_key={self.access_key_hint!r}, "
            f"secret_key={'***' if self.secret_key else None!r}, "
            f"region={self.region!r}, anonymous={self.anonymous!r}, "
            f"session_token={'***' if self.session_token else None!r})"
        )

    __str__ = __repr__

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> S3Settings:
        """Read the standard AWS variables.

        ``AWS_ENDPOINT_URL_S3`` wins over ``AWS_ENDPOINT_URL`` (as in botocore);
        ``AWS_REGION`` wins over ``AWS_DEFAULT_REGION``. ``AWS_NO_SIGN_REQUEST=YES`` (the GDAL
        spelling) asks for anonymous access. Empty values count as unset.

        Args:
            environ: Mapping to read instead of :data:`os.environ`.

        Returns:
            The settings; fields not found in the environment are ``None``.

        Raises:
            ValueError: Only one of the access key and the secret key is set.
        """
        env = os.environ if environ is None else environ

        def get(*names: str) -> str | None:
            for name in names:
                value = env.get(name, "").strip()
                if value:
                    return value
            return None

        anonymous = (get("AWS_NO_SIGN_REQUEST") or "").lower() in _TRUE
        if not anonymous and bool(get("AWS_ACCESS_KEY_ID")) != bool(get("AWS_SECRET_ACCESS_KEY")):
            raise ValueError("set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY together, or neither")
        return cls(
            endpoint_url=get("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"),
            access_key=None if anonymous else get("AWS_ACCESS_KEY_ID"),
            secret_key=None if anonymous else get("AWS_SECRET_ACCESS_KEY"),
            region=get("AWS_REGION", "AWS_DEFAULT_REGION"),
            anonymous=anonymous,
            session_token=None if anonymous else get("AWS_SESSION_TOKEN"),
        )

    def to_env(self) -> dict[str, str]:
        """The environment variables that :meth:`from_env` reads back into equal settings.

        Useful for ``monkeypatch.setenv`` or a Ray ``runtime_env={"env_vars": ...}``.
        The result holds the secret in clear: do not log it.
        """
        env: dict[str, str] = {}
        if self.endpoint_url:
            env["AWS_ENDPOINT_URL"] = self.endpoint_url
        if self.access_key and self.secret_key:
            env["AWS_ACCESS_KEY_ID"] = self.access_key
            env["AWS_SECRET_ACCESS_KEY"] = self.secret_key
        if self.session_token:
            env["AWS_SESSION_TOKEN"] = self.session_token
        if self.region:
            env["AWS_REGION"] = self.region
        if self.anonymous:
            env["AWS_NO_SIGN_REQUEST"] = "YES"
        return env

    def replace(self, **changes: Any) -> S3Settings:
        """A copy with some fields changed (validated again)."""
        return dataclasses.replace(self, **changes)

    @property
    def access_key_hint(self) -> str | None:
        """The access key as it may be shown: its first two characters, then ``***``."""
        return _mask(self.access_key)

    @property
    def signing_region(self) -> str | None:
        """The region to sign with: the configured one, else ``us-east-1`` for a custom endpoint."""
        if self.region:
            return self.region
        return _DEFAULT_REGION if self.endpoint_url else None

    @property
    def endpoint_label(self) -> str:
        """The endpoint as shown in messages."""
        return self.endpoint_url or "the default AWS endpoint"


_FIELDS = frozenset(f.name for f in dataclasses.fields(S3Settings))


def _split_overrides(
    settings: S3Settings | None, overrides: dict[str, Any]
) -> tuple[S3Settings, dict[str, Any]]:
    base = S3Settings.from_env() if settings is None else settings
    fields = {k: overrides.pop(k) for k in list(overrides) if k in _FIELDS}
    if fields:
        base = dataclasses.replace(base, **fields)
    return base, overrides


def s3_filesystem(
    settings: S3Settings | None = None, **overrides: Any
) -> fsspec.AbstractFileSystem:
    """An ``s3fs.S3FileSystem`` for the given settings.

    Path-style addressing is used for a custom endpoint; requests use botocore's standard
    retry mode, a 10 s connect and 60 s read timeout. Listings are not cached, so a listing
    always shows what other workers wrote since.

    Args:
        settings: Where to connect; ``None`` reads :meth:`S3Settings.from_env`.
        **overrides: Fields of :class:`S3Settings` (``endpoint_url=``, ``region=`` ...) replace
            those of ``settings``; anything else goes to ``s3fs.S3FileSystem`` unchanged and
            wins over the defaults above (e.g. ``use_listings_cache=True``).

    Returns:
        The filesystem (s3fs keeps one cached instance per distinct configuration).
    """
    import s3fs

    settings, kwargs = _split_overrides(settings, dict(overrides))
    config_kwargs: dict[str, Any] = {
        "connect_timeout": 10,
        "read_timeout": 60,
        "retries": {"max_attempts": 5, "mode": "standard"},
    }
    if settings.endpoint_url:
        config_kwargs["s3"] = {"addressing_style": "path"}
    config_kwargs.update(kwargs.pop("config_kwargs", None) or {})
    client_kwargs: dict[str, Any] = {}
    if settings.signing_region:
        client_kwargs["region_name"] = settings.signing_region
    client_kwargs.update(kwargs.pop("client_kwargs", None) or {})
    options: dict[str, Any] = {
        "anon": settings.anonymous,
        "key": settings.access_key,
        "secret": settings.secret_key,
        "token": settings.session_token,
        "endpoint_url": settings.endpoint_url,
        "client_kwargs": client_kwargs,
        "config_kwargs": config_kwargs,
        "use_listings_cache": False,
    }
    options.update(kwargs)
    return s3fs.S3FileSystem(**options)


def pyarrow_s3_filesystem(settings: S3Settings | None = None, **overrides: Any) -> Any:
    """A ``pyarrow.fs.S3FileSystem`` for the given settings.

    Args:
        settings: Where to connect; ``None`` reads :meth:`S3Settings.from_env`.
        **overrides: Fields of :class:`S3Settings` replace those of ``settings``; anything else
            goes to ``pyarrow.fs.S3FileSystem`` (e.g. ``allow_bucket_creation=False``).

    Returns:
        The filesystem. Bucket creation is allowed by default (a shard sink may need it).
    """
    from pyarrow import fs as pafs

    settings, kwargs = _split_overrides(settings, dict(overrides))
    options: dict[str, Any] = {
        "anonymous": settings.anonymous,
        "allow_bucket_creation": True,
        "connect_timeout": 10,
        "request_timeout": 60,
        "retry_strategy": pafs.AwsStandardS3RetryStrategy(max_attempts=5),
    }
    if settings.access_key and settings.secret_key:
        options["access_key"] = settings.access_key
        options["secret_key"] = settings.secret_key
        if settings.session_token:
            options["session_token"] = settings.session_token
    if settings.signing_region:
        options["region"] = settings.signing_region
    if settings.endpoint_url:
        parts = urlsplit(settings.endpoint_url)
        options["scheme"] = parts.scheme
        options["endpoint_override"] = parts.netloc + parts.path.rstrip("/")
    options.update(kwargs)
    return pafs.S3FileSystem(**options)


def redact(text: str, settings: S3Settings | None = None) -> str:
    """Scrub the credentials of ``settings`` out of ``text``.

    The secret key and session token become ``***``; the access key becomes its masked form
    (``AK***``). Values shorter than 8 characters are replaced only where they stand alone,
    so that a toy secret such as ``"ab"`` does not shred the rest of the message.

    Args:
        text: Any message (an exception text, a log line).
        settings: Whose credentials to remove; ``None`` reads :meth:`S3Settings.from_env`.

    Returns:
        The text with no credential left in it.
    """
    settings = S3Settings.from_env() if settings is None else settings
    replacements = [
        (settings.session_token, "***"),
        (settings.secret_key, "***"),
        (settings.access_key, _mask(settings.access_key)),
    ]
    pairs = [(value, shown or "***") for value, shown in replacements if value]
    for value, shown in sorted(pairs, key=lambda pair: -len(pair[0])):
        if len(value) >= 8:
            text = text.replace(value, shown)
        else:
            pattern = rf"(?<![A-Za-z0-9/+=]){re.escape(value)}(?![A-Za-z0-9/+=])"
            text = re.sub(pattern, shown, text)
    return text


def _settings_of(fs: Any) -> S3Settings | None:
    """Best-effort settings behind an s3fs or pyarrow filesystem (for messages only)."""
    inner = getattr(fs, "fs", None)
    if inner is not None and not hasattr(fs, "endpoint_url"):  # fsspec ArrowFSWrapper
        fs = inner
    try:
        if hasattr(fs, "client_kwargs") and hasattr(fs, "anon"):  # s3fs
            endpoint = fs.endpoint_url or fs.client_kwargs.get("endpoint_url")
            return S3Settings(
                endpoint_url=endpoint,
                access_key=fs.key or None,
                secret_key=fs.secret or None,
                session_token=fs.token or None,
                anonymous=bool(fs.anon) and not fs.key,
            )
        reduced = fs.__reduce__()[1][0]  # pyarrow S3FileSystem: (reconstruct, (kwargs,))
        endpoint = reduced.get("endpoint_override") or None
        if endpoint and "://" not in endpoint:
            endpoint = f"{reduced.get('scheme') or 'https'}://{endpoint}"
        return S3Settings(
            endpoint_url=endpoint,
            access_key=reduced.get("access_key") or None,
            secret_key=reduced.get("secret_key") or None,
            session_token=reduced.get("session_token") or None,
            anonymous=bool(reduced.get("anonymous")) and not reduced.get("access_key"),
        )
    except Exception:  # messages only: never fail on introspection
        return None


def _error_code(exc: BaseException) -> str | None:
    """The botocore ``Error.Code`` behind an exception (s3fs keeps it as ``__cause__``)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        response = getattr(current, "response", None)
        if isinstance(response, dict):
            code = response.get("Error", {}).get("Code")
            if code:
                return str(code)
        current = current.__cause__ or current.__context__
    return None


def _classify(exc: BaseException) -> str | None:
    """``"denied"``, ``"nocreds"``, ``"unreachable"``, ``"nobucket"`` or ``None`` (leave it)."""
    if isinstance(exc, LineageError):
        return None
    name = type(exc).__name__
    code = _error_code(exc)
    text = str(exc)
    if name in ("NoCredentialsError", "PartialCredentialsError"):
        return "nocreds"
    if code == "NoSuchBucket" or "NoSuchBucket" in text or "NO_SUCH_BUCKET" in text:
        return "nobucket"
    if isinstance(exc, PermissionError) or code in _DENIED_CODES:
        return "denied"
    if any(marker in text for marker in _DENIED_MARKERS):
        return "denied"
    if name in ("EndpointConnectionError", "ConnectTimeoutError") or isinstance(
        exc, ConnectionError
    ):
        return "unreachable"
    if any(marker in text for marker in _CONNECT_MARKERS):
        return "unreachable"
    return None


def _bucket_url(path: str) -> str:
    stripped = path
    for scheme in _S3_SCHEMES:
        if stripped.startswith(scheme):
            stripped = stripped[len(scheme) :]
    return "s3://" + stripped.strip("/")


def _translate(exc: BaseException, path: str, settings: S3Settings | None) -> LineageError | None:
    kind = _classify(exc)
    if kind is None:
        return None
    settings = settings or S3Settings()
    url = _bucket_url(path)
    bucket = "s3://" + url[len("s3://") :].split("/", 1)[0]
    endpoint = settings.endpoint_label
    code = _error_code(exc)
    detail = redact(f"{code + ': ' if code else ''}{exc}".strip(), settings)
    if len(detail) > 300:
        detail = detail[:297] + "..."
    if kind == "denied":
        who = "anonymous access" if settings.anonymous else "access"
        verb = "set" if settings.anonymous or not settings.access_key else "check"
        return S3AccessError(
            f"{who} denied to {url}: {verb} AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY "
            f"for endpoint {endpoint} ({detail})"
        )
    if kind == "nocreds":
        return S3AccessError(
            f"no S3 credentials found for {url}: set AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY "
            f"for endpoint {endpoint}, or AWS_NO_SIGN_REQUEST=YES for anonymous access"
        )
    if kind == "nobucket":
        return S3BucketNotFoundError(f"bucket {bucket} does not exist at endpoint {endpoint}")
    return S3ConnectionError(
        f"cannot reach S3 endpoint {endpoint} for {url}: check AWS_ENDPOINT_URL ({detail})"
    )


@contextlib.contextmanager
def s3_errors(path: str, settings: S3Settings | None = None) -> Iterator[None]:
    """Turn credential, missing-bucket and connection errors from s3fs/pyarrow into ours.

    Inside the block, a 403 becomes :class:`S3AccessError`, a missing bucket
    :class:`S3BucketNotFoundError` and an unreachable endpoint :class:`S3ConnectionError`;
    the message is redacted and the original exception is *not* chained (its text can hold
    signed headers). Other exceptions pass through unchanged.

    Args:
        path: The ``s3://`` URL (or ``bucket/key``) being accessed, for the message.
        settings: Used for the endpoint name and for redaction.

    Yields:
        Nothing; wrap the S3 calls in the ``with`` block.
    """
    try:
        yield
    except Exception as exc:
        translated = _translate(exc, path, settings)
        if translated is None:
            raise
        raise translated from None


def check_access(fs: Any, bucket_or_path: str, settings: S3Settings | None = None) -> None:
    """Fail fast, with a clear message, when the credentials cannot read a bucket.

    One cheap request is made (``ListObjectsV2`` with ``MaxKeys=1`` for s3fs, ``HeadBucket``
    for pyarrow). A prefix that holds nothing yet is fine: only the bucket must exist.

    Args:
        fs: An s3fs filesystem, a ``pyarrow.fs.S3FileSystem``, or an fsspec wrapper of one.
        bucket_or_path: ``"bucket"``, ``"bucket/prefix"`` or ``"s3://bucket/prefix"``.
        settings: The settings behind ``fs``; read from ``fs`` itself when omitted.

    Raises:
        S3AccessError: The endpoint refused the credentials (or found none).
        S3BucketNotFoundError: The bucket does not exist.
        S3ConnectionError: The endpoint cannot be reached.
    """
    settings = settings or _settings_of(fs)
    url = _bucket_url(bucket_or_path)
    bucket, _, key = url[len("s3://") :].partition("/")
    if not bucket:
        raise ValueError(f"no bucket in {bucket_or_path!r}")
    with s3_errors(url, settings):
        if hasattr(fs, "call_s3"):  # s3fs
            fs.call_s3("list_objects_v2", Bucket=bucket, Prefix=key, MaxKeys=1)
            return
        from pyarrow import fs as pafs

        target = getattr(fs, "fs", fs)
        if isinstance(target, pafs.FileSystem):
            info = target.get_file_info(bucket)
            if info.type == pafs.FileType.NotFound:
                raise S3BucketNotFoundError(
                    f"bucket s3://{bucket} does not exist at endpoint "
                    f"{(settings or S3Settings()).endpoint_label}"
                )
            return
        if not fs.exists(bucket):
            raise S3BucketNotFoundError(f"bucket s3://{bucket} does not exist")


def resolve_filesystem(path: str, filesystem: Any = None) -> tuple[fsspec.AbstractFileSystem, str]:
    """The filesystem for ``path`` and the path in the form that filesystem expects.

    - ``s3://`` / ``s3a://`` without a filesystem: :func:`s3_filesystem` from the ``AWS_*``
      variables; the path comes back as ``bucket/key``.
    - a local path or ``file://`` URL: the local filesystem and an absolute POSIX path.
    - any other URL (``memory://``, ``gs://`` ...): whatever fsspec resolves it to.
    - an explicit ``filesystem`` (fsspec, or a ``pyarrow.fs.FileSystem``, which is wrapped in
      fsspec's ``ArrowFSWrapper``) is used as given, the path stripped of its protocol.

    Args:
        path: A URL or a local path; a trailing ``/`` is dropped.
        filesystem: Filesystem to use instead of one derived from ``path``.

    Returns:
        ``(filesystem, path)``.
    """
    if not isinstance(path, str) or not path:
        raise ValueError(f"path must be a non-empty string, got {path!r}")
    if filesystem is not None:
        fs = filesystem
        if not isinstance(fs, fsspec.AbstractFileSystem):
            from pyarrow import fs as pafs

            if not isinstance(fs, pafs.FileSystem):
                raise TypeError(
                    f"filesystem must be an fsspec or pyarrow filesystem, got {type(fs).__name__}"
                )
            from fsspec.implementations.arrow import ArrowFSWrapper

            fs = ArrowFSWrapper(fs)
            if path.startswith(_S3_SCHEMES):
                return fs, path.split("://", 1)[1].rstrip("/")
        return fs, fs._strip_protocol(path)
    if path.startswith(_S3_SCHEMES):
        fs = s3_filesystem()
        return fs, fs._strip_protocol(path)
    if "://" not in path or path.startswith("file://"):
        local = LocalFileSystem()
        return local, local._strip_protocol(os.path.expanduser(path))
    fs, stripped = fsspec.core.url_to_fs(path)
    return fs, stripped
