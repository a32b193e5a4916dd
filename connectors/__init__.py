"""Format adapters built on lineage_data: S3, PDF, video, vLLM, Parquet shards, test corpora."""
