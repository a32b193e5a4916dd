"""OpenAIChatStage in lineage pipelines on local Ray, against the loopback chat server process.

Documents -> pages -> one chat request per page (an actor pool, several requests in flight per
actor) -> document: replies come back to their own document in page order; a fault the server
injects on one page fails that page only (its document SUPPRESSED, every other PRESENT); a
GroupFailure upstream means no request is ever sent for that document's pages; a server killed
mid-run stops the run with a typed error naming the stage and the endpoint within seconds.
"""

import threading
import time

import pytest
from reference import by_root

import lineage_data as ld
from lineage_data.connectors.openai import OpenAIChatStage
from lineage_data.connectors.testing.chat_server import ChatServer, reply_text

KEY = "sk-integration-5e1d"


@pytest.fixture
def server():
    with ChatServer(latency_s=0.02, max_concurrency=32, api_key=KEY) as running:
        yield running


def pages(doc):
    for page in range(doc["n"]):
        marker = doc["markers"][page]
        yield {"page": page, "text": f"{doc['doc']} page {page}{marker}"}


def marks(n, markers):
    """The fault marker of each of ``n`` pages ("" for none) from ``{page: marker}``."""
    return [markers.get(page, "") for page in range(n)]


def gate(batch):
    """Fails the first page of a document whose name ends in 'g' with a GroupFailure."""
    return {
        "text": [
            ld.GroupFailure("refused upstream") if d.endswith("g") and p == 0 else t
            for d, p, t in zip(batch["doc"], batch["page"], batch["text"], strict=True)
        ]
    }


def pipeline(server, docs, *, gated=False, **stage_kwargs):
    items = [{"doc": d, "n": n, "markers": marks(n, m)} for d, n, m in docs]
    ds = ld.from_items(items, id_column="doc").expand_lineage(pages, carry=["doc"], name="pages")
    if gated:
        ds = ds.map_batches(gate, name="gate", batch_size=1)
    options = {"api_key": KEY, "max_concurrency": 4, "backoff_s": 0.01, **stage_kwargs}
    return ds.map_batches(
        OpenAIChatStage,
        name="chat",
        batch_size=8,
        concurrency=2,
        num_cpus=0.25,
        fn_constructor_kwargs={"base_url": server.base_url, "model": "echo", **options},
    ).reduce_lineage(
        lambda parent, kids: {"doc": parent["doc"], "replies": [k["generation"] for k in kids]},
        name="assemble",
    )


def test_replies_return_to_their_document_in_page_order_and_a_failing_page_fails_its_doc(server):
    docs = [(f"d{i:02d}", n, {}) for i, n in enumerate([1, 7, 3, 12, 2, 5])]
    docs.append(("bad", 4, {2: " [[500:*]]"}))
    docs.append(("flaky", 3, {1: " [[429:2]]", 2: " [[drop:1]]"}))
    ds = pipeline(server, docs, max_retries=2)
    rows = by_root(ds.take_all(), ds.report())
    for doc, n, markers in docs:
        row = rows[doc]
        if doc == "bad":
            assert row["_lineage_outcome"] == "SUPPRESSED"
            assert (
                "HTTP 500 from the server: injected 500 after 3 attempts" in row["_lineage_cause"]
            )
            assert row["_lineage_stage"] == "chat"
            continue
        assert row["_lineage_outcome"] == "PRESENT", row
        texts = [f"{doc} page {p}{m}" for p, m in enumerate(marks(n, markers))]
        assert row["replies"] == [reply_text(t) for t in texts]
    seen = server.stats()["prompts"]
    assert seen["bad page 2 [[500:*]]"] == 3  # bounded: the first attempt and two retries
    assert seen["flaky page 1 [[429:2]]"] == 3 and seen["flaky page 2 [[drop:1]]"] == 2
    assert all(KEY not in (row["_lineage_cause"] or "") for row in rows.values())


def test_no_request_is_sent_for_the_pages_of_a_document_failed_upstream(server):
    docs = [("a", 3, {}), ("large", 6, {}), ("gated-g", 6, {}), ("z", 2, {})]
    ds = pipeline(server, docs, gated=True)
    rows = by_root(ds.take_all(), ds.report())
    assert rows["gated-g"]["_lineage_outcome"] == "SUPPRESSED"
    assert rows["gated-g"]["_lineage_cause"].endswith("refused upstream")
    assert {d: rows[d]["_lineage_outcome"] for d in ("a", "large", "z")} == dict.fromkeys(
        ["a", "large", "z"], "PRESENT"
    ), rows
    seen = server.stats()["prompts"]
    assert not [p for p in seen if p.startswith("gated-g")]
    assert len(seen) == 3 + 6 + 2 and set(seen.values()) == {1}


def test_a_server_killed_mid_run_stops_the_run_with_a_typed_error_naming_stage_and_endpoint():
    slow = ChatServer(latency_s=0.3, max_concurrency=8, api_key=KEY).start()
    docs = [(f"d{i:02d}", 20, {}) for i in range(10)]
    ds = pipeline(slow, docs)
    killed_at: list[float] = []

    def kill_when_answering() -> None:
        while slow.stats()["requests"] < 8:
            time.sleep(0.05)
        slow.stop()
        killed_at.append(time.monotonic())

    killer = threading.Thread(target=kill_when_answering, daemon=True)
    killer.start()
    with pytest.raises(ld.StageFailedError) as caught:
        ds.take_all()
    ended = time.monotonic()
    killer.join(5)
    message = str(caught.value)
    assert message.startswith("stage 'chat': cannot reach the model server at " + slow.base_url)
    assert KEY not in message
    assert killed_at and ended - killed_at[0] < 30  # default backoff: 0.5 + 1 + 2 + 4 s at most
