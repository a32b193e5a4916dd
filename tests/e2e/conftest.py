"""End-to-end fixtures: one real SeaweedFS S3 server on loopback for the whole session.

- ``s3_server``: the :class:`connectors.seaweed.SeaweedServer` (credentials required, free ports).
- ``s3_bucket``: ``(settings, "s3://<fresh bucket>")`` for one test.
- ``s3_env``: the server's ``AWS_*`` variables set for one test (driver process only: Ray workers
  started earlier keep their environment, so hand them ``s3_filesystem(settings)`` instead).
"""

import re
import uuid

import pytest

from connectors.s3 import ENV_VARIABLES
from connectors.seaweed import SeaweedServer

_AWS_VARIABLES = (*ENV_VARIABLES, "AWS_PROFILE")


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
def s3_bucket(s3_server, request):
    """A new, empty bucket named after the test: ``(settings, "s3://bucket")``."""
    url = s3_server.make_bucket(_bucket_name(request.node.name))
    return s3_server.settings, url


@pytest.fixture
def s3_env(s3_server, monkeypatch):
    """Point the standard ``AWS_*`` variables at the session server for this test only."""
    for name in _AWS_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    for name, value in s3_server.settings.to_env().items():
        monkeypatch.setenv(name, value)
    return s3_server.settings
