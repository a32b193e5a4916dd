"""A model server as a batch stage: OpenAI-compatible chat completions over HTTP, many in flight.

Per row: 429, 408, 5xx, a dropped connection and a timeout are retried with backoff (``Retry-After``
honoured), then fail the row; another 4xx fails the row at once. A server that cannot be reached,
or refuses the key or the path (401, 403, 404), raises :class:`~lineage_data.StageFailedError`.
The API key never appears in a message. Usage and the whole failure policy:
``docs/connectors/openai.md``. Not Ray Data's HTTP request stage: it fails the whole batch for
one request and does not honour ``Retry-After``.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import random
import threading
import weakref
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pyarrow as pa

from lineage_data import RecordFailure, StageFailedError
from lineage_data._core.errors import describe
from lineage_data.connectors import _prompt
from lineage_data.connectors._prompt import NUM_GENERATED_TOKENS, NUM_PROMPT_TOKENS

__all__ = ["NUM_GENERATED_TOKENS", "NUM_PROMPT_TOKENS", "OpenAIChatStage"]

RETRIED_STATUSES = frozenset({408, 409, 425, 429})  # and every 5xx
STAGE_STATUSES = frozenset({401, 403, 404})  # wrong key, wrong path or model: no row's fault
_IMAGE_TYPES = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
)


class OpenAIChatStage:
    """A ``map_batches`` callable that sends each row to an OpenAI-compatible chat endpoint.

    The user message is ``prompt_template`` formatted with the row's columns, plus the row's image
    (``image_column``: encoded PNG/JPEG/GIF/WebP bytes) or frames (``frames_column``: a list of
    them) as base64 data URLs, in that order; ``system_prompt`` adds a system message.

    Example (against the test tooling's loopback server):
        >>> import pyarrow as pa
        >>> from lineage_data.connectors.testing.chat_server import ChatServer
        >>> with ChatServer() as server:
        ...     stage = OpenAIChatStage(server.base_url, "echo")
        ...     stage.run(pa.table({"text": ["a page", "another page"]}))["generation"]
        ['echo: a page', 'echo: another page']

    Args:
        base_url: The API's base URL, e.g. ``http://127.0.0.1:8000/v1`` (no credentials).
        model: The ``model`` field of every request.
        prompt_template: ``str.format`` template; its fields name columns of the batch.
        system_prompt: A system message sent first, or ``None``.
        image_column: Column of encoded image bytes, or ``None``.
        frames_column: Column of lists of encoded frames (video clips), or ``None``.
        output_column: Name of the reply-text column.
        keep_columns: Columns of the batch copied to the output unchanged.
        sampling_params: Extra fields of the request body (``max_tokens``, ``temperature``, ...).
        api_key: The bearer token; ``None`` reads the environment variable ``api_key_env``.
        api_key_env: Where the key is read from when ``api_key`` is ``None``.
        max_concurrency: Requests in flight at once from this actor.
        max_retries: Retries of one request after its first attempt.
        backoff_s: First backoff; it doubles per retry, with jitter (half to all of it).
        max_backoff_s: Longest wait between two attempts (``Retry-After`` included).
        request_timeout_s: Seconds one attempt may take, answer included.
        connect_timeout_s: Seconds to open a connection.

    Raises:
        ValueError: The template or the options contradict each other.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        prompt_template: str = "{text}",
        system_prompt: str | None = None,
        image_column: str | None = None,
        frames_column: str | None = None,
        output_column: str = "generation",
        keep_columns: Sequence[str] = (),
        sampling_params: Mapping[str, Any] | None = None,
        api_key: str | None = None,
        api_key_env: str = "OPENAI_API_KEY",
        max_concurrency: int = 16,
        max_retries: int = 4,
        backoff_s: float = 0.5,
        max_backoff_s: float = 20.0,
        request_timeout_s: float = 120.0,
        connect_timeout_s: float = 5.0,
    ) -> None:
        if max_concurrency < 1 or max_retries < 0:
            raise ValueError("max_concurrency must be >= 1 and max_retries >= 0")
        self._media = [c for c in (image_column, frames_column) if c is not None]
        self._fields = _prompt.checked_fields(prompt_template, output_column, self._media)
        self._template = prompt_template
        self._system = system_prompt
        self._image_column, self._frames_column = image_column, frames_column
        self._output_column = output_column
        self._keep = tuple(keep_columns)
        if clash := sorted(
            {output_column, NUM_PROMPT_TOKENS, NUM_GENERATED_TOKENS} & set(self._keep)
        ):
            raise ValueError(f"keep_columns {clash} clash with the output columns")
        self._body = {"model": model, **dict(sampling_params or {})}
        self._url = base_url.rstrip("/") + "/chat/completions"
        self.endpoint = _without_credentials(self._url)
        if urlsplit(self._url).password is not None:
            raise ValueError(
                f"base_url {self.endpoint!r} holds credentials: pass the key as "
                "api_key or in the api_key_env environment variable"
            )
        self._key = api_key if api_key is not None else os.environ.get(api_key_env)
        self._headers = {"Content-Type": "application/json"}
        if self._key:
            self._headers["Authorization"] = f"Bearer {self._key}"
        self._max_concurrency, self._max_retries = max_concurrency, max_retries
        self._backoff_s, self._max_backoff_s = backoff_s, max_backoff_s
        self._timeouts = (request_timeout_s, connect_timeout_s)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._session: Any = None
        self._sessions: list[Any] = []  # the session of the running loop (shared with its closer)
        self._gate: asyncio.Semaphore | None = None

    def __repr__(self) -> str:  # never the key
        return f"OpenAIChatStage({self.endpoint!r}, model={self._body['model']!r})"

    async def __call__(self, batch: pa.Table | Mapping[str, Sequence[Any]]) -> dict[str, list[Any]]:
        """Send every row of ``batch``; the replies in row order.

        A coroutine, so that an actor can hold several batches at once (their requests share
        ``max_concurrency``); the requests run on the stage's own event loop, in a thread of its
        own. :meth:`run` is the blocking form.

        Raises:
            StageFailedError: The server cannot be reached, or refuses the key or the path.
            ValueError: The batch lacks a column the stage is configured to read.
        """
        wanted = {*self._media, *self._fields, *self._keep}
        columns, num_rows = _prompt.batch_columns(batch, wanted, "OpenAIChatStage")
        values, bodies = _prompt.requests(num_rows, lambda row: self._request(columns, row))
        answers: dict[int, _prompt.Answer] = {}
        if bodies:
            future = asyncio.run_coroutine_threadsafe(self._send_all(bodies), self._running_loop())
            answers = await asyncio.wrap_future(future)
        return {
            **{name: columns[name] for name in self._keep},
            **_prompt.output_columns(self._output_column, values, answers),
        }

    def run(self, batch: pa.Table | Mapping[str, Sequence[Any]]) -> dict[str, list[Any]]:
        """:meth:`__call__`, blocking (for a caller without an event loop)."""
        return asyncio.run(self(batch))

    def _request(self, columns: dict[str, list[Any]], row: int) -> bytes | RecordFailure:
        """The JSON body of one row's request, or why it cannot be built."""
        text = _prompt.prompt_text("OpenAIChatStage", self._template, self._fields, columns, row)
        if isinstance(text, RecordFailure):
            return text
        media: list[Any] = []
        if self._image_column is not None and columns[self._image_column][row] is not None:
            media.append(columns[self._image_column][row])
        if self._frames_column is not None:
            media.extend(columns[self._frames_column][row] or ())
        parts: list[dict[str, Any]] = []
        for index, data in enumerate(media):
            url = _data_url(data)
            if url is None:
                return RecordFailure(f"OpenAIChatStage: media item {index} is not a known image")
            parts.append({"type": "image_url", "image_url": {"url": url}})
        if (self._image_column or self._frames_column) and not parts:
            return RecordFailure("OpenAIChatStage: the row has no image")
        content: Any = [{"type": "text", "text": text}, *parts] if parts else text
        messages = [{"role": "user", "content": content}]
        if self._system is not None:
            messages.insert(0, {"role": "system", "content": self._system})
        return json.dumps({**self._body, "messages": messages}).encode()

    def _running_loop(self) -> asyncio.AbstractEventLoop:
        """This stage's event loop, in a daemon thread; stopped by close() or collection."""
        if self._loop is None:
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name="openai-stage", daemon=True).start()
            self._loop = loop
            self._closer = weakref.finalize(self, _stop, loop, self._sessions)
        return self._loop

    def close(self) -> None:
        """Close the connections and stop the event loop (the next call starts them again)."""
        if self._loop is not None:
            self._closer()
            self._loop, self._sessions = None, []

    async def _send_all(self, bodies: dict[int, bytes]) -> dict[int, _prompt.Answer]:
        import aiohttp

        if not self._sessions:
            request_s, connect_s = self._timeouts
            self._session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=request_s, sock_connect=connect_s),
                connector=aiohttp.TCPConnector(limit=self._max_concurrency),
            )
            self._sessions.append(self._session)
            self._gate = asyncio.Semaphore(self._max_concurrency)
        tasks = {row: asyncio.ensure_future(self._send(body)) for row, body in bodies.items()}
        try:
            await asyncio.gather(*tasks.values())
        except BaseException:
            for task in tasks.values():  # a stage error: the other requests are not needed
                task.cancel()
            raise
        return {row: task.result() for row, task in tasks.items()}

    async def _send(self, body: bytes) -> _prompt.Answer:
        assert self._gate is not None
        for attempt in range(self._max_retries + 1):
            async with self._gate:
                result = await self._attempt(body)
            last = attempt == self._max_retries
            match result:
                case ("done", value, usage):
                    return value, usage.get("prompt_tokens"), usage.get("completion_tokens")
                case ("failed", why):
                    return RecordFailure(f"OpenAIChatStage: {self._redact(why)}"), None, None
                case ("retry", why, _) if last:
                    why = f"{self._redact(why)} after {attempt + 1} attempts"
                    return RecordFailure(f"OpenAIChatStage: {why}"), None, None
                case ("unreachable", why) if last:
                    raise StageFailedError(
                        f"cannot reach the model server at {self.endpoint} ({self._redact(why)})"
                    )
                case ("retry", _, retry_after):
                    await self._back_off(attempt, retry_after)
                case ("unreachable", _):
                    await self._back_off(attempt, None)
        raise AssertionError("the last attempt returns or raises")

    async def _back_off(self, attempt: int, retry_after: float | None) -> None:
        """Exponential backoff with jitter (half to all of it), at least ``Retry-After``."""
        wait = self._backoff_s * 2**attempt * random.uniform(0.5, 1.0)
        await asyncio.sleep(min(max(wait, retry_after or 0.0), self._max_backoff_s))

    async def _attempt(self, body: bytes) -> tuple[Any, ...]:
        """One attempt, classified: done, failed (the row's fault), retry or unreachable."""
        import aiohttp

        try:
            async with self._session.post(self._url, data=body, headers=self._headers) as response:
                status = response.status
                text = await response.text()
                if status == 200:
                    return _reply(text)
                message = _error_message(text)
                if status in STAGE_STATUSES:
                    raise StageFailedError(
                        f"the model server at {self.endpoint} answered HTTP {status}: "
                        f"{self._redact(message)}"
                    )
                why = f"HTTP {status} from the server: {message}"
                if status in RETRIED_STATUSES or status >= 500:
                    return "retry", why, _retry_after(response.headers.get("Retry-After"))
                return "failed", why
        except aiohttp.ClientConnectorError as exc:  # refused, no such host, connect timeout
            return "unreachable", describe(exc)
        except aiohttp.ClientError as exc:  # reset, dropped
            return "retry", f"the connection failed: {describe(exc)}", None
        except TimeoutError:  # no answer in time
            return "retry", f"no answer in {self._timeouts[0]:g} s", None

    def _redact(self, message: str) -> str:
        return message.replace(self._key, "***") if self._key else message


