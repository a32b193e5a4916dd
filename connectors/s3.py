"""S3 for connectors: the library's resolver and errors, and a bucket check that fails fast.

Configuration is botocore's own (``AWS_*`` variables, profiles, config files)::

    fs, path = resolve_filesystem("s3://bucket/shards/")   # s3fs, configured by botocore
    check_access(fs, path)                                  # S3AccessError if the keys are wrong
"""

from __future__ import annotations

from typing import Any

from lineage_data.storage import (
    S3AccessError,
    S3BucketNotFoundError,
    S3ConnectionError,
    is_s3,
    resolve_filesystem,
    s3_endpoint,
    s3_errors,
    s3_filesystem,
)

__all__ = [
    "S3AccessError",
    "S3BucketNotFoundError",
    "S3ConnectionError",
    "check_access",
    "resolve_filesystem",
    "s3_errors",
    "s3_filesystem",
]


def check_access(fs: Any, path: str, *, create_bucket: bool = False) -> None:
    """Fail fast, with a clear message, when ``path``'s bucket cannot be used with ``fs``.

    Makes one cheap request; an empty prefix is fine. Filesystems that are not S3 are not checked.

    Args:
        fs: An s3fs filesystem, or a pyarrow S3 filesystem wrapped by :func:`resolve_filesystem`.
        path: ``"bucket/prefix"`` or ``"s3://bucket/prefix"``.
        create_bucket: Create a missing bucket instead of raising.

    Raises:
        S3AccessError: The endpoint refused the credentials (or found none).
        S3BucketNotFoundError: The bucket does not exist and ``create_bucket`` is False.
        S3ConnectionError: The endpoint cannot be reached.
    """
    if not is_s3(fs, path):
        return
    bucket, _, key = path.split("://", 1)[-1].strip("/").partition("/")
    if not bucket:
        raise ValueError(f"no bucket in {path!r}")
    try:
        with s3_errors(path, fs):
            if hasattr(fs, "call_s3"):  # s3fs: one request checks the keys and the bucket
                fs.call_s3("list_objects_v2", Bucket=bucket, Prefix=key, MaxKeys=1)
            elif not fs.exists(bucket):
                raise S3BucketNotFoundError(
                    f"bucket s3://{bucket} does not exist at endpoint {s3_endpoint(fs)}"
                )
    except S3BucketNotFoundError as exc:
        if not create_bucket:
            raise S3BucketNotFoundError(f"{exc} (create_bucket=True creates it)") from None
        with s3_errors(path, fs):
            fs.mkdir(bucket)
