"""Take screenshots of the main pages against a running loopboard (login demo/demo).

    .venv/bin/python bench/screenshots.py [--base http://127.0.0.1:8000] [--out screenshots]

Uses Debian's Chromium (`chromium` on PATH, or $CHROMIUM) through Playwright. Needs a server
with at least one flagged run (the demo data: `loopboard serve` seeds it).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
from pathlib import Path

from playwright.sync_api import sync_playwright

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", default="http://127.0.0.1:8000")
    parser.add_argument("--out", default="screenshots")
    parser.add_argument("--user", default="demo")
    parser.add_argument("--password", default="demo")
    parser.add_argument("--width", type=int, default=1440)
    parser.add_argument("--height", type=int, default=900)
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(exist_ok=True)
    base = args.base.rstrip("/")
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=os.environ.get("CHROMIUM") or shutil.which("chromium"),
            args=CHROMIUM_ARGS,
        )
        page = browser.new_page(viewport={"width": args.width, "height": args.height})
        page.goto(f"{base}/accounts/login/")
        page.fill("input[name=username]", args.user)
        page.fill("input[name=password]", args.password)
        page.click("button[type=submit], input[type=submit]")
        page.wait_for_load_state("networkidle")

        def shot(name: str, full: bool = False) -> None:
            page.wait_for_load_state("networkidle")
            page.screenshot(path=str(out / f"{name}.png"), full_page=full)
            print(out / f"{name}.png")

        page.goto(f"{base}/")
        shot("01-runs-list")

        page.goto(f"{base}/?sort=score&verdict=flagged")
        link = page.locator("tr.run-row--stop a, tr.run-row--warn a").first
        run_url = link.get_attribute("href")
        page.goto(base + run_url)
        shot("02-flagged-run")
        finding = page.locator(".finding").first
        finding.click()
        page.wait_for_timeout(400)
        shot("03-finding-highlighted")

        page.goto(base + run_url)
        band = page.locator(".fold__unfold").first
        if band.count():
            band.click()
            page.wait_for_selector(".step--repeat")
        opener = page.locator(".step--repeat .step__open").nth(1)
        opener.click()
        page.wait_for_selector(".step__detail .detail")
        page.locator(".step__detail .detail").first.scroll_into_view_if_needed()
        page.evaluate("window.scrollBy(0, 120)")
        shot("04-step-diff")

        # The tree of the most branched run (a run with sub-agents if there is one).
        page.goto(f"{base}/?q=subagents")
        branched = page.locator("td.run-row__name a").first
        tree_url = (branched.get_attribute("href") if branched.count() else run_url) + "tree/"
        page.goto(base + tree_url)
        shot("05-tree")
        page.goto(base + run_url + "ledger/")
        shot("06-ledger")

        page.goto(f"{base}/overview/")
        shot("07-overview", full=True)

        page.goto(f"{base}/tuning/")
        slug = re.search(r"/projects/([^/]+)/tuning/", page.url)
        tool = page.locator("input[name$='-tool']").last
        tool.fill(page.locator("#tool-names option").first.get_attribute("value") or "web_search")
        page.locator("input[name$='-warn']").last.fill("2")
        page.select_option("select[name=b-range]", "30d")
        page.get_by_role("button", name="Run back-test").click()
        # The worker runs the job; the block polls until it is done.
        page.locator("#backtest .backtest__status--done").wait_for(timeout=120_000)
        page.locator("#backtest").scroll_into_view_if_needed()
        shot("08-tuning-backtest", full=True)
        print("project:", slug.group(1) if slug else "?")

        page.set_viewport_size({"width": 1280, "height": 800})
        page.goto(base + run_url)
        shot("09-flagged-run-laptop")
        page.set_viewport_size({"width": args.width, "height": args.height})

        # What users of other tracing tools expect: where the time went, per-step tokens and
        # cost, previous/next, find in a run, acting on many runs, several tuning rows, upload.
        page.goto(base + run_url + "time/")
        shot("10-time-waterfall")
        page.goto(base + run_url + "steps/2/")
        shot("11-step-previous-next")
        page.goto(base + run_url)
        page.get_by_role("searchbox", name="Find in this run").fill("search")
        page.get_by_role("searchbox", name="Find in this run").press("Enter")
        shot("12-find-in-run")
        page.goto(f"{base}/")
        boxes = page.locator("input[name=run]")
        for i in range(min(boxes.count(), 2)):
            boxes.nth(i).check()
        page.locator("#bulk-form select[name=action]").select_option("compare")
        shot("13-runs-list-selected")
        page.goto(f"{base}/tuning/")
        adder = page.get_by_role("button", name="Add a tool row")
        if adder.count():
            adder.click()
            adder.click()
        shot("14-tuning-rows", full=True)
        page.goto(f"{base}/upload/")
        shot("15-upload-dropzone")
        browser.close()


if __name__ == "__main__":
    main()
