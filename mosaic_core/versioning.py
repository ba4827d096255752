"""Code versions for cache keys: a digest of the code that produced an output.

:func:`code_version` follows the given modules' imports inside their package (``mosaic_core``),
at any depth, so a cache key covers every function the output really depends on without a
hand-written list to fall out of date. It hashes what the code means, not its text: each
module's syntax tree without docstrings (comments are not in it), and its imports of the
package by the names they bring in, not the module paths they come from. Moving a module or
editing a comment keeps every cache valid (no re-ingest of a snapshot for a tidy-up); any change
of behaviour in any module reached invalidates the outputs made with it.

``mosaic_core.config`` and this module are not followed: configurations enter every cache key
through their own hashes (``config_hash``), so a new field in one stage's config does not
invalidate the outputs of the others.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.util
from functools import cache
from types import ModuleType

NOT_FOLLOWED = frozenset({"mosaic_core.config", "mosaic_core.versioning"})


def code_version(*modules: ModuleType) -> str:
    """12-hex digest of ``modules`` and every module of their package they import, directly or
    not: editing the behaviour of any of them invalidates cached outputs; moving one does not."""
    names = dependencies(*(m.__name__ for m in modules))
    digests = sorted(d for d in map(_digest, names) if d)  # "": a module with no code (a bare package)
    return hashlib.sha256("\n".join(digests).encode()).hexdigest()[:12]


def dependencies(*names: str) -> set[str]:
    """``names`` and the modules of their top-level package they import, transitively."""
    seen: set[str] = set()
    todo = list(names)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        todo.extend(_imports(name) - seen)
    return seen


def _source(name: str) -> str:
    spec = importlib.util.find_spec(name)
    if spec is None or spec.origin is None or not spec.origin.endswith(".py"):
        raise ModuleNotFoundError(f"no Python source for module {name}")
    with open(spec.origin, encoding="utf-8") as fh:
        return fh.read()


def _is_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):  # an attribute of a module, not a module
        return False


@cache
def _imports(name: str) -> frozenset[str]:
    """The modules of ``name``'s top-level package that ``name`` imports (anywhere in its code)."""
    package = name.split(".")[0]
    is_package = importlib.util.find_spec(name).submodule_search_locations is not None
    found: set[str] = set()
    for node in ast.walk(ast.parse(_source(name))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.split(".")[0] == package)
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(node, name, is_package)
            if base.split(".")[0] != package:
                continue
            found.add(base)
            found.update(f"{base}.{a.name}" for a in node.names if _is_module(f"{base}.{a.name}"))
    # a package's __init__ runs before any of its modules: importing a.b.c imports a.b
    for module in list(found):
        parts = module.split(".")
        found.update(".".join(parts[:i]) for i in range(2, len(parts)))
    return frozenset(found - NOT_FOLLOWED - {package, name})


def _absolute(node: ast.ImportFrom, name: str, is_package: bool) -> str:
    if not node.level:
        return node.module or ""
    parts = name.split(".") if is_package else name.split(".")[:-1]
    base = parts[: len(parts) - node.level + 1]
    return ".".join(base + ([node.module] if node.module else []))


class _Meaning(ast.NodeTransformer):
    """Drops docstrings; writes an import of the package as the names it binds."""

    def __init__(self, package: str) -> None:
        self.package = package

    def _strip_docstring(self, node: ast.AST) -> ast.AST:
        body = getattr(node, "body", None)
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                and isinstance(body[0].value.value, str):
            node.body = body[1:]
        return self.generic_visit(node)

    visit_Module = visit_ClassDef = visit_FunctionDef = visit_AsyncFunctionDef = _strip_docstring

    def visit_ImportFrom(self, node: ast.ImportFrom) -> ast.AST:
        if node.level or (node.module or "").split(".")[0] == self.package:
            return ast.ImportFrom(module=None, names=node.names, level=0)
        return node

    def visit_Import(self, node: ast.Import) -> ast.AST:
        names = [ast.alias(a.name.split(".")[-1], a.asname) if a.name.split(".")[0] == self.package else a
                 for a in node.names]
        return ast.Import(names=names)


@cache
def _digest(name: str) -> str:
    tree = _Meaning(name.split(".")[0]).visit(ast.parse(_source(name)))
    if not tree.body:
        return ""
    return hashlib.sha256(ast.dump(tree, annotate_fields=False, include_attributes=False).encode()).hexdigest()


LIBRARIES = ("torch", "transformers", "tokenizers", "sentence-transformers")
"""The libraries whose versions a model's bytes depend on, recorded with every stage."""


def runtime() -> dict:
    """What a run's bytes depend on besides its inputs, config and seed: the Python, MOSAIC and
    :data:`LIBRARIES` versions and the CPU threads PyTorch computes with (a sum split over another
    number of threads rounds differently). The same inputs, config, seed and runtime on the same
    machine give byte-identical weights."""
    import platform
    from importlib.metadata import version

    import torch

    import mosaic_core

    return {"python": platform.python_version(), "mosaic": mosaic_core.__version__,
            **{name: version(name) for name in LIBRARIES}, "torch_threads": torch.get_num_threads()}
