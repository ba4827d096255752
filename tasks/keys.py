"""Cache keys of the tasks whose inputs are many parts (checksums, fingerprints, configs)."""

from __future__ import annotations

import hashlib


def cache_key(prefix: str, *parts: str) -> str:
    """``prefix-<24 hex>``: a digest of ``parts`` in order."""
    return f"{prefix}-" + hashlib.sha256("|".join(parts).encode()).hexdigest()[:24]
