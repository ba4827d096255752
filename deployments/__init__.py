"""Prefect deployments (schedules, work pools, parameters): declarations only."""

import hashlib
import re
from pathlib import Path

DEFAULT_CRON = "0 3 * * *"
"""Daily at 03:00 UTC: NCBI publishes PubMed update files once a day. ``mosaic serve``,
``mosaic deploy`` and :func:`deployments.rebuild.rebuild_deployment` default to it."""

FLOW_NAME = "rebuild"
"""The rebuild flow's name: a deployment is ``rebuild/NAME``."""


def deployment_name(data_root: str | Path) -> str:
    """The rebuild deployment's name for ``data_root``: its folder's name as a slug and 8 hex digits
    of its resolved path's SHA-256 (``mosaic-served-1a2b3c4d``). Each data root has its own
    deployment, so two serves never share one, and a restarted serve finds its own again."""
    path = Path(data_root).expanduser().resolve()
    slug = re.sub(r"[^a-z0-9]+", "-", path.name.lower()).strip("-")[:40] or "root"
    return f"{slug}-{hashlib.sha256(str(path).encode()).hexdigest()[:8]}"
