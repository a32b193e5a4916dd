"""The coordinator's socket channel, server and client in one process (no Ray).

Each attack is made by a client that knows the protocol and, where it says so, the secret; each must
be refused without running anything, and the server must go on serving honest clients. The
challenge is ``multiprocessing.connection``'s; these tests check how the channel uses it.
"""

from __future__ import annotations

import asyncio
import os
import pickle
import secrets
import socket
import ssl
import threading
import time
from multiprocessing.connection import answer_challenge, deliver_challenge

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
        self.threads: set[int] = set()  # where apply ran
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, daemon=True).start()

        def apply(method: str, args: list, kwargs: dict):
            self.applied.append(method)
            self.threads.add(threading.get_ident())
            return getattr(self.state, method)(*args, **kwargs)

        self.server = ch.ChannelServer(secret, apply, ssl_context)
        self.host, self.port = self._run(self.server.start("127.0.0.1"))

    def _run(self, coro):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(10)

    def client(self, secret: bytes = SECRET, ssl_context=None) -> ch.ChannelClient:
        return ch.ChannelClient(self.host, self.port, secret, timeout=10, ssl_context=ssl_context)

    def raw(self) -> socket.socket:
        return socket.create_connection((self.host, self.port), timeout=10)

    def loop_thread(self) -> int:
        async def ident():
            return threading.get_ident()

        return self._run(ident())

    def close(self):
        if not self.loop.is_running():
            return

        async def stop():
            self.server.close()
            for task in asyncio.all_tasks():
                if task is not asyncio.current_task():
                    task.cancel()

        self._run(stop())
        self.loop.call_soon_threadsafe(self.loop.stop)
        while self.loop.is_running():
            time.sleep(0.001)


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
    """Whether the server hung up: it closes the socket (what it sent before, a challenge, is read
    past); a connection it keeps open times the read out instead."""
    try:
        while True:
            data = sock.recv(1 << 16)
            if not data:
                return True
    except ConnectionError:
        return True
    except TimeoutError:
        return False


def _authenticated(sock: socket.socket, secret: bytes = SECRET) -> ch.Frames:
    """An honest challenge by hand: the attacker who holds the secret."""
    frames = ch.Frames(sock)
    answer_challenge(frames, secret)
    deliver_challenge(frames, secret)
    return frames


def _refused(served: Served, refused: int) -> bool:
    """Whether the server has counted one more refused connection (it counts on its own thread)."""
    deadline = time.monotonic() + 10
    while served.server.refused == refused and time.monotonic() < deadline:
        time.sleep(0.01)
    return served.server.refused == refused + 1


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
    refused = served.server.refused
    with pytest.raises(ch.ChannelError):
        served.client(secret=secrets.token_bytes(32))
    assert _refused(served, refused)
    # What a client sends in the challenge is an HMAC of the server's random message: the secret is
    # not among the bytes on the wire.
    sent: list[bytes] = []

    class Recorder(ch.Frames):
        def send_bytes(self, data: bytes) -> None:
            sent.append(data)
            super().send_bytes(data)

    frames = Recorder(served.raw())
    answer_challenge(frames, SECRET)
    deliver_challenge(frames, SECRET)
    assert sent and all(SECRET not in data for data in sent)
    frames.close()
    _still_serving(served)


def test_a_server_without_the_secret_cannot_answer():
    """An impostor on the port that accepts any client: it fails the client's challenge."""
    listener = socket.create_server(("127.0.0.1", 0))

    def impostor():
        conn, _ = listener.accept()
        frames = ch.Frames(conn)
        try:
            deliver_challenge(frames, secrets.token_bytes(32))  # the client's answer fails it
        except Exception:
            pass
        frames.close()

    thread = threading.Thread(target=impostor, daemon=True)
    thread.start()
    try:
        with pytest.raises(ch.ChannelError):
            ch.ChannelClient(*listener.getsockname()[:2], SECRET, timeout=10)
    finally:
        thread.join(10)
        listener.close()


def test_a_peer_that_speaks_no_protocol_is_refused(served):
    refused = served.server.refused
    sock = served.raw()
    sock.sendall(b"GET / HTTP/1.0\r\n\r\n")
    assert _closed(sock)
    assert _refused(served, refused)
    sock.close()
    _still_serving(served)


