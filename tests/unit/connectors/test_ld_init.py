"""``ld.init`` on small machines: logical CPUs and Ray's token-auth warning (no Ray started)."""

import logging

from lineage_data._ray import compat, init


def test_local_ray_gets_at_least_eight_logical_cpus(monkeypatch):
    monkeypatch.setattr(init, "detected_cpus", lambda: 2)
    assert init.local_init_kwargs({})["num_cpus"] == 8
    assert init.local_init_kwargs({"num_cpus": None, "num_gpus": 4}) == {
        "num_cpus": 8,
        "num_gpus": 4,
    }
    assert init.local_init_kwargs({"num_cpus": 3})["num_cpus"] == 3  # given: kept
    monkeypatch.setattr(init, "detected_cpus", lambda: 64)
    assert init.local_init_kwargs({})["num_cpus"] == 64  # a big machine keeps its own count


def test_the_default_token_auth_warning_is_dropped_and_nothing_else():
    logger = logging.getLogger(compat.AUTH_LOGGER)
    seen: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: seen.append(record.getMessage())
    logger.addHandler(handler)
    try:
        with compat.default_auth_warning_dropped():
            logger.warning(compat.AUTH_WARNING + ". Set RAY_AUTH_MODE=disabled to opt out.")
            logger.warning("Token authentication is disabled for this Ray cluster.")
        logger.warning(compat.AUTH_WARNING + " (after the start: shown)")
    finally:
        logger.removeHandler(handler)
    assert seen == [
        "Token authentication is disabled for this Ray cluster.",
        compat.AUTH_WARNING + " (after the start: shown)",
    ]
