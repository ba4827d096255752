"""The house keeps its shape: no import cycle among the project's modules, and no import that
runs up the layers (docs/architecture.md) — imports inside functions included, since they
are where a cycle hides."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("mosaic_core", "storage", "tasks", "flows", "deployments", "cli")
LAYER = {"mosaic_core": 0, "storage": 0, "tasks": 1, "flows": 2, "deployments": 3, "cli": 4}
"""An import may only go to a lower layer or its own; core and storage never import each other."""
CORE = {"config": 0, "versioning": 0, "data": 1, "modeling": 1, "vocab": 2, "export": 2, "trainer": 3, "evaluate": 4}
"""Within mosaic_core, the pipeline from the bottom: data and modeling are side by side (neither
imports the other), stage 1 and the exports build on modeling, the trainer on both, evaluation on
everything."""


def modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The project modules ``name`` imports anywhere in its code (the longest known prefix)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        targets = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            targets = [f"{node.module}.{a.name}" for a in node.names] + [node.module]
        for target in targets:
            parts = target.split(".")
            for i in range(len(parts), 0, -1):
                if ".".join(parts[:i]) in known:
                    out.add(".".join(parts[:i]))
                    break
    return out - {name}


def graph() -> dict[str, set[str]]:
    known = modules()
    return {name: imports(name, path, known) for name, path in known.items()}


def core_rank(module: str) -> tuple[int, str]:
    """(rank, subpackage) of a mosaic_core module; its top-level modules (config) rank lowest."""
    parts = module.split(".")
    sub = parts[1] if len(parts) > 2 or (len(parts) == 2 and parts[1] in CORE) else ""
    return CORE.get(sub, 0), sub


def test_no_import_cycle():
    edges, seen, cycles = graph(), {}, []

    def visit(node: str, stack: list[str]) -> None:
        seen[node] = "open"
        for nxt in sorted(edges[node]):
            # a package's __init__ re-exporting its own modules is not a cycle through them
            if nxt.startswith(node + ".") or node.startswith(nxt + "."):
                continue
            if seen.get(nxt) == "open":
                cycles.append(stack[stack.index(nxt):] + [nxt])
            elif nxt not in seen:
                visit(nxt, [*stack, nxt])
        seen[node] = "done"

    for node in sorted(edges):
        if node not in seen:
            visit(node, [node])
    assert cycles == [], "\n".join(" -> ".join(c) for c in cycles)


def test_no_import_runs_up_the_layers():
    upward = []
    for source, targets in graph().items():
        for target in targets:
            s_top, t_top = source.split(".")[0], target.split(".")[0]
            if s_top != t_top:
                if LAYER[t_top] >= LAYER[s_top]:
                    upward.append(f"{source} -> {target}")
            elif s_top == "mosaic_core":
                (s_rank, s_sub), (t_rank, t_sub) = core_rank(source), core_rank(target)
                if s_sub != t_sub and t_rank > 0 and t_rank >= s_rank:
                    upward.append(f"{source} -> {target}")
    assert upward == [], "\n".join(sorted(upward))


def test_the_layers_are_read_from_real_imports():
    # guards the two tests above against reading nothing
    edges = graph()
    assert "mosaic_core.modeling.heads" in edges["mosaic_core.modeling.sparse"]
    assert "mosaic_core.vocab.build" in edges["tasks.vocab"]
    assert len(edges) > 80
