"""Test certificates for TLS: a CA and one node certificate signed by it (``trustme``)."""

from __future__ import annotations

from pathlib import Path

import trustme


def make_certificates(directory: Path, ips: tuple[str, ...] = ("127.0.0.1",)) -> dict[str, str]:
    """Write the files and return the environment Ray reads them from (``RAY_USE_TLS=1`` and paths).

    The node certificate names ``ips`` and ``localhost``, as an operator's certificate names the
    cluster's nodes.
    """
    ca = trustme.CA()
    node = ca.issue_cert(*ips, "localhost")
    paths = {name: directory / name for name in ("ca.crt", "node.crt", "node.key")}
    ca.cert_pem.write_to_path(str(paths["ca.crt"]))
    node.cert_chain_pems[0].write_to_path(str(paths["node.crt"]))
    node.private_key_pem.write_to_path(str(paths["node.key"]))
    return {
        "RAY_USE_TLS": "1",
        "RAY_TLS_SERVER_CERT": str(paths["node.crt"]),
        "RAY_TLS_SERVER_KEY": str(paths["node.key"]),
        "RAY_TLS_CA_CERT": str(paths["ca.crt"]),
    }
