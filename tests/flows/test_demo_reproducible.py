"""Reproducible runs (issue 42): the built-in demo run twice, into two data roots, with one seed
publishes byte-identical weights."""

import hashlib
from pathlib import Path

import pytest

from flows.demo import demo_config
from flows.pipeline import mosaic_pipeline

pytestmark = pytest.mark.usefixtures("prefect_harness")


def published(root: Path) -> dict[str, str]:
    model = (root / "models" / "current").resolve()
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(model.iterdir()) if p.suffix in (".safetensors",) or p.name == "tokenizer.json"}


@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_the_demo_twice_publishes_byte_identical_weights(tmp_path):
    runs = []
    for name in ("a", "b"):
        root = tmp_path / name
        result = mosaic_pipeline(demo_config(str(root), seed=0), str(root))
        assert result["decision"]["published"]
        runs.append(published(root))
    assert "model.safetensors" in runs[0]
    assert runs[0] == runs[1]
