"""The import direction, read from the code's syntax trees (every import, also inside functions).

web/, api/, the management commands -> services/ -> models, importers, detection
(api/ may also use importers' pure request decoders)
tasks -> services/; services/queue.py is the only way back from a service to a task
nothing imports web/ or api/ but the URL confs (and the NinjaAPI, which mounts the router)
detection/ and importers/ import no Django, Celery, runs or loopboard code
no import circle between project modules (imports under `if TYPE_CHECKING:` aside), and no
project module imported inside a function (LAZY below would name an exception and why; it is
empty)
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("detection", "runs", "loopboard")
FRAMEWORKS = ("django", "celery", "ninja", "django_htmx", "psycopg", "runs", "loopboard")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(path: Path) -> set[str]:
    """Return every module a file imports, relative imports resolved."""
    package = module_name(path).split(".")
    if path.name != "__init__.py":
        package.pop()
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join([*base, *(node.module.split(".") if node.module else [])])
            found.add(module)
            found.update(f"{module}.{alias.name}" for alias in node.names)
    return found


def sources() -> dict[str, set[str]]:
    files = [p for name in PACKAGES for p in (ROOT / name).rglob("*.py")]
    return {module_name(p): imports_of(p) for p in files if "migrations" not in p.parts}


SOURCES = sources()


def within(module: str, *prefixes: str) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def offending(importer_prefix: str, forbidden: tuple[str, ...], allow: tuple[str, ...] = ()):
    return sorted(
        (name, target)
        for name, targets in SOURCES.items()
        if within(name, importer_prefix) and not within(name, *allow)
        for target in targets
        if within(target, *forbidden)
    )


# (importer, imported): why this import waits until a function runs. None today: the lean
# hook entry point is chosen by the dispatcher in loopboard/cli/__init__.py instead.
LAZY: dict[tuple[str, str], str] = {}


def is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def project_imports(path: Path) -> list[tuple[str, int, bool]]:
    """Return (module, line, at module level) for each project module a file imports at run
    time: `from package import module` names the module, anything else the module imported."""
    package = module_name(path).split(".")
    if path.name != "__init__.py":
        package.pop()
    found: list[tuple[str, int, bool]] = []

    def visit(node: ast.AST, top: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and is_type_checking(child.test):
                for other in child.orelse:
                    visit_one(other, top)
            else:
                visit_one(child, top)

    def visit_one(node: ast.AST, top: bool) -> None:
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join([*base, *(node.module.split(".") if node.module else [])])
            targets = [
                f"{module}.{alias.name}" if f"{module}.{alias.name}" in SOURCES else module
                for alias in node.names
            ]
        else:
            nested = isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            visit(node, top and not nested)
            return
        for target in targets:
            while target not in SOURCES and "." in target:
                target = target.rpartition(".")[0]
            if target in SOURCES:
                found.append((target, node.lineno, top))

    visit(ast.parse(path.read_text(), str(path)), True)
    return found


def files() -> dict[str, Path]:
    return {module_name(p): p for name in PACKAGES for p in (ROOT / name).rglob("*.py")}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Return the strongly connected parts of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in graph[node]:
            if target not in index:
                connect(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            part = []
            while not part or part[-1] != node:
                part.append(stack.pop())
            if len(part) > 1 or node in graph[node]:
                found.append(sorted(part))

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return sorted(found)


def test_no_import_circle_between_project_modules():
    graph = {
        name: {target for target, _, top in project_imports(path) if top}
        for name, path in files().items()
    }
    assert cycles(graph) == []


def test_no_project_module_is_imported_inside_a_function():
    lazy = sorted(
        (name, target, line)
        for name, path in files().items()
        for target, line, top in project_imports(path)
        if not top and (name, target) not in LAZY
    )
    assert lazy == []


def test_the_layers_are_all_there():
    for layer in ("runs.services", "runs.web", "runs.api", "runs.importers", "runs.tasks"):
        assert any(within(name, layer) for name in SOURCES), layer


def test_detection_and_importers_import_no_framework_or_app_code():
    assert offending("detection", FRAMEWORKS) == []
    assert offending("runs.importers", tuple(f for f in FRAMEWORKS if f != "runs")) == []
    outside = tuple(
        f"runs.{part}" for part in ("models", "services", "web", "api", "tasks", "admin")
    )
    assert offending("runs.importers", outside) == []


def test_services_never_reach_up_to_pages_the_api_or_tasks():
    assert offending("runs.services", ("runs.web", "runs.api")) == []
    assert offending("runs.services", ("runs.tasks",)) == []


def test_tasks_call_only_services():
    app = ("runs.web", "runs.api", "runs.importers", "runs.admin", "runs.models")
    assert offending("runs.tasks", app) == []


@pytest.mark.parametrize("layer", ["runs.web", "runs.api", "runs.management"])
def test_entry_points_go_through_services(layer):
    # The API may use the pure request decoders of importers/ (OTLP, JSON depth): the OTLP
    # receiver answers a malformed export request before anything is stored.
    forbidden = {
        "runs.web": ("runs.api", "runs.importers"),
        "runs.api": ("runs.web",),
        "runs.management": ("runs.web", "runs.api", "runs.importers"),
    }[layer]
    assert offending(layer, ("runs.tasks", *forbidden)) == []


def test_models_import_no_layer_above_them():
    above = ("runs.services", "runs.web", "runs.api", "runs.tasks", "runs.importers")
    assert offending("runs.models", above) == []


def test_only_the_url_confs_import_pages_and_the_api():
    entry = ("runs.urls", "loopboard.urls", "loopboard.api", "runs.web", "runs.api")
    importers = sorted(
        name
        for name, targets in SOURCES.items()
        if not within(name, *entry) and any(within(t, "runs.web", "runs.api") for t in targets)
    )
    assert importers == []
