"""Test certificates for TLS: a CA and one node certificate signed by it, made with openssl."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path


def make_certificates(directory: Path, ips: tuple[str, ...] = ("127.0.0.1",)) -> dict[str, str]:
    """Write the files and return the environment Ray reads them from (``RAY_USE_TLS=1`` and paths).

    The node certificate names ``ips`` and ``localhost``, as an operator's certificate names the
    cluster's nodes.
    """
    openssl = shutil.which("openssl")
    assert openssl, "the TLS tests need the openssl command"

    def run(*args: str) -> None:
        subprocess.run([openssl, *args], cwd=directory, check=True, capture_output=True)

    new_key = ("-newkey", "rsa:2048", "-nodes")
    run("req", "-x509", *new_key, "-days", "2", "-subj", "/CN=lineage-test-ca",
        "-keyout", "ca.key", "-out", "ca.crt")  # fmt: skip
    run("req", *new_key, "-subj", "/CN=node", "-keyout", "node.key", "-out", "node.csr")
    names = ",".join([*(f"IP:{ip}" for ip in ips), "DNS:localhost"])
    (directory / "san.ext").write_text(f"subjectAltName={names}\n")
    run("x509", "-req", "-in", "node.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
        "-days", "2", "-extfile", "san.ext", "-out", "node.crt")  # fmt: skip
    return {
        "RAY_USE_TLS": "1",
        "RAY_TLS_SERVER_CERT": str(directory / "node.crt"),
        "RAY_TLS_SERVER_KEY": str(directory / "node.key"),
        "RAY_TLS_CA_CERT": str(directory / "ca.crt"),
    }
