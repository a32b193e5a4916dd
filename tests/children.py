"""The environment of a child Python that starts a Ray of its own (tests that run a script)."""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def child_env(*paths: Path, **extra: str) -> dict[str, str]:
    """This process's environment without ``RAY_ADDRESS``, the repo (and ``paths``) importable."""
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(REPO), *map(str, paths), env.get("PYTHONPATH", "")) if p
    )
    env.update(extra)
    return env
