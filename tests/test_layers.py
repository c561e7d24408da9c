"""The import direction, read from the code's syntax trees (every import, also inside functions).

web/, api/, the management commands -> services/ -> models, importers, detection
(api/ may also use importers' pure request decoders)
tasks -> services/; services/queue.py is the only way back from a service to a task
nothing imports web/ or api/ but the URL confs (and the NinjaAPI, which mounts the router)
detection/ and importers/ import no Django, Celery, runs or loopboard code
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
    assert offending("runs.services", ("runs.tasks",), allow=("runs.services.queue",)) == []


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
