"""Code versions for cache keys: a digest of the source that produced an output."""

from __future__ import annotations

import hashlib
import inspect
from types import ModuleType


def code_version(*modules: ModuleType) -> str:
    """12-hex digest of the modules' source: editing any of them invalidates cached outputs."""
    h = hashlib.sha256()
    for module in modules:
        h.update(module.__name__.encode())
        h.update(inspect.getsource(module).encode())
    return h.hexdigest()[:12]
