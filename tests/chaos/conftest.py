"""Fixtures of the chaos tests (see harness.py): one migrated template database per session,
and the measured figures printed at the end of the run, bench-like.

They take minutes, so `make test` leaves them to `make chaos` (which .ci/run calls): they are
collected when named (`pytest tests/chaos`, or one of its files) or with LOOPBOARD_CHAOS=1.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.chaos import harness

HERE = Path(__file__).resolve().parent


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    if os.environ.get("LOOPBOARD_CHAOS") == "1" or collection_path.name == "conftest.py":
        return None
    for arg in config.args:
        named = Path(arg.split("::")[0]).resolve()
        if named == HERE or HERE in named.parents:
            return None
    return True


@pytest.fixture(scope="session")
def chaos_template():
    """Migrate one database once; every module's database is a copy of it."""
    name = f"{harness.base_name()}_chaos_tpl"
    harness.migrate_template(name)
    yield name
    harness.drop_database(name)


def pytest_terminal_summary(terminalreporter) -> None:  # type: ignore[no-untyped-def]
    if not harness.FIGURES:
        return
    terminalreporter.section("chaos: another project's upload, upload to analyzed")
    for test, what, seconds, bound in harness.FIGURES:
        shown = (
            f"{seconds:6.1f} s" if seconds is not None else f"> {bound + harness.PATIENCE:.0f} s"
        )
        terminalreporter.write_line(f"{test:<22} {what:<48} {shown}   (bound {bound:.0f} s)")
