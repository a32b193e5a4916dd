"""Fault-injection tests share the session's local Ray (see ``tests/conftest.py``)."""

import faultkit
import pytest


@pytest.fixture(autouse=True)
def _ray(ray_session):
    # Workers cannot import this folder's modules (it is not on the session's worker path):
    # ship the pipeline's functions and classes by value.
    ray_session.cloudpickle.register_pickle_by_value(faultkit)
    return ray_session


@pytest.fixture(scope="session")
def clean_reference(ray_session, tmp_path_factory):
    """The clean run's output: ``root -> (outcome, cause, user values)``, each root exactly once."""
    ray_session.cloudpickle.register_pickle_by_value(faultkit)
    run = faultkit.consume(faultkit.pipeline(tmp_path_factory.mktemp("clean")))
    assert run.error is None, faultkit.describe_error(run.error)
    out, duplicated = faultkit.comparable(run.rows)
    assert not duplicated, duplicated
    problem = faultkit.diff(faultkit.expected(), out, duplicated)
    assert not problem, f"the clean run is not what the pipeline computes: {problem}"
    return out
