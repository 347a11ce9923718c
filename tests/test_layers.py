"""The import structure: no module imports itself back through others, and the low layers do not import the
high ones. Read from the source (every import statement, lazy ones inside functions included)."""

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "offbench"
MODULES = {
    ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts).removesuffix(".__init__"): path
    for path in PACKAGE.rglob("*.py")
}


def imports_of(module: str) -> set[str]:
    """offbench modules `module` imports (`from offbench.envs import darkroom` is offbench.envs.darkroom)."""
    found = set()
    for node in ast.walk(ast.parse(MODULES[module].read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            submodules = {f"{node.module}.{alias.name}" for alias in node.names} & set(MODULES)
            found |= submodules
            if len(submodules) < len(node.names):
                found.add(node.module)
    return {name for name in found if name in MODULES and name != module}


GRAPH = {module: imports_of(module) for module in MODULES}


def cycles(modules: set[str]) -> list[list[str]]:
    """Strongly connected components of more than one module, among `modules` (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in GRAPH[v] & modules:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while not component or component[-1] != v:
                component.append(stack.pop())
                on_stack.discard(component[-1])
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(modules):
        if v not in index:
            visit(v)
    return found


PACKAGES = sorted({name.split(".")[1] for name in MODULES if name.count(".") >= 2})
KNOWN_CYCLES = {"leaderboard": "leaderboard.render <-> leaderboard.submit (issue 10, the leaderboard's part)"}


@pytest.mark.parametrize(
    "package",
    [pytest.param(p, marks=pytest.mark.xfail(strict=True, reason=KNOWN_CYCLES[p])) if p in KNOWN_CYCLES else p for p in PACKAGES],
)
def test_no_import_cycle_inside_a_package(package):
    assert cycles({name for name in MODULES if name.startswith(f"offbench.{package}")}) == []


def test_the_graph_sees_a_cycle():
    """The reader itself: data.resolve -> data.download -> data.resolve was such a cycle."""
    GRAPH["offbench.data.download"].add("offbench.data.resolve")
    try:
        assert ["offbench.data.download", "offbench.data.resolve"] in cycles(set(MODULES))
    finally:
        GRAPH["offbench.data.download"].discard("offbench.data.resolve")


@pytest.mark.parametrize("module", [m for m in sorted(MODULES) if m.startswith(("offbench.envs", "offbench.evaluation"))])
def test_environments_and_evaluation_do_not_import_baselines(module):
    """Evaluation sees a baseline only through the policy it builds; environments not at all."""
    assert not {name for name in GRAPH[module] if name.startswith("offbench.baselines")}
