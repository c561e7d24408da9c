"""Browser tests: headless Chromium (Debian's /usr/bin/chromium) driven by Playwright.

Skipped with a reason when Chromium is missing, unless LOOPBOARD_REQUIRE_E2E=1 (CI), where a
missing browser is a failure. Ingest and analysis run in a background thread of the test
process when the upload commits (the Celery task's .delay is replaced), so the page really
waits for them through its status polling.
"""

from __future__ import annotations

import os
import shutil
import threading

import pytest

os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"  # Playwright's sync API runs an event loop

CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-quic",
    "--disable-component-update",
    "--disable-sync",
]


def chromium_path() -> str | None:
    if os.path.exists(CHROMIUM):
        return CHROMIUM
    return shutil.which("chromium")


@pytest.fixture(scope="module")
def browser():
    """One Chromium per test module: Playwright's sync API keeps an event loop running in
    this thread until it stops, which would break later tests that run their own loop."""
    path = chromium_path()
    if path is None:
        if os.environ.get("LOOPBOARD_REQUIRE_E2E") == "1":
            pytest.fail("Chromium is missing at /usr/bin/chromium and LOOPBOARD_REQUIRE_E2E=1")
        pytest.skip("Chromium is not installed (/usr/bin/chromium): apt-get install chromium")
    from playwright.sync_api import expect, sync_playwright

    # A page's assertions wait as long as its actions: on a loaded 2-core CI machine a page
    # can take over expect's default 5 s to render (seen: an issue page after a click).
    expect.set_options(timeout=15_000)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=path, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    page = context.new_page()
    page.set_default_timeout(15_000)
    yield page
    context.close()


@pytest.fixture
def background_worker(monkeypatch):
    """Run ingest and analysis in a thread whenever a task is queued (no broker needed)."""
    from django.db import connection

    from runs import tasks
    from runs.services import analysis, ingest

    threads: list[threading.Thread] = []

    def in_thread(func):
        def delay(object_id: int) -> None:
            def work() -> None:
                try:
                    func(object_id)
                finally:
                    connection.close()

            thread = threading.Thread(target=work, daemon=True)
            threads.append(thread)
            thread.start()

        return delay

    # queue.py sends each task through its apply_async (runs to analyze in batches)
    for task, func in (
        (tasks.ingest_trace, ingest.ingest_trace),
        (tasks.analyze_run, analysis.analyze_run),
        (tasks.analyze_runs, analysis.analyze_batch),
        (tasks.reanalyze_runs, lambda ids: analysis.analyze_batch(ids, again=True)),
    ):
        run = in_thread(func)
        monkeypatch.setattr(task, "apply_async", lambda args, kwargs=None, run=run, **_: run(*args))
    yield threads
    for thread in threads:
        thread.join(timeout=30)
