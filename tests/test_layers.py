"""The import structure: no module imports itself back through others, and the low layers do not import the
high ones. Read from the source (every import statement that runs, lazy ones inside functions included; imports
under `if TYPE_CHECKING:` serve annotations only and are left out)."""

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "offbench"
MODULES = {
    ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts).removesuffix(".__init__"): path for path in PACKAGE.rglob("*.py")
}


def imports_of(module: str) -> set[str]:
    """offbench modules `module` imports (`from offbench.envs import darkroom` is offbench.envs.darkroom)."""
    found = set()
    tree = ast.parse(MODULES[module].read_text())
    for block in [node for node in ast.walk(tree) if isinstance(node, ast.If) and ast.unparse(node.test).endswith("TYPE_CHECKING")]:
        block.body = []  # annotations only: nothing imported at run time
    for node in ast.walk(tree):
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


@pytest.mark.parametrize("package", PACKAGES)
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


@pytest.mark.parametrize("low", ["offbench.stats", "offbench.tracking", "offbench.plotting"])
def test_statistics_run_reading_and_figures_do_not_import_the_leaderboard(low):
    """Stats and the run-directory reader sit below both the leaderboard and the figures."""
    modules = [name for name in MODULES if name == low or name.startswith(f"{low}.")]
    assert modules and not {(m, name) for m in modules for name in GRAPH[m] if name.startswith("offbench.leaderboard")}


@pytest.mark.parametrize("module", [m for m in sorted(MODULES) if m.startswith("offbench.envs")])
def test_environments_import_neither_evaluation_nor_generators(module):
    """Environments only step: playing a policy in lanes is evaluation's (offbench.evaluation.lanes), and the
    generators' source algorithms sit above the environments they run on."""
    assert not {name for name in GRAPH[module] if name.startswith(("offbench.evaluation", "offbench.generators"))}


@pytest.mark.parametrize("module", [m for m in sorted(MODULES) if m.startswith("offbench.data")])
def test_data_imports_no_environment(module):
    """The data layer sits below the environments (offbench.envs.xland reads its rulesets from a data file); DPT's
    posterior labels, which step the card's tasks, come from offbench.generators.task_posterior."""
    assert not {name for name in GRAPH[module] if name.startswith("offbench.envs")}


@pytest.mark.parametrize("module", [m for m in sorted(MODULES) if m.startswith("offbench.plotting")])
def test_figures_build_no_environment(module):
    """Figures only draw: reference curves come from where the generators are (offbench.generators.references,
    called by the plot command) or from what the generator recorded in the card, never from an environment built
    in offbench.plotting."""
    assert not {name for name in GRAPH[module] if name.startswith("offbench.envs")}
    if module != "offbench.plotting.commands":
        assert not {name for name in GRAPH[module] if name.startswith("offbench.generators")}
