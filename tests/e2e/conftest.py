"""End-to-end fixtures: one real SeaweedFS S3 server on loopback for the whole session.

- ``s3_server``: a :class:`lineage_data.connectors.testing.seaweed.SeaweedServer` (keys required, free ports).
- ``s3_bucket``: ``(fs, "s3://<fresh bucket>")`` for one test; ``fs`` carries the server's keys,
  so it also works in Ray workers started before the test.
- ``aws_env``: a clean botocore configuration for one test: no ``AWS_*`` variable, and shared
  config/credentials files that do not exist (the machine's ``~/.aws`` is never read).
- ``s3_env``: ``aws_env`` plus the server's ``AWS_*`` variables (driver process only: Ray workers
  started earlier keep their environment).
"""

import re
import uuid

import pytest

from lineage_data.connectors.testing.seaweed import SeaweedServer

AWS_VARIABLES = (
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_S3",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_REGION",
    "AWS_DEFAULT_REGION",
    "AWS_PROFILE",
    "AWS_DEFAULT_PROFILE",
    "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS",
)


@pytest.fixture(scope="session")
def s3_server():
    """One SeaweedFS for the session, with an S3 identity so that wrong keys are refused."""
    server = SeaweedServer(s3_port=0, auth=True)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def _bucket_name(test_name: str) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", test_name.lower()).strip("-")[:40].strip("-")
    return f"{slug or 't'}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def bucket_name(request):
    """A fresh bucket name for this test (the bucket is not created)."""
    return _bucket_name(request.node.name)


@pytest.fixture
def s3_bucket(s3_server, bucket_name):
    """A new, empty bucket named after the test: ``(fs, "s3://bucket")``."""
    url = s3_server.make_bucket(bucket_name)
    return s3_server.filesystem(), url


@pytest.fixture
def aws_env(monkeypatch, tmp_path):
    """No AWS configuration at all for this test: botocore sees only what the test sets."""
    for name in AWS_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    return monkeypatch


@pytest.fixture
def s3_env(s3_server, aws_env):
    """Point the standard ``AWS_*`` variables at the session server for this test only."""
    for name, value in s3_server.env.items():
        aws_env.setenv(name, value)
    return s3_server
