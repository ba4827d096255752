"""Prefect deployments (schedules, work pools, parameters): declarations only."""
