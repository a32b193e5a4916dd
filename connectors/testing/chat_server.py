"""A small OpenAI-compatible chat-completions server on loopback, for tests, demos and benchmarks.

It answers ``POST /v1/chat/completions`` deterministically from the request (no model): the reply is
``"echo [2 images]: <the user's text>"`` with token counts of the UTF-8 bytes, so a pipeline's
plumbing and ordering can be checked end to end against a real HTTP server in its own process::

    with ChatServer(latency_s=0.2, max_concurrency=64) as server:
        stage_kwargs = {"base_url": server.base_url, "model": "echo"}
        ...
        server.stats()          # {"requests": ..., "max_in_flight": ..., "prompts": {...}}

Faults are injected per request by markers in the user's text, counted per distinct prompt, so a
test chooses which rows misbehave and how often:

- ``[[429:N]]`` / ``[[500:N]]`` / ``[[503:N]]``: the first N attempts of this prompt get that status
  (``N`` may be ``*``: every attempt); a 429 carries ``Retry-After`` (``[[429:N:ra=S]]``, default 0).
- ``[[drop:N]]``: the first N attempts see the connection closed without an answer.
- ``[[slow:S]]``: the answer waits S seconds more (a request timeout on the client's side).
- ``[[400]]``: always a 400 with an OpenAI-style error body (the request's own fault).

Server-wide: ``latency_s`` per request, at most ``max_concurrency`` requests served at once (the rest
wait, as a model server's scheduler queues them), an optional ``api_key`` (401 without it), and
``GET /stats`` / ``POST /stats/reset``. It is built on aiohttp's web server (aiohttp comes with Ray).

From a shell: ``python -m lineage_data.connectors.testing.chat_server --port 8000 --latency-s 0.2``. Nothing here
imports Ray.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import json
import re
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from typing import Any

__all__ = ["ChatServer", "main", "reply_text"]

_MARKER = re.compile(r"\[\[(429|500|503|drop|slow|400)(?::([^\]:]+))?(?::ra=([0-9.]+))?\]\]")


def reply_text(text: str, images: int = 0) -> str:
    """The server's answer to a user message ``text`` with ``images`` images (what tests expect)."""
    media = f" [{images} image{'s' if images != 1 else ''}]" if images else ""
    return f"echo{media}: {text}"


def _user_message(body: dict[str, Any]) -> tuple[str, int]:
    """The last user message's text and its number of images (data URLs only)."""
    users = [m for m in body.get("messages", ()) if isinstance(m, dict) and m.get("role") == "user"]
    if not users:
        raise ValueError("no user message")
    content = users[-1].get("content")
    if isinstance(content, str):
        return content, 0
    if not isinstance(content, list):
        raise ValueError("message content must be a string or a list of parts")
    texts, images = [], 0
    for part in content:
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text":
            texts.append(str(part.get("text", "")))
        elif kind == "image_url":
            url = str((part.get("image_url") or {}).get("url", ""))
            head, _, data = url.partition(",")
            if not head.startswith("data:image/") or not head.endswith(";base64"):
                raise ValueError("image_url must be a base64 data URL")
            base64.b64decode(data, validate=True)
            images += 1
        else:
            raise ValueError(f"unknown content part type {kind!r}")
    return "\n".join(texts), images


class _App:
    """The server's state: one event loop, so plain counters are safe."""

    def __init__(self, latency_s: float, max_concurrency: int, api_key: str | None) -> None:
        self.latency_s = latency_s
        self.gate = asyncio.Semaphore(max_concurrency)
        self.api_key = api_key
        self.reset()

    def reset(self) -> None:
        self.requests = 0
        self.in_flight = 0
        self.max_in_flight = 0
        self.first_at: float | None = None  # wall clock of the first request's arrival
        self.last_at: float | None = None  # and of the last answer's
        self.attempts: Counter[str] = Counter()

    async def chat(self, request: Any) -> Any:
        from aiohttp import web

        authorization = request.headers.get("Authorization")
        if self.api_key is not None and authorization != f"Bearer {self.api_key}":
            return _error(web, 401, "invalid api key", "invalid_request_error")
        try:
            body = await request.json()
            text, images = _user_message(body)
        except (ValueError, json.JSONDecodeError) as exc:
            return _error(web, 400, f"bad request: {exc}", "invalid_request_error")
        self.requests += 1
        self.first_at = self.first_at or time.time()
        self.attempts[text] += 1
        attempt = self.attempts[text]
        extra_s = 0.0
        for kind, times, retry_after in _MARKER.findall(text):
            if kind == "slow":
                extra_s += float(times or 0)
                continue
            if kind == "400":
                return _error(web, 400, "this prompt is refused", "invalid_request_error")
            if times != "*" and attempt > int(times or 1):
                continue
            if kind == "drop":
                request.transport.close()  # no status line at all: the client sees a reset
                return web.Response(status=500)
            headers = {"Retry-After": retry_after or "0"} if kind == "429" else {}
            return _error(web, int(kind), f"injected {kind}", "server_error", headers)
        async with self.gate:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            try:
                await asyncio.sleep(self.latency_s + extra_s)
            finally:
                self.in_flight -= 1
        self.last_at = time.time()
        answer = reply_text(text, images)
        max_tokens = body.get("max_tokens") or body.get("max_completion_tokens")
        finish = "stop"
        if isinstance(max_tokens, int) and len(answer.encode()) > max_tokens:
            answer, finish = answer.encode()[:max_tokens].decode(errors="ignore"), "length"
        prompt_tokens = len(text.encode()) + images
        model = body.get("model", "echo")
        return web.json_response(_completion(self.requests, model, answer, finish, prompt_tokens))

    async def stats(self, request: Any) -> Any:
        from aiohttp import web

        if request.method == "POST":
            self.reset()
        return web.json_response(
            {
                "requests": self.requests,
                "in_flight": self.in_flight,
                "max_in_flight": self.max_in_flight,
                "first_at": self.first_at,
                "last_at": self.last_at,
                "prompts": dict(self.attempts),
            }
        )


