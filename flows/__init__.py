"""Prefect flows: composition of tasks only, plus the ``mosaic`` command line."""
