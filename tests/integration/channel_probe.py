"""Run a small lineage pipeline in a fresh local Ray and print how the coordinator channel ran.

``python channel_probe.py`` prints one JSON line: the pipeline's values, and the TLS version of each
coordinator channel this (the driver's) process opened. The environment (``RAY_USE_TLS`` and Ray's
certificate variables, ``LINEAGE_DATA_COORDINATOR_SOCKET``) is read by Ray and the library as
usual; ``test_channel_ray`` runs it under each setting.
"""

from __future__ import annotations

import json

import lineage_data as ld
from lineage_data._ray import coordinator


def pages(row):
    for i in range(row["n"]):
        yield {"i": i}


def double(batch):
    batch["i"] = batch["i"] * 2
    return batch


def total(parent, children):
    return {"doc": parent["doc"], "values": [c["i"] for c in children]}


def main() -> None:
    ld.init(include_dashboard=False, log_to_driver=False)
    rows = [{"doc": f"d{k}", "n": k % 4 + 1} for k in range(12)]
    ds = (
        ld.from_items(rows)
        .expand_lineage(pages)
        .map_batches(double, batch_size=4)
        .reduce_lineage(total)
    )
    out = sorted(ds.take_all(), key=lambda r: r["doc"])
    channels = [
        c for c in coordinator._channels.values() if isinstance(c, coordinator.ChannelClient)
    ]
    print(
        json.dumps(
            {
                "values": {r["doc"]: list(r["values"]) for r in out},
                "channels": [c.tls_version or "plain" for c in channels],
            }
        )
    )


if __name__ == "__main__":
    main()
