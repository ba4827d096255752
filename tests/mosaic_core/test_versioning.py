"""Cache keys follow the code: every module a stage imports, by meaning, not by place or comment."""

import importlib
import sys
import textwrap

import pytest

from mosaic_core.versioning import code_version, dependencies

LIB = '''
"""{doc}"""

def pool(x):
    # {comment}
    return x * {factor}
'''


def package(tmp_path, name: str, lib_path: str, factor: int = 2, doc: str = "pooling", comment: str = "mean"):
    """A package ``name`` whose ``top`` module uses ``pool`` from the module at ``lib_path``."""
    root = tmp_path / name
    for folder in {root, (root / lib_path).parent}:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "__init__.py").write_text("")
    (root / lib_path).write_text(LIB.format(doc=doc, comment=comment, factor=factor))
    module = ".".join([name, *lib_path.removesuffix(".py").split("/")])
    (root / "top.py").write_text(textwrap.dedent(f'''
        from {module} import pool

        def embed(x):
            return pool(x) + 1
    '''))
    return module


@pytest.fixture
def importable(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    yield lambda name: importlib.import_module(f"{name}.top")
    for name in [m for m in sys.modules if m.startswith("vpkg")]:
        del sys.modules[name]


def test_moving_a_module_or_editing_a_comment_keeps_the_key_and_a_change_of_behaviour_does_not(tmp_path, importable):
    package(tmp_path, "vpkg_flat", "lib.py")
    package(tmp_path, "vpkg_moved", "modeling/encode.py", doc="pooling, documented anew", comment="another comment")
    package(tmp_path, "vpkg_changed", "lib.py", factor=3)
    flat, moved, changed = (code_version(importable(n)) for n in ("vpkg_flat", "vpkg_moved", "vpkg_changed"))
    assert "vpkg_moved.modeling.encode" in dependencies("vpkg_moved.top")  # followed through the import
    assert flat == moved
    assert flat != changed


def test_the_train_and_vocab_keys_cover_pooling_and_the_sparse_kind():
    # the hand-written lists these keys were made of missed encode (pooling) and sparse
    from mosaic_core.trainer import stage
    from mosaic_core.vocab import build
    from tasks import train, vocab

    assert (train.CODE_VERSION, vocab.CODE_VERSION) == (code_version(stage), code_version(build))
    for module in (stage, build):
        assert {"mosaic_core.modeling.encode", "mosaic_core.modeling.sparse"} <= dependencies(module.__name__)
    assert "mosaic_core.config" not in dependencies(build.__name__)  # configs enter keys through their hashes
