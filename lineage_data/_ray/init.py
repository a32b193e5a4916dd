"""Starting Ray for lineage_data: a cluster by address, or a local instance fit for this machine."""

from __future__ import annotations

import os
from typing import Any

import ray

from lineage_data._ray.compat import default_auth_warning_dropped, detected_cpus

#: Fewest logical CPUs a local instance gets. On a 2-core machine a fractional-CPU actor pool
#: beside 1-CPU task steps otherwise waits forever for a CPU the tasks hold (seen here).
MIN_LOCAL_CPUS = 8


def local_init_kwargs(init_kwargs: dict[str, Any]) -> dict[str, Any]:
    """``ray.init`` arguments for a local instance: ``num_cpus`` of at least MIN_LOCAL_CPUS."""
    kwargs = dict(init_kwargs)
    if kwargs.get("num_cpus") is None:
        kwargs["num_cpus"] = max(MIN_LOCAL_CPUS, detected_cpus())
    return kwargs


def init_ray(address: str | None = None, **init_kwargs: Any) -> None:
    """Connect to Ray once: ``address`` or ``RAY_ADDRESS`` for a cluster, else a local instance."""
    if ray.is_initialized():
        return
    address = address or os.environ.get("RAY_ADDRESS")
    init_kwargs.setdefault("log_to_driver", True)
    if address not in (None, "local"):
        ray.init(address=address, **init_kwargs)
        return
    with default_auth_warning_dropped():
        ray.init(address=address, **local_init_kwargs(init_kwargs))
