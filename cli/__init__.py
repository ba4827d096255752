"""The ``mosaic`` command line: each subcommand loads its config once and runs a flow.

One module per command group registers its commands on the shared ``app`` of
:mod:`cli.common`; importing this package registers them all.
"""

import os

# Before Prefect is imported: no telemetry from an offline machine.
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
# The temporary local API server needs more than Prefect's default 20 s on a 2-core machine.
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")

# Also before Prefect is imported: ``flows`` routes the method's log records to Prefect's handlers.
import flows  # noqa: E402, F401
from cli.common import app, main  # noqa: E402

# The command groups, in the order ``mosaic --help`` lists them; each registers on ``app``.
from cli import data, vocab, train, evaluate, publish, export, pipeline, rebuild  # noqa: E402, F401

__all__ = ["app", "main"]
