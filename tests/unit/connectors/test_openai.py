"""OpenAIChatStage against the loopback chat server in its own process: no Ray, no model."""

from __future__ import annotations

import io
import time

import pyarrow as pa
import pytest
from PIL import Image

from lineage_data import StageFailedError
from lineage_data._core.failures import RecordFailure
from lineage_data.connectors.openai import NUM_GENERATED_TOKENS, NUM_PROMPT_TOKENS, OpenAIChatStage
from lineage_data.connectors.testing.chat_server import ChatServer, reply_text

KEY = "sk-test-7f3a9c"


@pytest.fixture
def server():
    with ChatServer(latency_s=0.02, max_concurrency=64, api_key=KEY) as running:
        yield running


def stage(server: ChatServer, **kwargs) -> OpenAIChatStage:
    options = {"api_key": KEY, "backoff_s": 0.01, "max_backoff_s": 0.2, **kwargs}
    return OpenAIChatStage(server.base_url, "echo", **options)


def png() -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (8, 6), "white").save(buffer, format="PNG")
    return buffer.getvalue()


def test_replies_come_back_in_row_order_with_token_counts(server):
    texts = [f"row {i}" for i in range(40)]
    out = stage(server, max_concurrency=8).run(pa.table({"text": texts}))
    assert out["generation"] == [reply_text(t) for t in texts]
    assert out[NUM_PROMPT_TOKENS] == [len(t) for t in texts]
    assert out[NUM_GENERATED_TOKENS] == [len(reply_text(t)) for t in texts]
    assert server.stats()["requests"] == 40


def test_at_most_max_concurrency_requests_are_in_flight_and_that_many_are_reached(server):
    slow = ChatServer(latency_s=0.2, max_concurrency=64).start()
    try:
        OpenAIChatStage(slow.base_url, "echo", max_concurrency=5).run(
            pa.table({"text": [str(i) for i in range(20)]})
        )
        assert slow.stats()["max_in_flight"] == 5
    finally:
        slow.stop()


def test_template_system_prompt_and_images_reach_the_server(server):
    batch = pa.table({"name": ["a", "b"], "image": [png(), None], "frames": [[], [png(), png()]]})
    out = stage(
        server,
        prompt_template="Describe {name}.",
        system_prompt="You are terse.",
        image_column="image",
        frames_column="frames",
    ).run(batch)
    assert out["generation"] == [reply_text("Describe a.", 1), reply_text("Describe b.", 2)]


def test_keep_columns_pass_through_and_may_not_clash(server):
    out = stage(server, keep_columns=["doc"]).run(pa.table({"doc": ["a", "b"], "text": ["x", "y"]}))
    assert out["doc"] == ["a", "b"] and out["generation"] == [reply_text("x"), reply_text("y")]
    with pytest.raises(ValueError, match="clash"):
        stage(server, keep_columns=["generation"])


def test_a_row_whose_media_is_not_an_image_fails_alone_and_sends_nothing(server):
    batch = pa.table({"text": ["ok", "bad", "none"], "image": [png(), b"not an image", None]})
    out = stage(server, image_column="image").run(batch)
    assert out["generation"][0] == reply_text("ok", 1)
    assert out["generation"][1] == RecordFailure(
        "OpenAIChatStage: media item 0 is not a known image"
    )
    assert out["generation"][2] == RecordFailure("OpenAIChatStage: the row has no image")
    assert set(server.stats()["prompts"]) == {"ok"}


@pytest.mark.parametrize(
    ("marker", "attempts"),
    [("[[429:2]]", 3), ("[[500:1]]", 2), ("[[503:3]]", 4), ("[[drop:2]]", 3)],
)
def test_transient_faults_are_retried_until_the_request_succeeds(server, marker, attempts):
    text = f"row {marker}"
    out = stage(server).run(pa.table({"text": [text, "plain"]}))
    assert out["generation"] == [reply_text(text), reply_text("plain")]
    assert server.stats()["prompts"][text] == attempts


