"""Format adapters built on lineage_data: S3, PDF, video, vLLM, shards; installed as ``lineage_data.connectors``.

This folder is the package ``lineage_data.connectors`` (``lineage_data/connectors`` links here, and the
wheel installs it there): PyPI has an unrelated ``connectors`` package, so it is never imported by that
name. Its ``testing`` subpackage (test corpora, a local S3 server, a chat server) is in the checkout
only, for the tests, the benches and the demo.
"""

if __name__ == "connectors":
    raise ImportError("this package is lineage_data.connectors: import it by that name")
