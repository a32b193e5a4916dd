"""The coordinator: one async actor on the driver node, a thin shell over :class:`LineageState`.

Workers talk to it once per batch through :class:`CoordinatorClient`; payloads never pass through it.
It is a :mod:`helper <lineage_data._ray.actors>`: restarted or re-created when it dies, with an empty
state of a new epoch (see :mod:`lineage_data._core.state`).

A Ray actor call costs about 1 ms on a small machine, and one actor serves at most ~1,000 of them a
second: less than the map stages of a fine-grained job make (two calls per batch). So the actor also
serves the same calls on a TCP socket of its own, on its event loop (one connection per calling
process, length-prefixed pickles): ~0.1 ms a call. A connection is accepted only after it presents a
secret that each incarnation draws and hands out over Ray's own (authenticated) channel. Any trouble on
the socket (the actor restarted, a port the network refuses) makes the client fall back to the Ray call
for that call, which survives the actor's restart, and ask for the new address later.
"""

from __future__ import annotations

import asyncio
import hmac
import pickle
import secrets
import socket
import struct
import threading
import time
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import ray

from lineage_data._core.state import CommitResult, Handoff, LineageState, Path
from lineage_data._ray.actors import Helper, helper_timeout_s, start_helper

# What a client may call (on Ray or on the socket): the state's batch methods, nothing else.
METHODS = frozenset(
    {
        "register_roots",
        "root_ids_since",
        "handoff",
        "commit",
        "count",
        "reduced",
        "release",
        "establish_types",
        "established",
        "snapshot",
    }
)
_FRAME = "!I"  # a message: its length, then its pickle (a format string: the actor class pickles)
_FRAME_SIZE = struct.calcsize(_FRAME)
_RETRY_CHANNEL_S = 2.0  # after a failed connect, use Ray calls for this long before trying again


@ray.remote(num_cpus=0)
class CoordinatorActor:
    """Holds one execution's lineage state. Methods run one at a time on the actor's event loop."""

    def __init__(self) -> None:
        self._state = LineageState()
        self._secret = secrets.token_bytes(16)
        self._server: asyncio.Server | None = None

    async def ping(self) -> int:
        """Liveness check; returns the state's epoch."""
        return self._state.epoch

    async def call(self, method: str, args: tuple, kwargs: dict) -> Any:
        """Apply one state method; exceptions travel back to the caller."""
        return self._apply(method, args, kwargs)

    async def channel(self) -> tuple[str, int, bytes] | None:
        """``(host, port, secret)`` of the socket channel, started on first ask (None: it cannot)."""
        if self._server is None:
            try:
                self._server = await asyncio.start_server(
                    self._serve, host=ray.util.get_node_ip_address(), port=0
                )
            except OSError:
                return None
        host, port = self._server.sockets[0].getsockname()[:2]
        return host, port, self._secret

    def _apply(self, method: str, args: tuple, kwargs: dict) -> Any:
        if method not in METHODS:
            raise AttributeError(f"the coordinator has no method {method!r}")
        return getattr(self._state, method)(*args, **kwargs)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """One client process: check its secret, then answer its calls in order until it hangs up."""
        sock = writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            if not hmac.compare_digest(await reader.readexactly(len(self._secret)), self._secret):
                return
            while True:
                (size,) = struct.unpack(_FRAME, await reader.readexactly(_FRAME_SIZE))
                method, args, kwargs = pickle.loads(await reader.readexactly(size))
                try:
                    reply = pickle.dumps((True, self._apply(method, args, kwargs)), protocol=5)
                except Exception as exc:  # noqa: BLE001 - the caller raises it
                    reply = _error_reply(exc)
                writer.write(struct.pack(_FRAME, len(reply)) + reply)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


def _error_reply(exc: Exception) -> bytes:
    try:
        return pickle.dumps((False, exc), protocol=5)
    except Exception:  # noqa: BLE001 - an exception that does not pickle goes back as text
        return pickle.dumps((False, RuntimeError(f"{type(exc).__name__}: {exc}")), protocol=5)


def start_coordinator(run_id: str) -> tuple[CoordinatorClient, Any]:
    """Start the coordinator of one run on this (the driver's) node; returns (client, re-create)."""
    helper, create = start_helper(
        CoordinatorActor, "coordinator", run_id=run_id, suffix="coordinator"
    )
    return CoordinatorClient(helper), create


