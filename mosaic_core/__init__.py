"""The MOSAIC method as plain Python (no Prefect, no storage): parsing, filters, models, losses."""

__version__ = "0.1.0"