@pytest.mark.parametrize(
    "attack", ["unknown_method", "oversized", "garbage", "not_a_call", "empty", "bad_ext"]
)
def test_bad_frames_close_that_connection_only_and_nothing_is_applied(served, attack):
    other = served.client()  # an honest client, connected before the attack
    sock = served.raw()
    frames = _authenticated(sock)
    body = msgpack.packb([[0], {}])
    frames.send(ch._INDEX["root_ids_since"], body)
    assert frames.recv()[0] == ch._OK  # the honest frame was answered
    applied, refused = len(served.applied), served.server.refused
    if attack == "unknown_method":
        frames.send(len(ch.METHODS), body)
    elif attack == "oversized":
        sock.sendall(ch._HEADER.pack(ch.MAX_FRAME + 2, 0))
    elif attack == "garbage":
        frames.send(ch._INDEX["count"], b"\xc1\xff\x00garbage")
    elif attack == "not_a_call":
        frames.send(ch._INDEX["count"], msgpack.packb({"args": 1}))
    elif attack == "empty":
        frames.send_bytes(b"")
    else:  # an extension type the codec does not know, holding a pickle
        payload = msgpack.packb([[msgpack.ExtType(99, pickle.dumps(len))], {}])
        frames.send(ch._INDEX["count"], payload)
    assert _closed(sock)
    assert _refused(served, refused)
    assert len(served.applied) == applied
    sock.close()
    assert other.call("snapshot", [], {})["epoch"] == served.state.epoch  # still served
    other.close()
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
        frames = _authenticated(sock)  # authenticated: the attacker holds the secret
        frames.send(ch._INDEX[method], bomb)  # a pickle as the body
        _closed(sock)
        sock.close()
        sock = served.raw()
        frames = _authenticated(sock)
        frames.send(ch._INDEX[method], msgpack.packb([[bomb], {}]))  # as bytes inside
        sock.recv(1)  # answered or closed: either way, never unpickled
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


def test_a_client_that_does_not_answer_is_dropped(served, monkeypatch):
    monkeypatch.setattr(ch, "_HANDSHAKE_S", 0.2)
    refused = served.server.refused
    sock = served.raw()  # connects and says nothing
    assert _closed(sock)
    assert _refused(served, refused)
    sock.close()


def test_a_coordinator_that_hangs_times_the_client_out():
    listener = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []

    def silent():
        conn, _ = listener.accept()
        held.append(conn)  # accepts, never sends the challenge

    thread = threading.Thread(target=silent, daemon=True)
    thread.start()
    try:
        with pytest.raises(ch.ChannelError):
            ch.ChannelClient(*listener.getsockname()[:2], SECRET, timeout=0.3)
    finally:
        thread.join(10)
        for conn in held:
            conn.close()
        listener.close()


def test_calls_from_many_clients_are_applied_on_the_event_loop_one_at_a_time(served):
    """The state is single-writer: every call runs on the server's loop, none on a thread of its own."""
    clients = [served.client() for _ in range(4)]

    def calls(client, k):
        for i in range(25):
            client.call("register_roots", [[f"r{k}-{i}"]], {})

    threads = [threading.Thread(target=calls, args=(c, k)) for k, c in enumerate(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    roots, _ = clients[0].call("root_ids_since", [0], {})
    assert len(roots) == 100
    assert served.threads == {served.loop_thread()}
    for c in clients:
        c.close()


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


def test_any_channel_failure_falls_back_to_the_ray_call(monkeypatch):
    """A server that refuses the secret, then one that drops the connection mid-call: Ray answers."""
    from lineage_data._ray import coordinator

    monkeypatch.delenv("LINEAGE_DATA_COORDINATOR_SOCKET", raising=False)
    served = Served()
    try:

        class Helper(_RayCalls):
            address: tuple = ()

            def call(self, method: str, *args, stage=None):
                if method == "channel":
                    self.asked.append(method)
                    return self.address
                return super().call(method, *args, stage=stage)

        helper = Helper()
        helper.name = f"lineage-test-fallback-{secrets.token_hex(4)}"
        client = coordinator.CoordinatorClient(helper)
        helper.address = (served.host, served.port, secrets.token_bytes(32), False)  # wrong secret
        assert client.snapshot()["epoch"] == helper.state.epoch
        assert helper.asked == ["channel", "call"]
        monkeypatch.setattr(coordinator, "_RETRY_CHANNEL_S", 0.0)
        helper.address = (served.host, served.port, SECRET, False)
        assert client.snapshot()["epoch"] == served.state.epoch  # over the socket now
        assert helper.asked == ["channel", "call", "channel"]
        served.close()  # stop listening; and break the open connection:
        channel = coordinator._channels[helper.name]
        assert isinstance(channel, ch.ChannelClient)
        channel._frames.sock.shutdown(socket.SHUT_RDWR)
        assert client.snapshot()["epoch"] == helper.state.epoch  # this call went over Ray
        assert helper.asked[-1] == "call" and helper.name not in coordinator._channels
    finally:
        served.close()
