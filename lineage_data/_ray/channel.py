"""The coordinator's socket channel: authenticated frames that cannot run code when decoded.

A Ray actor call costs about 1 ms on a small machine, less than the two coordinator calls per batch of
a fine-grained job can afford, so the coordinator also answers the same calls on a TCP socket of its
own (~0.03 ms a call). That socket is reachable from the network, so it must not be the weakest door
of the cluster:

- **Nothing on the wire can run code.** Arguments and answers are msgpack (ids, counts, small tuples)
  with four extension types (an Arrow array as Arrow IPC, a verdict, a hand-off, a commit result),
  rebuilt field by field; no pickle in either direction. An error travels back as its type name and
  message. The method is a small index into :data:`METHODS`, checked before the arguments are decoded,
  and the frame's authentication tag is checked before either.
- **The secret never travels.** Each connection starts with a challenge-response: the server sends a
  fresh nonce, the client a nonce of its own and ``HMAC(secret, nonces)``, the server proves it knows
  the secret too. Both derive a session key from the nonces; every frame carries a keyed BLAKE2b tag
  over its direction, its sequence number and its bytes, so a frame cannot be forged, altered,
  replayed or moved to another connection. The secret itself reaches the workers over Ray's own
  (authenticated, TLS when configured) channel.
- **TLS when Ray uses TLS.** With ``RAY_USE_TLS=1`` the socket is wrapped in mutual TLS with Ray's
  certificates (``RAY_TLS_SERVER_CERT``, ``RAY_TLS_SERVER_KEY``, ``RAY_TLS_CA_CERT``): both sides
  present the cluster's certificate and verify the other's against its CA. If they cannot be loaded,
  the channel is not started and every call goes over Ray. ``LINEAGE_DATA_COORDINATOR_SOCKET=0`` turns
  the channel off entirely.

Anything the server does not like (a bad handshake, tag, method, size or encoding) closes that
connection and nothing else: the coordinator goes on serving the others, and the client falls back
to the Ray call. Written by hand because no library in the dependency set does authenticated RPC over
asyncio streams (Ray's own gRPC is what this channel exists to avoid); the primitives are the standard
library's ``hmac``, ``hashlib``, ``secrets`` and ``ssl``, and msgpack.

This module does not import Ray: its tests run the server and the client in one process.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import os
import secrets
import socket
import ssl
import struct
import threading
from collections.abc import Callable
from typing import Any

import msgpack
import numpy as np
import pyarrow as pa

from lineage_data._core import errors
from lineage_data._core.state import METHODS, CommitResult, Handoff, Verdict

# What a client may call: the coordinator's table (lineage_data._core.state.METHODS), nothing else.
# A frame names a call by its index there; both ends of a run load the same table.
_INDEX = {name: i for i, name in enumerate(METHODS)}

MAGIC = b"LDC1"  # the protocol, first bytes the server sends
NONCE = 16
TAG = 16  # BLAKE2b tag bytes per frame
MAX_FRAME = 32 << 20  # a larger frame is refused (the client sends such a call over Ray)
_HEADER = struct.Struct("!IB")  # body length, then the method index (request) or status (reply)
_SEQ = struct.Struct("!cQ")  # what a tag covers besides the frame: direction and sequence number
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
    """Mutual TLS with Ray's certificates: present the cluster's certificate, require the peer's.

    The peer's certificate is verified against ``RAY_TLS_CA_CERT``; host names are not checked (a
    cluster's certificates name its nodes in ways this process cannot know), the CA and the per-run
    secret of the handshake are what authenticate the peer. Raises ``OSError`` or ``ssl.SSLError``
    when a file is missing or unreadable, ``KeyError`` when a variable is not set.
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
    + tuple(
        c
        for c in vars(errors).values()
        if isinstance(c, type) and issubclass(c, errors.LineageError)
    )
}


def _error(name: str, message: str) -> Exception:
    cls = _ERRORS.get(name)
    if cls is not None:
        try:
            return cls(message)
        except TypeError:
            pass
    return RuntimeError(f"{name}: {message}")


# -- session -------------------------------------------------------------------------------------


class _Session:
    """Tags and sequence numbers of one authenticated connection, one side of it."""

    def __init__(self, secret: bytes, server_nonce: bytes, client_nonce: bytes, server: bool):
        nonces = server_nonce + client_nonce
        self.key = hmac.digest(secret, b"lineage-data session" + nonces, "sha256")
        self.out_dir, self.in_dir = (b"s", b"c") if server else (b"c", b"s")
        self.out_seq = self.in_seq = 0

    def _tag(self, direction: bytes, seq: int, header: bytes, body: bytes) -> bytes:
        mac = hashlib.blake2b(key=self.key, digest_size=TAG)
        mac.update(_SEQ.pack(direction, seq))
        mac.update(header)
        mac.update(body)
        return mac.digest()

    def seal(self, code: int, body: bytes) -> bytes:
        """One outgoing frame: header, body, tag."""
        header = _HEADER.pack(len(body), code)
        tag = self._tag(self.out_dir, self.out_seq, header, body)
        self.out_seq += 1
        return header + body + tag

    def check(self, header: bytes, body: bytes, tag: bytes) -> bool:
        """Whether an incoming frame is the next one the peer sent, unaltered."""
        ok = hmac.compare_digest(self._tag(self.in_dir, self.in_seq, header, body), tag)
        self.in_seq += 1
        return ok


def _proof(secret: bytes, role: bytes, server_nonce: bytes, client_nonce: bytes) -> bytes:
    return hmac.digest(secret, b"lineage-data " + role + server_nonce + client_nonce, "sha256")