def _error(web: Any, status: int, message: str, kind: str, headers: Any = None) -> Any:
    body = {"error": {"message": message, "type": kind, "code": status}}
    return web.json_response(body, status=status, headers=headers)


def serve(
    host: str, port: int, latency_s: float, max_concurrency: int, api_key: str | None
) -> None:
    """Serve in the foreground; prints ``listening on http://HOST:PORT`` once bound."""
    from aiohttp import web

    async def run() -> None:
        app_state = _App(latency_s, max_concurrency, api_key)
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/chat/completions", app_state.chat)
        app.router.add_route("*", "/stats", app_state.stats)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, host, port, backlog=1024)
        await site.start()
        bound = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        print(f"listening on http://{host}:{bound}", flush=True)
        await asyncio.Event().wait()

    asyncio.run(run())


class ChatServer:
    """:func:`serve` in its own process on a free loopback port (a context manager).

    Args:
        latency_s: Seconds each answered request takes (inside the concurrency gate).
        max_concurrency: Requests served at once; more wait their turn.
        api_key: If given, requests must carry ``Authorization: Bearer <api_key>``.
    """

    def __init__(
        self, *, latency_s: float = 0.0, max_concurrency: int = 64, api_key: str | None = None
    ) -> None:
        self.latency_s = latency_s
        self.max_concurrency = max_concurrency
        self.api_key = api_key
        self.process: subprocess.Popen[str] | None = None
        self.url = ""

    @property
    def base_url(self) -> str:
        """The OpenAI-style base URL (``http://127.0.0.1:PORT/v1``)."""
        return f"{self.url}/v1"

    def start(self) -> ChatServer:
        """Start the process and wait until it listens (10 s at most)."""
        command = [
            sys.executable,
            "-m",
            "lineage_data.connectors.testing.chat_server",
            "--port",
            "0",
        ]
        command += ["--latency-s", str(self.latency_s)]
        command += ["--max-concurrency", str(self.max_concurrency)]
        if self.api_key is not None:
            command += ["--api-key", self.api_key]
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
        assert self.process.stdout is not None
        line = self.process.stdout.readline()  # the server prints once bound, or exits
        if not line.startswith("listening on "):
            self.stop()
            raise RuntimeError(f"the chat server did not start: {line!r}")
        self.url = line.split()[-1]
        return self

    def stop(self) -> None:
        """Kill the process (the server does no work worth a graceful stop)."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)

    def stats(self, reset: bool = False) -> dict[str, Any]:
        """The server's counters (``reset=True`` zeroes them after reading)."""
        request = urllib.request.Request(f"{self.url}/stats", method="POST" if reset else "GET")
        with urllib.request.urlopen(request, timeout=10) as response:
            data: dict[str, Any] = json.load(response)
        return data

    def __enter__(self) -> ChatServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _completion(number: int, model: str, answer: str, finish: str, prompt_tokens: int) -> dict:
    """The body of a chat completion answering with ``answer`` (tokens counted as UTF-8 bytes)."""
    return {
        "id": f"chatcmpl-{number}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": answer},
                "finish_reason": finish,
            }
        ],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": len(answer.encode()),
            "total_tokens": prompt_tokens + len(answer.encode()),
        },
    }


def main(argv: list[str] | None = None) -> None:
    """``python -m lineage_data.connectors.testing.chat_server``: serve in the foreground."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--latency-s", type=float, default=0.0)
    parser.add_argument("--max-concurrency", type=int, default=64)
    parser.add_argument("--api-key", default=None)
    args = parser.parse_args(argv)
    with contextlib.suppress(KeyboardInterrupt):
        serve(args.host, args.port, args.latency_s, args.max_concurrency, args.api_key)


if __name__ == "__main__":
    main()
