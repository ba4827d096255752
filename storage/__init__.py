"""Every byte on disk: layout, schemas, atomic Parquet writes, manifests, the DuckDB catalog."""
