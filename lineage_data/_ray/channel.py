"""The coordinator's socket channel: authenticated connections, frames that cannot run code.

The coordinator answers its calls on a TCP socket of its own too (~0.03 ms a call, where a Ray actor
call costs ~1 ms). The protocol is the standard library's, with msgpack frames:

- **Authentication**: ``multiprocessing.connection``'s challenge in both directions (as its
  ``Listener`` and ``Client`` do): each side proves it holds the per-incarnation secret by an HMAC
  over a fresh challenge from the other. The secret never crosses the socket (workers get it over Ray).
- **Nothing on the wire can run code**: msgpack with four extension types (an Arrow array as Arrow
  IPC, a verdict, a hand-off, a commit result) rebuilt field by field; never a pickle (nor
  ``Connection.recv``, which unpickles). An error travels back as its type name and message. The
  method index into :data:`METHODS` is checked before the arguments are decoded, and a frame over
  :data:`MAX_FRAME` is refused before it is read.
- **TLS when Ray uses TLS** (``RAY_USE_TLS=1``): mutual TLS with Ray's certificates; if they cannot
  be loaded there is no channel. ``LINEAGE_DATA_COORDINATOR_SOCKET=0`` turns the channel off.

Only a peer that holds the secret gets a connection. Without TLS, frames after the handshake are
plain TCP: an on-path attacker can read them and alter or inject frames, the same exposure as Ray's
own unencrypted gRPC (which carries the secret and every task's pickles); a cluster that must
withstand one runs Ray with TLS, and this channel with it. Anything the server does not like closes
that connection alone, and the client falls back to the Ray call. No Ray import here: the tests run
server and client in one process.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import ssl
import struct
import threading
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing import AuthenticationError
from multiprocessing.connection import answer_challenge, deliver_challenge
from typing import Any

import msgpack
import numpy as np
import pyarrow as pa

from lineage_data import exceptions
from lineage_data._core.state import METHODS, CommitResult, Handoff, Verdict

# A frame names a call by its index in the coordinator's table; both ends of a run load the same one.
_INDEX = {name: i for i, name in enumerate(METHODS)}

MAX_FRAME = 32 << 20  # a larger frame is refused (the client sends such a call over Ray)
_LENGTH = struct.Struct("!i")  # multiprocessing.connection's frame header: the length that follows
_HEADER = struct.Struct("!iB")  # a call's or answer's: the length, then the method index or status
_OK, _ERROR = 0, 1
_HANDSHAKE_S = 10.0  # a connection that has not authenticated by then is closed

_EXT_ARROW, _EXT_VERDICT, _EXT_HANDOFF, _EXT_COMMIT = 1, 2, 3, 4


class ChannelError(ConnectionError):
    """The channel refused or lost the connection (the caller falls back to Ray's channel)."""


class Unencodable(TypeError):
    """A call's arguments hold a value the wire format does not carry (the caller uses Ray)."""


# -- settings ------------------------------------------------------------------------------------


def _flag(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    if value is None or not value.strip():
        return default
    return value.strip().lower() not in ("0", "false", "no", "off")


def socket_enabled() -> bool:
    """Whether the coordinator may serve on a socket (``LINEAGE_DATA_COORDINATOR_SOCKET``, default on)."""
    return _flag("LINEAGE_DATA_COORDINATOR_SOCKET", True)


def ray_uses_tls() -> bool:
    """Whether Ray's own traffic is TLS (``RAY_USE_TLS``, as Ray reads it)."""
    return _flag("RAY_USE_TLS", False)


def tls_context(server: bool) -> ssl.SSLContext:
    """Mutual TLS with Ray's certificates, the peer's verified against ``RAY_TLS_CA_CERT``.

    Host names are not checked (a cluster's certificates name its nodes in ways this process cannot
    know): the CA and the challenge's secret authenticate the peer. ``OSError``/``ssl.SSLError`` for
    a missing or unreadable file, ``KeyError`` for a variable not set.
    """
    cert, key = os.environ["RAY_TLS_SERVER_CERT"], os.environ["RAY_TLS_SERVER_KEY"]
    ca = os.environ["RAY_TLS_CA_CERT"]
    purpose = ssl.Purpose.CLIENT_AUTH if server else ssl.Purpose.SERVER_AUTH
    context = ssl.create_default_context(purpose, cafile=ca)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    if not server:
        context.check_hostname = False
    context.verify_mode = ssl.CERT_REQUIRED
    context.load_cert_chain(cert, key)
    return context


# -- encoding ------------------------------------------------------------------------------------


def _default(obj: Any) -> Any:
    if isinstance(obj, pa.Array):
        sink = pa.BufferOutputStream()
        batch = pa.record_batch([obj], names=["a"])
        with pa.ipc.new_stream(sink, batch.schema) as writer:
            writer.write_batch(batch)
        return msgpack.ExtType(_EXT_ARROW, sink.getvalue().to_pybytes())
    if isinstance(obj, Verdict):
        return msgpack.ExtType(_EXT_VERDICT, obj.value.encode())
    if isinstance(obj, Handoff):
        return msgpack.ExtType(_EXT_HANDOFF, _pack([obj.generation, obj.barred]))
    if isinstance(obj, CommitResult):
        verdicts = [v.value for v in obj.verdicts]
        return msgpack.ExtType(_EXT_COMMIT, _pack([verdicts, obj.suppressed]))
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    raise Unencodable(f"the coordinator channel does not carry {type(obj).__name__}")


def _ext(code: int, data: bytes) -> Any:
    if code == _EXT_ARROW:
        table = pa.ipc.open_stream(data).read_all()
        if table.num_columns != 1:
            raise ValueError("an Arrow value must be one column")
        column = table.column(0)
        return column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
    if code == _EXT_VERDICT:
        return Verdict(data.decode())
    if code == _EXT_HANDOFF:
        generation, barred = _unpack(data)
        return Handoff(int(generation), dict(barred))
    if code == _EXT_COMMIT:
        verdicts, suppressed = _unpack(data)
        return CommitResult([Verdict(v) for v in verdicts], dict(suppressed))
    raise ValueError(f"unknown extension type {code}")


def _pack(value: Any) -> bytes:
    return msgpack.packb(value, default=_default, use_bin_type=True)


def _unpack(data: bytes) -> Any:
    # int keys (hand-off barred positions) are allowed; anything else msgpack decodes is plain data.
    return msgpack.unpackb(data, ext_hook=_ext, raw=False, strict_map_key=False)


# Errors the client raises as themselves; any other comes back as a RuntimeError naming its type.
_ERRORS: dict[str, type[Exception]] = {
    cls.__name__: cls
    for cls in (ValueError, TypeError, KeyError, AttributeError, IndexError)
    + tuple(getattr(exceptions, name) for name in exceptions.__all__)
}


def _error(name: str, message: str) -> Exception:
    cls = _ERRORS.get(name)
    return cls(message) if cls is not None else RuntimeError(f"{name}: {message}")


# -- frames --------------------------------------------------------------------------------------


def _size(header: bytes, maxlength: int | None) -> int:
    """The length a message's header announces; ``ChannelError`` when it is over ``maxlength``."""
    (size,) = _LENGTH.unpack(header)
    if size < 0 or (maxlength is not None and size > maxlength):
        raise ChannelError(f"a {size}-byte frame is over the limit")
    return size


class Frames:
    """The client's length-prefixed messages: ``multiprocessing.connection``'s framing, over TLS too.

    It has the two methods the challenge functions use. Not a ``Connection``: that reads the file
    descriptor with ``os.read``, bypassing an ``ssl`` socket's TLS and the socket's timeout.
    """

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._file = sock.makefile("rb")

    def send_bytes(self, data: bytes) -> None:
        """One message (the challenge's)."""
        self.sock.sendall(_LENGTH.pack(len(data)) + data)

    def send(self, code: int, body: bytes) -> None:
        """One call or answer: the method index or status, then the msgpack body."""
        self.sock.sendall(_HEADER.pack(len(body) + 1, code) + body)

    def recv_bytes(self, maxlength: int | None = None) -> bytes:
        """The next message; ``ChannelError`` when over ``maxlength``, ``EOFError`` at hang-up."""
        size = _size(self._read(_LENGTH.size), maxlength)
        return self._read(size)

    def recv(self) -> tuple[int, bytes]:
        """The next call or answer: ``(method index or status, body)``."""
        frame = self.recv_bytes(MAX_FRAME + 1)
        if not frame:
            raise ChannelError("an empty frame")
        return frame[0], frame[1:]

    def _read(self, size: int) -> bytes:
        data = self._file.read(size)
        if len(data) != size:
            raise EOFError("the peer closed the connection")
        return data

    def close(self) -> None:
        """Hang up."""
        with contextlib.suppress(OSError):
            self._file.close()
            self.sock.close()


def _authenticate(frames: Any, secret: bytes, server: bool) -> None:
    """Both challenges, the server asking first; ``frames`` is a :class:`Frames` or a :class:`_Bridge`.

    ``AuthenticationError`` when the peer lacks the secret; ``ChannelError``, ``OSError`` or
    ``AssertionError`` when it does not speak the protocol.
    """
    if server:
        deliver_challenge(frames, secret)
        answer_challenge(frames, secret)
    else:
        answer_challenge(frames, secret)
        deliver_challenge(frames, secret)


# -- server --------------------------------------------------------------------------------------


@dataclass
class _Bridge:
    """A server connection as the blocking challenge functions see it from a worker thread."""

    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    loop: asyncio.AbstractEventLoop

    def send_bytes(self, data: bytes) -> None:
        self._wait(_write(self.writer, _LENGTH.pack(len(data)) + data))

    def recv_bytes(self, maxlength: int | None = None) -> bytes:
        return self._wait(_read(self.reader, maxlength))

    def _wait(self, step: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(step, self.loop).result(_HANDSHAKE_S)


async def _write(writer: asyncio.StreamWriter, data: bytes) -> None:
    writer.write(data)
    await writer.drain()


async def _read(reader: asyncio.StreamReader, maxlength: int | None) -> bytes:
    """The next message of a stream; ``ChannelError`` when it is over ``maxlength`` (not read)."""
    size = _size(await reader.readexactly(_LENGTH.size), maxlength)
    return await reader.readexactly(size)


class ChannelServer:
    """Serves ``apply(method, args, kwargs)`` to authenticated clients, one call at a time.

    Runs on the caller's event loop (the coordinator actor's), so calls are applied between the
    actor's own; only each connection's challenge runs on a worker thread.
    """

    def __init__(
        self,
        secret: bytes,
        apply: Callable[[str, list, dict], Any],
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self._secret = secret
        self._apply = apply
        self._ssl = ssl_context
        self._server: asyncio.Server | None = None
        self.refused = 0  # connections closed for a protocol violation (tests read it)

    @property
    def tls(self) -> bool:
        """Whether connections are TLS."""
        return self._ssl is not None

    async def start(self, host: str, port: int = 0) -> tuple[str, int]:
        """Listen on ``host``; returns the address bound."""
        self._server = await asyncio.start_server(self._serve, host=host, port=port, ssl=self._ssl)
        bound = self._server.sockets[0].getsockname()
        return bound[0], bound[1]

    def close(self) -> None:
        """Stop listening (open connections end when their clients hang up)."""
        if self._server is not None:
            self._server.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        # No TCP_NODELAY to set: asyncio sets it on every TCP transport.
        try:
            bridge = _Bridge(reader, writer, asyncio.get_running_loop())
            challenge = asyncio.to_thread(_authenticate, bridge, self._secret, True)
            await asyncio.wait_for(challenge, _HANDSHAKE_S)
            await self._calls(reader, writer)
        except Exception:  # noqa: BLE001 - a failed challenge or a bad frame: refuse this connection
            self.refused += 1
        finally:
            writer.close()

    async def _calls(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Answer calls until the client hangs up; raises on the first frame it must refuse."""
        while True:
            try:
                frame = await _read(reader, MAX_FRAME + 1)
            except ChannelError:
                raise  # oversized
            except (asyncio.IncompleteReadError, ConnectionError, ssl.SSLError):
                return  # the client hung up
            if not frame or frame[0] >= len(METHODS):
                raise ChannelError("no such method")
            args, kwargs = _unpack(frame[1:])
            if not isinstance(args, list) or not isinstance(kwargs, dict):
                raise ChannelError("a call is [args, kwargs]")
            try:
                status, reply = _OK, _pack(self._apply(METHODS[frame[0]], args, kwargs))
            except Exception as exc:  # noqa: BLE001 - the caller raises it (type name + message)
                status, reply = _ERROR, _pack([type(exc).__name__, str(exc)])
            try:
                await _write(writer, _HEADER.pack(len(reply) + 1, status) + reply)
            except (ConnectionError, ssl.SSLError):
                return


# -- client --------------------------------------------------------------------------------------


class ChannelClient:
    """One process's blocking connection to a :class:`ChannelServer`; calls on it are serialized.

    Raises :class:`ChannelError` when the server is unreachable, fails the challenge or answers
    garbage; :class:`Unencodable` before sending; the server's exception, rebuilt, when the call raised.
    """

    def __init__(
        self,
        host: str,
        port: int,
        secret: bytes,
        *,
        timeout: float,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        sock = socket.create_connection((host, port), timeout=timeout)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if ssl_context is not None:
                sock = ssl_context.wrap_socket(sock, server_hostname=host)
            self._frames = Frames(sock)
            _authenticate(self._frames, secret, server=False)
        except (OSError, EOFError, AuthenticationError, AssertionError, ValueError) as exc:
            # ValueError: an HMAC digest this Python's build refuses (MD5 under FIPS).
            sock.close()
            raise ChannelError(f"the coordinator channel refused the connection: {exc}") from exc
        self._lock = threading.Lock()

    @property
    def tls_version(self) -> str | None:
        """The TLS version of the connection, None when it is plain TCP."""
        sock = self._frames.sock
        return sock.version() if isinstance(sock, ssl.SSLSocket) else None

    def call(self, method: str, args: tuple | list, kwargs: dict) -> Any:
        """Apply ``method`` on the server and return its answer."""
        index = _INDEX.get(method)
        if index is None:
            raise AttributeError(f"the coordinator has no method {method!r}")
        body = _pack([list(args), kwargs])
        if len(body) > MAX_FRAME:
            raise Unencodable(f"a {len(body)}-byte call is over the channel's {MAX_FRAME} bytes")
        with self._lock:
            self._frames.send(index, body)
            try:
                status, reply = self._frames.recv()
            except EOFError as exc:
                raise ChannelError("the coordinator closed the connection") from exc
        try:
            value = _unpack(reply)
        except Exception as exc:  # noqa: BLE001 - a reply that does not decode: drop the channel
            raise ChannelError(f"an undecodable reply on the coordinator channel: {exc}") from exc
        if status != _OK:
            name, message = value
            raise _error(str(name), str(message))
        return value

    def close(self) -> None:
        """Hang up."""
        self._frames.close()
