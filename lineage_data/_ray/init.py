"""Starting Ray for lineage_data: a cluster by address, or a local instance fit for this machine."""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator
from typing import Any

import ray

#: Fewest logical CPUs a local instance gets. On a 2-core machine a fractional-CPU actor pool
#: beside 1-CPU task steps otherwise waits forever for a CPU the tasks hold (seen here).
MIN_LOCAL_CPUS = 8

# Ray 2.60 enables token authentication for a new local cluster when RAY_AUTH_MODE is unset and
# logs a warning saying so from this logger; the library keeps the default and drops the warning.
_AUTH_LOGGER = "ray._private.authentication.authentication_token_setup"
_AUTH_WARNING = "Token authentication is enabled for this Ray cluster"


def _detected_cpus() -> int:
    """The CPUs Ray would detect here (it honours cgroup quotas), else the CPUs we may run on."""
    try:
        from ray._private.utils import get_num_cpus

        return int(get_num_cpus())
    except Exception:  # noqa: BLE001 - a private helper: fall back to the affinity mask
        return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1


def local_init_kwargs(init_kwargs: dict[str, Any]) -> dict[str, Any]:
    """``ray.init`` arguments for a local instance: ``num_cpus`` of at least MIN_LOCAL_CPUS."""
    kwargs = dict(init_kwargs)
    if kwargs.get("num_cpus") is None:
        kwargs["num_cpus"] = max(MIN_LOCAL_CPUS, _detected_cpus())
    return kwargs


class _DropAuthWarning(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(_AUTH_WARNING)


@contextlib.contextmanager
def _quiet_default_auth() -> Iterator[None]:
    """Drop Ray's "token authentication is enabled" warning while a local instance starts."""
    logger = logging.getLogger(_AUTH_LOGGER)
    drop = _DropAuthWarning()
    logger.addFilter(drop)
    try:
        yield
    finally:
        logger.removeFilter(drop)


def init_ray(address: str | None = None, **init_kwargs: Any) -> None:
    """Connect to Ray once: ``address`` or ``RAY_ADDRESS`` for a cluster, else a local instance.

    A local instance (no address, or ``"local"``) gets :func:`local_init_kwargs`. Ray's output
    reaches the driver unless ``log_to_driver=False`` is given.
    """
    if ray.is_initialized():
        return
    address = address or os.environ.get("RAY_ADDRESS")
    init_kwargs.setdefault("log_to_driver", True)
    if address not in (None, "local"):
        ray.init(address=address, **init_kwargs)
        return
    with _quiet_default_auth():
        ray.init(address=address, **local_init_kwargs(init_kwargs))
