"""Content fingerprints of models, for cache keys."""

from __future__ import annotations

import hashlib
from pathlib import Path

from mosaic_core.modeling.modeldir import MODEL_CARD, TB_DIR


def model_fingerprint(resolved: str, revision: str = "main") -> str:
    """Digest of a local model directory's files (names, sizes, first and last MiB of each),
    or ``hub-id@revision`` for a hub model (pin a commit as revision for exact caching). The
    model card is left out: evaluation rewrites it with the scores, and that must not make the
    next step's cache miss; so are the training's TensorBoard files (``tb/``), which name the
    host and the time."""
    path = Path(resolved)
    if not path.is_dir():
        return f"{resolved}@{revision}"
    h = hashlib.sha256()
    for f in sorted(p for p in path.rglob("*") if p.is_file() and p.relative_to(path) != Path(MODEL_CARD)
                    and p.relative_to(path).parts[0] != TB_DIR):
        size = f.stat().st_size
        h.update(f"{f.relative_to(path)}:{size}\n".encode())
        with open(f, "rb") as fh:
            h.update(fh.read(1 << 20))
            if size > 2 << 20:
                fh.seek(-(1 << 20), 2)
                h.update(fh.read())
    return h.hexdigest()[:16]