_PROOF = hashlib.sha256().digest_size


# -- server --------------------------------------------------------------------------------------


class ChannelServer:
    """Serves ``apply(method, args, kwargs)`` to authenticated clients, one call at a time per client.

    Runs on the caller's asyncio event loop (the coordinator actor's), so calls from every client
    are applied one at a time, between the actor's own method calls.
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
        sock = writer.get_extra_info("socket")
        if sock is not None:
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass
        try:
            try:
                session = await asyncio.wait_for(self._handshake(reader, writer), _HANDSHAKE_S)
            except TimeoutError:
                session = None  # a peer that connects and says nothing does not hold a slot
            if session is None:
                self.refused += 1
                return
            while True:
                header = await reader.readexactly(_HEADER.size)
                size, index = _HEADER.unpack(header)
                if size > MAX_FRAME:
                    self.refused += 1
                    return
                frame = await reader.readexactly(size + TAG)
                body, tag = frame[:size], frame[size:]
                if not session.check(header, body, tag) or index >= len(METHODS):
                    self.refused += 1
                    return
                try:
                    args, kwargs = _unpack(body)
                    if not isinstance(args, list) or not isinstance(kwargs, dict):
                        raise ValueError("a call is [args, kwargs]")
                except Exception:  # noqa: BLE001 - any decoding failure: refuse the connection
                    self.refused += 1
                    return
                try:
                    reply = session.seal(_OK, _pack(self._apply(METHODS[index], args, kwargs)))
                except Exception as exc:  # noqa: BLE001 - the caller raises it (type name + message)
                    reply = session.seal(_ERROR, _pack([type(exc).__name__, str(exc)]))
                writer.write(reply)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, ssl.SSLError):
            pass
        finally:
            writer.close()

    async def _handshake(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> _Session | None:
        server_nonce = secrets.token_bytes(NONCE)
        writer.write(MAGIC + server_nonce)
        await writer.drain()
        answer = await reader.readexactly(NONCE + _PROOF)
        client_nonce, proof = answer[:NONCE], answer[NONCE:]
        expected = _proof(self._secret, b"client", server_nonce, client_nonce)
        if not hmac.compare_digest(proof, expected):
            return None
        writer.write(_proof(self._secret, b"server", server_nonce, client_nonce))
        await writer.drain()
        return _Session(self._secret, server_nonce, client_nonce, server=True)


# -- client --------------------------------------------------------------------------------------


class ChannelClient:
    """One process's blocking connection to a :class:`ChannelServer`. Calls on it are serialized.

    Raises :class:`ChannelError` (a ``ConnectionError``) when the server cannot be reached, refuses the
    handshake or answers with a frame that fails its tag; :class:`Unencodable` before sending when
    the arguments cannot travel; the server's exception (rebuilt from its type name) when the call
    itself raised.
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
            self._sock = sock
            self._file = sock.makefile("rb")
            self._session = self._handshake(secret)
        except (OSError, ssl.SSLError) as exc:
            sock.close()
            raise ChannelError(f"the coordinator channel refused the connection: {exc}") from exc
        self._lock = threading.Lock()

    @property
    def tls_version(self) -> str | None:
        """The TLS version of the connection, None when it is plain TCP."""
        return self._sock.version() if isinstance(self._sock, ssl.SSLSocket) else None

    def _handshake(self, secret: bytes) -> _Session:
        hello = self._read(len(MAGIC) + NONCE)
        if hello[: len(MAGIC)] != MAGIC:
            raise ChannelError("not a lineage_data coordinator channel")
        server_nonce = hello[len(MAGIC) :]
        client_nonce = secrets.token_bytes(NONCE)
        self._sock.sendall(client_nonce + _proof(secret, b"client", server_nonce, client_nonce))
        expected = _proof(secret, b"server", server_nonce, client_nonce)
        if not hmac.compare_digest(self._read(_PROOF), expected):
            raise ChannelError("the coordinator channel did not prove it knows the secret")
        return _Session(secret, server_nonce, client_nonce, server=False)

    def call(self, method: str, args: tuple | list, kwargs: dict) -> Any:
        """Apply ``method`` on the server and return its answer."""
        index = _INDEX.get(method)
        if index is None:
            raise AttributeError(f"the coordinator has no method {method!r}")
        body = _pack([list(args), kwargs])
        if len(body) > MAX_FRAME:
            raise Unencodable(f"a {len(body)}-byte call is over the channel's {MAX_FRAME} bytes")
        with self._lock:
            self._sock.sendall(self._session.seal(index, body))
            header = self._read(_HEADER.size)
            size, status = _HEADER.unpack(header)
            if size > MAX_FRAME:
                raise ChannelError("the coordinator channel sent an oversized frame")
            frame = self._read(size + TAG)
            if not self._session.check(header, frame[:size], frame[size:]):
                raise ChannelError("a reply on the coordinator channel failed its authentication")
        try:
            value = _unpack(frame[:size])
        except Exception as exc:  # noqa: BLE001 - a reply that does not decode: drop the channel
            raise ChannelError(f"an undecodable reply on the coordinator channel: {exc}") from exc
        if status != _OK:
            name, message = value
            raise _error(str(name), str(message))
        return value

    def _read(self, size: int) -> bytes:
        data = self._file.read(size)
        if len(data) != size:
            raise ChannelError("the coordinator closed the connection")
        return data

    def close(self) -> None:
        """Hang up."""
        try:
            self._file.close()
            self._sock.close()
        except OSError:
            pass
