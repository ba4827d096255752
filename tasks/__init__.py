"""Thin Prefect tasks: one shard or stage each, with cache policy, retries and logging."""
