"""The coordinator's socket channel, server and client in one process (no Ray).

Each attack is made by a client that knows the protocol and, where it says so, the secret; each must
be refused without running anything, and the server must go on serving honest clients.
"""

from __future__ import annotations

import asyncio
import hmac
import os
import pickle
import secrets
import socket
import ssl
import threading

import msgpack
import pyarrow as pa
import pytest
from certs import make_certificates

from lineage_data._core.errors import DuplicateRootError
from lineage_data._core.state import CommitResult, Handoff, LineageState, Verdict
from lineage_data._ray import channel as ch

SECRET = secrets.token_bytes(32)


class Served:
    """A ChannelServer over a LineageState on an event loop of its own thread."""

    def __init__(self, secret: bytes = SECRET, ssl_context: ssl.SSLContext | None = None):
        self.state = LineageState()
        self.applied: list[str] = []
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, daemon=True).start()

        def apply(method: str, args: list, kwargs: dict):
            self.applied.append(method)
            return getattr(self.state, method)(*args, **kwargs)

        self.server = ch.ChannelServer(secret, apply, ssl_context)
        self.host, self.port = self._run(self.server.start("127.0.0.1"))

    def _run(self, coro):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(10)

    def client(self, secret: bytes = SECRET, ssl_context=None) -> ch.ChannelClient:
        return ch.ChannelClient(self.host, self.port, secret, timeout=10, ssl_context=ssl_context)

    def raw(self) -> socket.socket:
        return socket.create_connection((self.host, self.port), timeout=10)

    def close(self):
        async def stop():
            self.server.close()
            for task in asyncio.all_tasks():
                if task is not asyncio.current_task():
                    task.cancel()

        self._run(stop())
        self.loop.call_soon_threadsafe(self.loop.stop)


@pytest.fixture
def served():
    s = Served()
    yield s
    s.close()


