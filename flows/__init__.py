"""Prefect flows: composition of tasks only (the ``mosaic`` command line is the ``cli`` package).

Importing the package (the CLI, ``mosaic serve`` and a worker's flow entrypoints all do) routes
the method's own log records — counts, kept fractions, skipped rows, training losses — to the
Prefect UI and the console at Prefect's logging level (INFO unless ``PREFECT_LOGGING_LEVEL``
says otherwise). Prefect only attaches its handlers to the extra loggers; their level would
otherwise be the root logger's WARNING, which hid every INFO record.

Without a terminal (a log file, a CI log, a served or a worker's run) the libraries' progress
bars are off — transformers' "Loading weights", datasets' maps, any other tqdm bar left at its
default — since each redraw would be a line of ``\r`` fragments there; the run's own progress
is in its log records. Set before those libraries are imported, which read it once.
"""

import logging
import os
import sys

PACKAGE_LOGGERS = ("mosaic_core", "storage", "tasks", "flows")

# Read by Prefect when it configures logging, so set before Prefect is imported.
os.environ.setdefault("PREFECT_LOGGING_EXTRA_LOGGERS", ",".join(PACKAGE_LOGGERS))
# Records outside a flow run (the CLI taking a data root's lock) go to the console only, silently.
os.environ.setdefault("PREFECT_LOGGING_TO_API_WHEN_MISSING_FLOW", "ignore")
for _name in PACKAGE_LOGGERS:
    if logging.getLogger(_name).level == logging.NOTSET:
        logging.getLogger(_name).setLevel(os.environ.get("PREFECT_LOGGING_LEVEL", "INFO").upper())

if not sys.stderr.isatty():
    for _switch in ("HF_HUB_DISABLE_PROGRESS_BARS", "HF_DATASETS_DISABLE_PROGRESS_BARS", "TQDM_DISABLE"):
        os.environ.setdefault(_switch, "1")