@pytest.mark.parametrize(
    ("marker", "cause"),
    [
        ("[[429:*]]", "HTTP 429 from the server: injected 429 after 3 attempts"),
        ("[[500:*]]", "HTTP 500 from the server: injected 500 after 3 attempts"),
        ("[[drop:*]]", "the connection failed: ServerDisconnectedError"),
        ("[[slow:5]]", "no answer in 0.5 s after 3 attempts"),
    ],
)
def test_a_fault_that_persists_fails_that_row_only_after_bounded_retries(server, marker, cause):
    text = f"row {marker}"
    out = stage(server, max_retries=2, request_timeout_s=0.5).run(
        pa.table({"text": ["a", text, "b"]})
    )
    assert out["generation"][0] == reply_text("a") and out["generation"][2] == reply_text("b")
    failure = out["generation"][1]
    assert isinstance(failure, RecordFailure) and cause in failure.cause, failure
    assert out[NUM_PROMPT_TOKENS][1] is None
    assert server.stats()["prompts"][text] == 3


def test_a_request_refused_as_its_own_fault_fails_at_once(server):
    out = stage(server).run(pa.table({"text": ["bad [[400]]"]}))
    assert out["generation"] == [
        RecordFailure("OpenAIChatStage: HTTP 400 from the server: this prompt is refused")
    ]
    assert server.stats()["prompts"]["bad [[400]]"] == 1


def test_retry_after_is_honoured(server):
    start = time.monotonic()
    stage(server, backoff_s=0.0, max_backoff_s=5).run(pa.table({"text": ["x [[429:1:ra=0.6]]"]}))
    assert time.monotonic() - start >= 0.6


def test_a_wrong_key_stops_the_stage_without_showing_the_key(server):
    wrong = "sk-wrong-1234"
    with pytest.raises(StageFailedError, match="HTTP 401") as caught:
        stage(server, api_key=wrong).run(pa.table({"text": ["x"]}))
    assert wrong not in str(caught.value) and KEY not in str(caught.value)


def test_an_unreachable_server_stops_the_stage_within_seconds(server):
    base_url = server.base_url
    server.stop()
    unreachable = OpenAIChatStage(base_url, "echo", api_key=KEY, backoff_s=0.1)
    start = time.monotonic()
    with pytest.raises(StageFailedError, match="cannot reach the model server") as caught:
        unreachable.run(pa.table({"text": [str(i) for i in range(50)]}))
    assert time.monotonic() - start < 30
    assert KEY not in str(caught.value) and KEY not in repr(unreachable)
    assert base_url.split("//")[1] in str(caught.value)


def test_the_key_is_read_from_the_environment(server, monkeypatch):
    monkeypatch.setenv("MY_KEY", KEY)
    out = OpenAIChatStage(server.base_url, "echo", api_key_env="MY_KEY").run(
        pa.table({"text": ["x"]})
    )
    assert out["generation"] == [reply_text("x")]


def test_a_key_in_the_url_is_refused_without_showing_it():
    with pytest.raises(ValueError, match="api_key") as caught:
        OpenAIChatStage(f"http://user:{KEY}@127.0.0.1:1/v1", "echo")
    assert KEY not in str(caught.value)


def test_batches_awaited_together_share_the_actor_s_max_concurrency():
    import asyncio

    slow = ChatServer(latency_s=0.2, max_concurrency=64).start()
    try:
        shared = OpenAIChatStage(slow.base_url, "echo", max_concurrency=6)

        async def two_batches():
            first = pa.table({"text": [f"a{i}" for i in range(4)]})
            second = pa.table({"text": [f"b{i}" for i in range(4)]})
            return await asyncio.gather(shared(first), shared(second))

        first, second = asyncio.run(two_batches())
        assert first["generation"] == [reply_text(f"a{i}") for i in range(4)]
        assert second["generation"] == [reply_text(f"b{i}") for i in range(4)]
        assert slow.stats()["max_in_flight"] == 6  # both batches at once, within the actor's cap
    finally:
        slow.stop()


def test_options_that_contradict_each_other_are_refused():
    with pytest.raises(ValueError, match="media column"):
        OpenAIChatStage("http://x/v1", "m", prompt_template="{image}", image_column="image")
    with pytest.raises(ValueError, match="clashes"):
        OpenAIChatStage("http://x/v1", "m", output_column=NUM_PROMPT_TOKENS)
    with pytest.raises(ValueError, match="max_concurrency"):
        OpenAIChatStage("http://x/v1", "m", max_concurrency=0)
