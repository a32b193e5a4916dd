"""The coordinator's channel in a real Ray started under Ray's TLS.

The case starts its own local Ray in a subprocess (``channel_probe.py``): Ray reads TLS settings
when it starts, and the session's shared instance runs without them (every other integration test
covers the plain channel; turning it off is tested in ``tests/unit/test_channel.py``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from certs import make_certificates

PROBE = Path(__file__).with_name("channel_probe.py")
EXPECTED = {f"d{k}": [2 * i for i in range(k % 4 + 1)] for k in range(12)}


def _probe(env: dict[str, str]) -> dict:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "LINEAGE_DATA_"))}
    done = subprocess.run(
        [sys.executable, str(PROBE)],
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_under_ray_tls_the_channel_is_tls(tmp_path):
    from ray._private.services import get_node_ip_address

    env = make_certificates(tmp_path, ips=("127.0.0.1", get_node_ip_address()))
    result = _probe(env)
    assert result["values"] == EXPECTED
    assert result["channels"] and all(v in ("TLSv1.2", "TLSv1.3") for v in result["channels"])
