"""axe-core in the browser tests: the page is checked for contrast, names and labels.

axe-core is the npm package pinned in tests/e2e/axe/package.json, installed by `make test`
(or `make axe`) into tests/e2e/axe/node_modules. It is evaluated in the page through the
DevTools protocol, which the page's Content-Security-Policy does not apply to.
"""

from __future__ import annotations

from pathlib import Path

import pytest

AXE = Path(__file__).resolve().parent / "axe" / "node_modules" / "axe-core" / "axe.min.js"
# What a user cannot get past: text they cannot read, and controls nobody can name.
RULES = ["color-contrast", "button-name", "link-name", "label", "select-name", "input-button-name"]


def axe_source() -> str:
    if not AXE.exists():
        pytest.fail(f"axe-core is not installed at {AXE}: run `make axe` (npm ci in tests/e2e/axe)")
    return AXE.read_text()


def violations(page) -> list[str]:
    """Run axe-core's RULES on the page as it is now; one line per failing element."""
    if not page.evaluate("() => typeof window.axe === 'object'"):
        page.evaluate(axe_source())
    result = page.evaluate(
        """rules => axe.run(document, {runOnly: {type: 'rule', values: rules}})
            .then(r => r.violations.map(v => v.nodes.map(n =>
                `${v.id}: ${n.target.join(' ')}: ${n.failureSummary.replace(/\\s+/g, ' ')}`)).flat())""",
        RULES,
    )
    return list(result)


def assert_accessible(page, where: str = "") -> None:
    """Fail with every violation on the page, naming the page."""
    found = violations(page)
    assert found == [], f"{where or page.url}:\n" + "\n".join(found)
