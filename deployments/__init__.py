"""Prefect deployments (schedules, work pools, parameters): declarations only."""

DEFAULT_CRON = "0 3 * * *"
"""Daily at 03:00 UTC: NCBI publishes PubMed update files once a day. ``mosaic serve`` and
:func:`deployments.rebuild.rebuild_deployment` default to it; ``prefect.yaml`` (static YAML)
repeats it, and a test keeps the two equal."""