def _stop(loop: asyncio.AbstractEventLoop, sessions: list[Any]) -> None:
    """Close ``sessions`` on ``loop``, then stop it (from any thread)."""

    async def close() -> None:
        for session in sessions:
            await session.close()
        loop.stop()

    if loop.is_running():
        asyncio.run_coroutine_threadsafe(close(), loop)


def _reply(text: str) -> tuple[Any, ...]:
    """A 200's body: ``("done", text, usage)``, or ``("failed", why)`` for one without a reply."""
    try:
        data = json.loads(text)
        choice = data["choices"][0]
        content = choice["message"]["content"]
    except (ValueError, KeyError, IndexError, TypeError):
        return "failed", f"the server's answer is not a chat completion: {text[:200]!r}"
    if not isinstance(content, str):
        return "failed", f"the reply has no text (finish_reason {choice.get('finish_reason')!r})"
    usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
    return "done", content, usage


def _error_message(text: str) -> str:
    """The server's message from an OpenAI-style error body (or the start of the body)."""
    try:
        error = json.loads(text).get("error")
        message = error.get("message") if isinstance(error, dict) else error
        if message:
            return str(message)[:500]
    except (ValueError, AttributeError):
        pass
    return text[:200] or "(empty body)"


def _retry_after(value: str | None) -> float | None:
    """Seconds from a ``Retry-After`` header given in seconds (an HTTP date is ignored)."""
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None


def _data_url(data: Any) -> str | None:
    """Encoded image bytes as a base64 data URL, or ``None`` when they are not a known image."""
    if not isinstance(data, bytes | bytearray | memoryview):
        return None
    data = bytes(data)
    kind = next((mime for magic, mime in _IMAGE_TYPES if data.startswith(magic)), None)
    if kind is None and data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        kind = "image/webp"
    if kind is None:
        return None
    return f"data:{kind};base64,{base64.b64encode(data).decode()}"


def _without_credentials(url: str) -> str:
    """``url`` without a user or password in its authority (for messages)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    netloc = host + (f":{parts.port}" if parts.port else "")
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))