def _read(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            break
        data += chunk
    return data


def _closed(sock: socket.socket) -> bool:
    """Whether the server hung up (no reply comes)."""
    try:
        return sock.recv(1) == b""
    except ConnectionError:
        return True


def _session(sock: socket.socket, secret: bytes = SECRET) -> ch._Session:
    """An honest handshake by hand: the attacker who holds the secret."""
    hello = _read(sock, len(ch.MAGIC) + ch.NONCE)
    assert hello.startswith(ch.MAGIC)
    server_nonce, client_nonce = hello[len(ch.MAGIC) :], secrets.token_bytes(ch.NONCE)
    sock.sendall(client_nonce + ch._proof(secret, b"client", server_nonce, client_nonce))
    assert _read(sock, 32) == ch._proof(secret, b"server", server_nonce, client_nonce)
    return ch._Session(secret, server_nonce, client_nonce, server=False)


def _still_serving(served: Served) -> None:
    client = served.client()
    try:
        assert client.call("snapshot", [], {})["epoch"] == served.state.epoch
    finally:
        client.close()


def test_calls_round_trip_with_the_types_the_state_uses(served):
    client = served.client()
    client.call("register_roots", [pa.array(["a", "b"]), "block-1"], {})
    client.call("register_roots", [["c"]], {"block": None})
    handoff = client.call("handoff", [0, ["a", "a", "b"], [(0,), (1,), (0,)]], {})
    assert isinstance(handoff, Handoff) and handoff.barred == {}
    result = client.call(
        "commit",
        [0, handoff.generation, ["a"], [(0,)], ["FAILED"], ["bad"]],
        {"group": [True], "stage": "ocr", "counts": {"PRESENT": 2}},
    )
    assert isinstance(result, CommitResult) and result.verdicts == [Verdict.ACCEPTED]
    assert client.call("handoff", [0, ["a"], [(1,)]], {}).barred == {0: "bad"}  # int keys kept
    roots, cursor = client.call("root_ids_since", [0], {})
    assert isinstance(roots, pa.StringArray) and roots.to_pylist() == ["a", "b", "c"]
    assert cursor == 3
    assert client.call("snapshot", [], {}) == served.state.snapshot()
    assert client.tls_version is None
    client.close()


def test_errors_come_back_as_their_type_and_message(served):
    client = served.client()
    client.call("register_roots", [["a"], "x"], {})
    with pytest.raises(DuplicateRootError, match="'a'|a"):
        client.call("register_roots", [["a"], "y"], {})
    with pytest.raises(AttributeError):
        client.call("__init__", [], {})  # not a method of the channel: never sent
    assert client.call("snapshot", [], {})["epoch"] == served.state.epoch  # the channel goes on
    client.close()


def test_wrong_secret_is_refused_and_the_secret_never_travels(served):
    with pytest.raises(ch.ChannelError):
        served.client(secret=secrets.token_bytes(32))
    # What a client sends in the handshake is a nonce and an HMAC: the secret is not among its bytes.
    sock = served.raw()
    hello = _read(sock, len(ch.MAGIC) + ch.NONCE)
    client_nonce = secrets.token_bytes(ch.NONCE)
    proof = ch._proof(SECRET, b"client", hello[len(ch.MAGIC) :], client_nonce)
    assert SECRET not in client_nonce + proof
    sock.close()
    _still_serving(served)


def test_a_server_without_the_secret_cannot_answer():
    """An impostor on the port that accepts any client: it cannot give the server's proof."""
    listener = socket.create_server(("127.0.0.1", 0))

    def impostor():
        conn, _ = listener.accept()
        conn.sendall(ch.MAGIC + secrets.token_bytes(ch.NONCE))
        _read(conn, ch.NONCE + 32)
        conn.sendall(secrets.token_bytes(32))
        conn.close()

    thread = threading.Thread(target=impostor, daemon=True)
    thread.start()
    try:
        with pytest.raises(ch.ChannelError, match="prove"):
            ch.ChannelClient(*listener.getsockname()[:2], SECRET, timeout=10)
    finally:
        thread.join(10)
        listener.close()


@pytest.mark.parametrize("attack", ["replay", "alter", "unknown_method", "oversized", "bad_ext"])
def test_forged_frames_are_refused_and_nothing_is_applied(served, attack):
    sock = served.raw()
    session = _session(sock)
    body = msgpack.packb([[0], {}])
    frame = session.seal(ch._INDEX["root_ids_since"], body)
    sock.sendall(frame)
    header = _read(sock, ch._HEADER.size)
    size, status = ch._HEADER.unpack(header)
    assert status == ch._OK and _read(sock, size + ch.TAG)  # the honest frame was answered
    applied, refused = len(served.applied), served.server.refused
    if attack == "replay":
        sock.sendall(frame)  # the same bytes again: its sequence number is spent
    elif attack == "alter":
        forged = session.seal(ch._INDEX["root_ids_since"], body)
        forged = forged[:-20] + bytes([forged[-20] ^ 1]) + forged[-19:]
        sock.sendall(forged)
    elif attack == "unknown_method":
        sock.sendall(session.seal(len(ch.METHODS), body))
    elif attack == "oversized":
        sock.sendall(ch._HEADER.pack(ch.MAX_FRAME + 1, 0))
    else:  # an extension type the codec does not know, holding a pickle
        payload = msgpack.packb([[msgpack.ExtType(99, pickle.dumps(len))], {}])
        sock.sendall(session.seal(ch._INDEX["count"], payload))
    assert _closed(sock)
    assert len(served.applied) == applied
    assert served.server.refused == refused + 1
    sock.close()
    _still_serving(served)


class _Plant:
    """Unpickling this creates a file: the side effect must never happen."""

    def __init__(self, path: str):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


def test_a_pickle_is_never_unpickled_even_with_the_secret(served, tmp_path):
    planted = tmp_path / "planted"
    bomb = pickle.dumps(_Plant(str(planted)), protocol=5)
    for method in ("snapshot", "register_roots"):
        sock = served.raw()
        session = _session(sock)  # authenticated: the attacker holds the secret
        sock.sendall(session.seal(ch._INDEX[method], bomb))  # a pickle as the body
        _closed(sock)
        sock.close()
        sock = served.raw()
        session = _session(sock)
        sock.sendall(
            session.seal(ch._INDEX[method], msgpack.packb([[bomb], {}]))
        )  # as bytes inside
        _closed(sock)
        sock.close()
    assert not planted.exists()
    _still_serving(served)


def test_values_the_wire_does_not_carry_are_refused_before_sending(served):
    client = served.client()
    with pytest.raises(ch.Unencodable):
        client.call("count", ["s", {"PRESENT": object()}], {})
    assert client.call("snapshot", [], {})["epoch"] == served.state.epoch  # nothing was sent
    client.close()


def test_settings_read_the_environment(monkeypatch):
    monkeypatch.delenv("LINEAGE_DATA_COORDINATOR_SOCKET", raising=False)
    monkeypatch.delenv("RAY_USE_TLS", raising=False)
    assert ch.socket_enabled() and not ch.ray_uses_tls()
    monkeypatch.setenv("LINEAGE_DATA_COORDINATOR_SOCKET", "0")
    monkeypatch.setenv("RAY_USE_TLS", "1")
    assert not ch.socket_enabled() and ch.ray_uses_tls()


# -- TLS -------------------------------------------------------------------------------------------


def test_with_ray_tls_the_channel_is_mutual_tls(tmp_path, monkeypatch):
    for name, value in make_certificates(tmp_path).items():
        monkeypatch.setenv(name, value)
    served = Served(ssl_context=ch.tls_context(server=True))
    try:
        assert served.server.tls
        client = served.client(ssl_context=ch.tls_context(server=False))
        assert client.tls_version in ("TLSv1.2", "TLSv1.3")
        assert client.call("snapshot", [], {})["epoch"] == served.state.epoch
        client.close()
        # A plain TCP client gets no protocol bytes, only a TLS handshake it did not start.
        with pytest.raises(ch.ChannelError):
            ch.ChannelClient(served.host, served.port, SECRET, timeout=1)
        # A TLS client without a certificate of the cluster's CA is refused.
        anonymous = ssl.create_default_context(cafile=os.environ["RAY_TLS_CA_CERT"])
        anonymous.check_hostname = False
        with pytest.raises(ch.ChannelError):
            served.client(ssl_context=anonymous).call("snapshot", [], {})
    finally:
        served.close()


def test_tls_settings_that_cannot_load_raise(monkeypatch, tmp_path):
    monkeypatch.setenv("RAY_TLS_SERVER_CERT", str(tmp_path / "missing.crt"))
    monkeypatch.setenv("RAY_TLS_SERVER_KEY", str(tmp_path / "missing.key"))
    monkeypatch.setenv("RAY_TLS_CA_CERT", str(tmp_path / "missing.ca"))
    with pytest.raises(OSError):
        ch.tls_context(server=True)


def test_the_handshake_proofs_differ_by_role():
    server_nonce, client_nonce = secrets.token_bytes(16), secrets.token_bytes(16)
    client = ch._proof(SECRET, b"client", server_nonce, client_nonce)
    server = ch._proof(SECRET, b"server", server_nonce, client_nonce)
    assert not hmac.compare_digest(client, server)  # a client's proof cannot be reflected back


# -- turned off ------------------------------------------------------------------------------------


class _RayCalls:
    """Stands in for the coordinator's Ray handle: answers ``call`` from a LineageState."""

    name = "lineage-test-coordinator"

    def __init__(self) -> None:
        self.state = LineageState()
        self.asked: list[str] = []

    def call(self, method: str, *args, stage=None):
        self.asked.append(method)
        if method == "call":
            name, call_args, kwargs = args
            return getattr(self.state, name)(*call_args, **kwargs)
        raise AssertionError(f"the client asked for {method!r}")


def test_turned_off_the_actor_serves_no_socket_and_clients_use_ray_calls(monkeypatch):
    from lineage_data._ray.coordinator import CoordinatorActor, CoordinatorClient

    monkeypatch.setenv("LINEAGE_DATA_COORDINATOR_SOCKET", "0")
    actor = CoordinatorActor.__ray_metadata__.modified_class()  # the class under Ray's wrapper
    assert asyncio.run(actor.channel()) is None
    helper = _RayCalls()
    client = CoordinatorClient(helper)
    assert client.snapshot()["epoch"] == helper.state.epoch
    assert helper.asked == ["call"]  # never asked for a channel
    monkeypatch.delenv("LINEAGE_DATA_COORDINATOR_SOCKET")

    async def served():
        return await actor.channel()

    host, port, secret, tls = asyncio.run(served())
    assert port > 0 and len(secret) == 32 and tls is False
