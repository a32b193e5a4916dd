"""Unit tests never start Ray: any attempt fails loudly."""

import pytest


@pytest.fixture(autouse=True)
def _no_ray(monkeypatch):
    import sys

    if "ray" in sys.modules:
        monkeypatch.setattr(sys.modules["ray"], "init", _refuse)


def _refuse(*args, **kwargs):
    raise RuntimeError("unit tests must not start Ray; put this test under tests/integration")