class _Channel:
    """One process's connection to one coordinator incarnation. Calls on it are serialized."""

    def __init__(self, host: str, port: int, secret: bytes) -> None:
        self._sock = socket.create_connection((host, port), timeout=helper_timeout_s())
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._sock.sendall(secret)
        self._file = self._sock.makefile("rb")
        self._lock = threading.Lock()

    def call(self, method: str, args: tuple, kwargs: dict) -> Any:
        request = pickle.dumps((method, args, kwargs), protocol=5)
        with self._lock:
            self._sock.sendall(struct.pack(_FRAME, len(request)) + request)
            (size,) = struct.unpack(_FRAME, self._read(_FRAME_SIZE))
            ok, value = pickle.loads(self._read(size))
        if not ok:
            raise value
        return value

    def _read(self, size: int) -> bytes:
        data = self._file.read(size)
        if len(data) != size:
            raise ConnectionError("the coordinator closed the connection")
        return data

    def close(self) -> None:
        try:
            self._file.close()
            self._sock.close()
        except OSError:
            pass


# Per process: the open channel to each coordinator (by actor name), or when connecting last failed.
_channels: dict[str, _Channel | float] = {}
_channels_lock = threading.Lock()


class CoordinatorClient:
    """The coordinator as operators see it: the :class:`LineageState` methods, one round trip each.

    Picklable: it travels to every worker inside the stage wrappers (the connection does not: each
    process opens its own on first use). ``stage`` names the caller's stage in the error raised when
    the coordinator cannot be reached.
    """

    def __init__(self, helper: Helper, stage: str | None = None) -> None:
        self.helper = helper
        self.name = helper.name
        self._stage = stage

    def for_stage(self, stage: str) -> CoordinatorClient:
        """The same client, naming ``stage`` in its errors."""
        return CoordinatorClient(self.helper, stage)

    def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        channel = self._channel()
        if channel is not None:
            try:
                return channel.call(method, args, kwargs)
            except (OSError, EOFError, pickle.UnpicklingError):
                # The actor restarted or the connection broke: this call goes over Ray (which waits
                # for the actor to come back), the next one asks for the new address.
                self._forget(channel)
        return self.ray_call(method, *args, **kwargs)

    def ray_call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """The same call as an actor call over Ray (what the socket saves; the bench compares)."""
        return self.helper.call("call", method, args, kwargs, stage=self._stage)

    def _channel(self) -> _Channel | None:
        name = self.helper.name
        with _channels_lock:
            known = _channels.get(name)
        if isinstance(known, _Channel):
            return known
        if known is not None and time.monotonic() - known < _RETRY_CHANNEL_S:
            return None
        channel: _Channel | float
        try:
            address = self.helper.call("channel", stage=self._stage)
            channel = _Channel(*address) if address is not None else time.monotonic()
        except (OSError, ray.exceptions.RayError):
            channel = time.monotonic()
        with _channels_lock:
            current = _channels.get(name)
            if isinstance(current, _Channel):  # another thread connected meanwhile
                if isinstance(channel, _Channel):
                    channel.close()
                return current
            _channels[name] = channel
        return channel if isinstance(channel, _Channel) else None

    def _forget(self, channel: _Channel) -> None:
        channel.close()
        with _channels_lock:
            if _channels.get(self.helper.name) is channel:
                del _channels[self.helper.name]

    def register_roots(self, roots: Sequence[str], block: str | None = None) -> None:  # noqa: D102
        self._call("register_roots", roots if isinstance(roots, pa.Array) else list(roots), block)

    def root_ids_since(self, cursor: int) -> tuple[pa.StringArray, int]:  # noqa: D102
        return self._call("root_ids_since", cursor)

    def handoff(self, stage_index: int, roots: Sequence[str], paths: Sequence[Path]) -> Handoff:  # noqa: D102
        return self._call("handoff", stage_index, roots, paths)

    def commit(self, *args: Any, **kwargs: Any) -> CommitResult:  # noqa: D102
        return self._call("commit", *args, **kwargs)

    def count(self, stage: str, counts: dict[str, int]) -> None:  # noqa: D102
        self._call("count", stage, counts)

    def reduced(self, *args: Any) -> None:  # noqa: D102
        self._call("reduced", *args)

    def establish_types(self, stage: str, types: dict[str, str]) -> dict[str, str]:  # noqa: D102
        return self._call("establish_types", stage, types)

    def established(self, stage: str) -> list[str]:  # noqa: D102
        return self._call("established", stage)

    def snapshot(self) -> dict:  # noqa: D102
        return self._call("snapshot")
