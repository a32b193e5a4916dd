"""The coordinator: one async actor on the driver node, a thin shell over :class:`LineageState`.

Workers call it once per batch through :class:`CoordinatorClient`; payloads never pass through it. It
is a :mod:`helper <lineage_data._ray.actors>`: re-created empty, with a new epoch, when it dies. A Ray
actor call costs ~1 ms and one actor serves ~1,000 a second, too few for a fine-grained job, so the
actor also serves the calls on a socket of its own (:mod:`lineage_data._ray.channel`, ~0.03 ms a
call). Any trouble on the socket makes the client fall back to the Ray call for that call (which
survives the actor's restart) and ask for the new address later.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import ray

from lineage_data._core.state import METHODS, Coordinator, LineageState
from lineage_data._ray.actors import Helper, helper_timeout_s, start_helper
from lineage_data._ray.channel import (
    ChannelClient,
    ChannelServer,
    Unencodable,
    ray_uses_tls,
    socket_enabled,
    tls_context,
)
from lineage_data._ray.deaths import this_worker, why_died

_RETRY_CHANNEL_S = 2.0  # after a failed connect, use Ray calls for this long before trying again


@ray.remote(num_cpus=0)
class CoordinatorActor:
    """Holds one execution's lineage state. Methods run one at a time on the actor's event loop."""

    def __init__(self, columns: dict[str, list[str]] | None = None) -> None:
        self._state = LineageState(columns)
        self._secret = secrets.token_bytes(32)
        self._server: ChannelServer | None = None
        self._channel: tuple[str, int, bytes, bool] | None = None

    async def ping(self) -> int:
        """Liveness check; returns the state's epoch."""
        return self._state.epoch

    async def call(self, method: str, args: tuple, kwargs: dict) -> Any:
        """Apply one call of the table; exceptions travel back to the caller."""
        return self._apply(method, args, kwargs)

    async def channel(self) -> tuple[str, int, bytes, bool] | None:
        """``(host, port, secret, tls)`` of the socket channel, started on first ask.

        None when there is none (turned off, TLS certificates unloadable, no socket): calls use Ray.
        """
        if self._channel is None and socket_enabled():
            try:
                context = tls_context(server=True) if ray_uses_tls() else None
                server = ChannelServer(self._secret, self._apply, context)
                host, port = await server.start(ray.util.get_node_ip_address())
            except (OSError, KeyError):  # ssl.SSLError is an OSError
                return None
            self._server = server
            self._channel = (host, port, self._secret, server.tls)
        return self._channel

    def _apply(self, method: str, args: Sequence, kwargs: dict) -> Any:
        if method not in METHODS:
            raise AttributeError(f"the coordinator has no method {method!r}")
        return getattr(self._state, method)(*args, **kwargs)


def start_coordinator(
    run_id: str, columns: dict[str, list[str]] | None = None
) -> tuple[CoordinatorClient, Any]:
    """Start the coordinator of one run on the driver's node; returns (client, re-create).

    ``columns``: the columns stages of an earlier run showed (a plan continued from its kept rows).
    """
    helper, create = start_helper(
        CoordinatorActor, "coordinator", columns, run_id=run_id, suffix="coordinator"
    )
    return CoordinatorClient(helper), create


def _connect(host: str, port: int, secret: bytes, tls: bool) -> ChannelClient:
    """Open this process's channel to a coordinator (TLS with Ray's certificates when it is TLS)."""
    context = tls_context(server=False) if tls else None
    return ChannelClient(host, port, secret, timeout=helper_timeout_s(), ssl_context=context)


# Per process: the open channel to each coordinator (by actor name), or when connecting last failed.
_channels: dict[str, ChannelClient | float] = {}
_channels_lock = threading.Lock()


class CoordinatorClient:
    """The coordinator as operators see it: each call of its table forwarded, one round trip each.

    Picklable: it travels to the workers in the stage wrappers, and each process opens its own
    connection on first use. ``stage`` names the caller's stage in the error raised when the
    coordinator cannot be reached.
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
            except Unencodable:
                pass  # a value the channel does not carry: this call goes over Ray
            except OSError:  # a ChannelError (the client turns a hang-up into one too)
                # the actor restarted or the connection broke: Ray waits for the actor to come back
                self._forget(channel)
        return self.ray_call(method, *args, **kwargs)

    def ray_call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """The same call as an actor call over Ray (what the socket saves; the bench compares)."""
        return self.helper.call("call", method, args, kwargs, stage=self._stage)

    def _channel(self) -> ChannelClient | None:
        if not socket_enabled():
            return None
        with _channels_lock:
            known = _channels.get(self.name)
        if isinstance(known, ChannelClient):
            return known
        if known is not None and time.monotonic() - known < _RETRY_CHANNEL_S:
            return None
        channel: ChannelClient | float
        try:
            address = self.helper.call("channel", stage=self._stage)
            channel = _connect(*address) if address is not None else time.monotonic()
        except (OSError, KeyError, ray.exceptions.RayError):
            channel = time.monotonic()
        with _channels_lock:
            current = _channels.get(self.name)
            if isinstance(current, ChannelClient):  # another thread connected meanwhile
                if isinstance(channel, ChannelClient):
                    channel.close()
                return current
            _channels[self.name] = channel
        return channel if isinstance(channel, ChannelClient) else None

    def _forget(self, channel: ChannelClient) -> None:
        channel.close()
        with _channels_lock:
            if _channels.get(self.name) is channel:
                del _channels[self.name]

    if TYPE_CHECKING:  # the calls of the table, generated below (see _forwarded)

        def __getattr__(self, name: str) -> Callable[..., Any]: ...

    def attempt(self, stage: str, key: str | None, ended: Sequence[str] = ()) -> tuple[int, int]:
        """The journal's ``attempt``, naming this process as the one that makes it."""
        who = this_worker() if key is not None else None
        crashes, timeouts = self._call("attempt", stage, key, ended, who)
        return crashes, timeouts

    def why_crashed(self, stage: str, key: str) -> str | None:
        """Why the processes that ran ``key`` before died, as far as Ray and this node can tell."""
        return why_died(self._call("crashed_by", stage, key))


def _forwarded(name: str) -> Callable[..., Any]:
    """The client's method for call ``name`` of the table: one round trip, documented as the table."""

    def call(self: CoordinatorClient, *args: Any, **kwargs: Any) -> Any:
        return self._call(name, *args, **kwargs)

    call.__name__, call.__qualname__ = name, f"CoordinatorClient.{name}"
    call.__doc__ = getattr(Coordinator, name).__doc__
    return call


# The client serves exactly the table the actor dispatches (lineage_data._core.state.METHODS).
for _name in METHODS:
    if _name not in vars(CoordinatorClient):  # attempt names the calling process
        setattr(CoordinatorClient, _name, _forwarded(_name))
