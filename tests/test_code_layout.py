"""The product's shape, held as tests: modules and classes stay small enough to explain, and the packages depend
one way (``dedupectl/cli`` on top, then the worker and jobs, then ``reconcile/`` and ``snapshots/``, then
``store/``), without a circle. ruff's own class-size rules are preview-only (``PLR0904``) or missing
(``PLR0902``); these limits are the project's."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("dedupectl", "store", "reconcile", "snapshots")
LAYER = {"store": 0, "reconcile": 1, "snapshots": 1, "dedupectl": 2}

MAX_MODULE_LINES = 600
# a class is read whole: about a few screens of code, a screen of method names, and what it holds at a glance
MAX_CLASS_LINES = 400
MAX_PUBLIC_METHODS = 20
MAX_ATTRIBUTES = 15
# held at their size, with why: each may shrink, none may grow
EXCEPTIONS = {
    # the store's one entry for its callers: a facade over its owners (docs/store.md), every method a hand-off
    "store/dedup_store.py:DedupStore": {"lines": 480, "public": 48, "attributes": 19},
    # one comparison's counters and samples, each reported (reconcile.report)
    "reconcile/comparison.py:Comparison": {"attributes": 28},
    # one attribute per exported metric, and the heartbeat its health endpoints read
    "dedupectl/metrics.py:WorkerMetrics": {"attributes": 29},
}
# entry scripts run as __main__ (spark-submit's), where the CLI is what they start
UPWARD_ALLOWED = {("dedupectl.spark.submit", "dedupectl.cli.app")}


def _modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            found[name.removesuffix(".__init__")] = path
    return found


MODULES = _modules()


def _classes() -> list[tuple[str, ast.ClassDef]]:
    classes = []
    for path in MODULES.values():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                classes.append((f"{path.relative_to(ROOT)}:{node.name}", node))
    return classes


def _size(node: ast.ClassDef) -> dict[str, int]:
    public = [f for f in node.body if isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef) and f.name[0] != "_"]
    attributes = {
        sub.attr
        for sub in ast.walk(node)
        if isinstance(sub, ast.Attribute)
        and isinstance(sub.ctx, ast.Store)
        and isinstance(sub.value, ast.Name)
        and sub.value.id == "self"
    }
    return {"lines": node.end_lineno - node.lineno + 1, "public": len(public), "attributes": len(attributes)}


def _imports() -> dict[str, set[str]]:
    """Module -> the product modules it imports, wherever in it (an import inside a function is a dependency)."""

    def resolve(name: str) -> str | None:
        while name and name not in MODULES:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for module, path in MODULES.items():
        targets = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets |= {resolve(f"{node.module}.{alias.name}") for alias in node.names}
            elif isinstance(node, ast.Import):
                targets |= {resolve(alias.name) for alias in node.names}
        graph[module] = {target for target in targets if target and target != module}
    return graph


def test_no_product_module_is_over_600_lines():
    long = {name: n for name, path in MODULES.items() if (n := len(path.read_text().splitlines())) > MAX_MODULE_LINES}
    assert not long, f"split these modules by concern: {long}"


@pytest.mark.parametrize("limit", ["lines", "public", "attributes"])
def test_every_class_stays_within_its_size(limit):
    default = {"lines": MAX_CLASS_LINES, "public": MAX_PUBLIC_METHODS, "attributes": MAX_ATTRIBUTES}[limit]
    over = {}
    for name, node in _classes():
        allowed = EXCEPTIONS.get(name, {}).get(limit, default)
        if (measured := _size(node)[limit]) > allowed:
            over[name] = f"{measured} > {allowed}"
    assert not over, f"{limit}: give the new concern an owner of its own: {over}"


def test_packages_depend_one_way():
    upward = []
    for module, targets in _imports().items():
        for target in targets:
            low, high = module.split(".")[0], target.split(".")[0]
            into_cli = target.startswith("dedupectl.cli") and not module.startswith("dedupectl.cli")
            if (LAYER[high] > LAYER[low] or into_cli) and (module, target) not in UPWARD_ALLOWED:
                upward.append(f"{module} -> {target}")
    assert not upward, upward


def test_no_import_circle():
    graph, circles = _imports(), []
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []

    def visit(module: str) -> None:  # Tarjan's strongly connected components
        index[module] = low[module] = len(index)
        stack.append(module)
        for target in graph[module]:
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == module:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for module in graph:
        if module not in index:
            visit(module)
    assert not circles, circles
