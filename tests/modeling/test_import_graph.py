"""The torch reference model's modules import each other without a cycle (issue 22 item 7): the base modules
(attention.py, ssm.py) import none of the kinds built on them; the factories that pick a kind live in layers.py."""

from __future__ import annotations

import ast

from paths import ROOT


def _graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for path in (ROOT / "embedcalc" / "modeling").glob("*.py"):
        deps: set[str] = set()
        # lazy imports inside functions too
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.ImportFrom)
                and node.module
                and node.module.startswith("embedcalc.modeling.")
            ):
                deps.add(node.module.rsplit(".", 1)[-1])
        graph[path.stem] = deps
    return graph


def test_modeling_has_no_import_cycle() -> None:
    graph = _graph()
    assert {"attention", "latent_attention", "sparse_attention", "ssm", "deltanet", "layers"} <= set(graph)
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(module: str, path: list[str]) -> None:
        state[module] = 1
        for dep in sorted(graph.get(module, ())):
            assert state.get(dep) != 1, "import cycle: " + " -> ".join([*path, dep])
            if dep not in state:
                visit(dep, [*path, dep])
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
