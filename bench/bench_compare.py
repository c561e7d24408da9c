"""Time comparing two 10k-step runs: the alignment and the compare page, beside baselines.

    .venv/bin/python bench/bench_compare.py [--steps 10000] [--repeat 5] [--fresh]

Uses the bench database of bench_pages.py (the configured one's name + "_bench"). Stores two
generated runs of `--steps` steps each with COPY: the second is the first with 40 inserted
calls, 40 removed, 40 with other arguments, 40 with another result, and its 1,500-call loop
fixed (the steps after it go on further). Then prints median times of:

- loading both runs' step facts, aligning them (`compare.align_steps`), the whole
  `compare_runs`, and the compare page (first page, a middle page, an unfolded stretch
  through htmx) through Django's test Client, beside /healthz;
- the compare job: the page's request with no worker running (it opens a queued job), the
  worker's part (`compare.run_job`: align, encode, store, with its progress writes), the
  stored size, and the page once the job is done (decoded anew, then cached), beside what
  the page did in the request before (`compare_runs` and the first window);
- baselines over the same signatures: difflib.SequenceMatcher (with and without autojunk),
  and an unbounded O(n·m) LCS on the first 2,000 steps beside `align` on the same prefix
  (with the number of matched steps of each, to show the alignment is as long);
- two unrelated runs (random calls from 5 signatures), where the bound kicks in.
"""

from __future__ import annotations

import argparse
import difflib
import os
import random
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from harness import setup_django  # noqa: E402 - after the path is set

LOOP = 1_500
EDITS = 40


def base_steps(steps: int, seed: int = 16) -> list[tuple]:
    """Return (kind, tool, args, result, text) for a run with turns, progress and one loop."""
    rng = random.Random(seed)
    out: list[tuple] = []
    loop_at = steps // 3
    while len(out) < steps:
        n = len(out)
        if loop_at <= n < loop_at + LOOP:
            out.append(("tool_call", "web_search", {"query": "release notes"}, {"results": []}, ""))
        elif n % 500 == 0:
            out.append(("user", "", None, None, f"Task {n // 500}"))
        elif n % 10 == 1:
            out.append(("assistant", "", None, None, f"Thinking about step {n}"))
        else:
            tool = rng.choice(["read_file", "grep", "bash", "edit_file"])
            out.append(("tool_call", tool, {"path": f"src/f{n}.py"}, f"line {n}", ""))
    return out


def edited(steps: list[tuple], total: int) -> list[tuple]:
    """Return a copy with inserts, removals, changed args and results, and the loop fixed."""
    rng = random.Random(61)
    out = list(steps)
    loop_at = len(steps) // 3
    del out[loop_at + 3 : loop_at + LOOP]  # the fixed run stops searching after 3 tries
    calls = [n for n, s in enumerate(out) if s[0] == "tool_call" and s[1] != "web_search"]
    for n in rng.sample(calls, EDITS):
        kind, tool, args, result, text = out[n]
        out[n] = (kind, tool, {**args, "line": n}, result, text)
    for n in rng.sample(calls, EDITS):
        kind, tool, args, result, text = out[n]
        out[n] = (kind, tool, args, f"{result} (changed)", text)
    for n in sorted(rng.sample(range(len(out)), EDITS), reverse=True):
        del out[n]
    for n in sorted(rng.sample(range(len(out)), EDITS), reverse=True):
        out.insert(n, ("tool_call", "web_fetch", {"url": f"https://example.com/{n}"}, "ok", ""))
    n = len(out)
    while len(out) < total:  # the fixed run goes on to other work
        out.append(("tool_call", "read_file", {"path": f"src/after{n}.py"}, f"line {n}", ""))
        n += 1
    return out


def store(project, name: str, steps: list[tuple]):
    """Store one run's steps with COPY and analyze it."""
    import detection
    from runs.models import Run
    from runs.services import analysis, storage
    from runs.services.policy import engine_policy

    start = datetime(2026, 1, 1, tzinfo=UTC)
    run = Run.objects.create(
        project=project, external_id=name, name=name, format="native", step_count=len(steps),
        tool_call_count=sum(1 for s in steps if s[0] == "tool_call"), started_at=start,
        ended_at=start + timedelta(seconds=len(steps)),
    )  # fmt: skip
    epoch = start.timestamp()

    def engine_steps():
        for seq, (kind, tool, args, result, text) in enumerate(steps):
            at = epoch + seq
            if kind == "tool_call":
                yield detection.Step(seq, kind, tool=tool, args=args, result=result,
                                     started_at=at, ended_at=at + 0.4, tokens_in=900,
                                     tokens_out=40, cost=0.003)  # fmt: skip
            else:
                yield detection.Step(seq, kind, text=text, started_at=at, ended_at=at)

    policy = engine_policy(project)
    rows = (storage.step_values(run.pk, step, policy)[0] for step in engine_steps())
    storage.copy_rows("runs_step", storage.STEP_COLUMNS, rows)
    analysis.analyze_run(run.pk, policy)
    run.refresh_from_db()
    return run


def median_ms(func, repeat: int) -> tuple[float, object]:
    times = []
    result = None
    for _ in range(repeat):
        began = time.perf_counter()
        result = func()
        times.append((time.perf_counter() - began) * 1000)
    return statistics.median(times), result


def unbounded_lcs(a: list, b: list) -> int:
    """The textbook O(n·m) dynamic program (one row kept): the length of the LCS."""
    row = [0] * (len(b) + 1)
    for x in a:
        previous = 0
        for j, y in enumerate(b):
            keep = row[j + 1]
            row[j + 1] = previous + 1 if x == y else max(row[j + 1], row[j])
            previous = keep
    return row[-1]


def main() -> None:
    parser = argparse.ArgumentParser(description="Time comparing two big runs.")
    parser.add_argument("--steps", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--fresh", action="store_true", help="store the runs again")
    args = parser.parse_args()

    setup_django()
    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    from runs.models import CompareJob, Membership, Project, Run
    from runs.services import compare
    from runs.web import comparison

    settings.ALLOWED_HOSTS = ["*"]
    project, _ = Project.objects.get_or_create(slug="bench-compare", defaults={"name": "compare"})
    if args.fresh:
        Run.objects.filter(project=project).delete()
    user, _ = get_user_model().objects.get_or_create(username="bench")
    Membership.objects.get_or_create(project=project, user=user)
    names = [f"loop-{args.steps}", f"fixed-{args.steps}", f"noise-a-{args.steps}",
             f"noise-b-{args.steps}"]  # fmt: skip
    runs = {run.name: run for run in Run.objects.filter(project=project, name__in=names)}
    if len(runs) < len(names):
        Run.objects.filter(project=project, name__in=names).delete()
        began = time.perf_counter()
        base = base_steps(args.steps)
        rng = random.Random(5)
        noise = [
            [("tool_call", "t", {"k": rng.randrange(5)}, "r", "") for _ in range(args.steps)]
            for _ in range(2)
        ]
        for name, steps in zip(names, [base, edited(base, args.steps), *noise], strict=True):
            runs[name] = store(project, name, steps)
        print(f"stored and analyzed 4 runs in {time.perf_counter() - began:.1f} s")
    left, right = runs[names[0]], runs[names[1]]
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"\n{os.cpu_count()} cores, load average {load} (the figures scale with it)")
    print(f"left {left.name}: {left.step_count} steps, verdict {left.verdict}; "
          f"right {right.name}: {right.step_count} steps, verdict {right.verdict}\n")  # fmt: skip

    r = args.repeat
    facts_ms, facts = median_ms(lambda: (compare.step_facts(left), compare.step_facts(right)), r)
    a_facts, b_facts = facts  # type: ignore[misc]
    align_ms, (rows, bounded) = median_ms(lambda: compare.align_steps(a_facts, b_facts), r)  # type: ignore[misc]

    def cold_compare(a, b):
        return compare.compare_runs(a, b)

    whole_ms, cmp = median_ms(lambda: cold_compare(left, right), r)
    window_ms, _ = median_ms(lambda: comparison.build_window(cmp), r)  # type: ignore[arg-type]
    keys_a, keys_b = [s.key for s in a_facts], [s.key for s in b_facts]

    def opcodes(autojunk: bool):
        return lambda: difflib.SequenceMatcher(
            None, keys_a, keys_b, autojunk=autojunk
        ).get_opcodes()

    junk_ms, _ = median_ms(opcodes(True), r)
    nojunk_ms, _ = median_ms(opcodes(False), 1)
    counts = cmp.counts  # type: ignore[attr-defined]
    print(f"alignment: {counts}, bounded={bounded}\n")
    print(f"{'two runs of ' + str(args.steps) + ' steps':52} {'median ms':>10}")
    print(f"{'  load step facts (both runs)':52} {facts_ms:10.1f}")
    print(f"{'  align_steps (this module)':52} {align_ms:10.1f}")
    print(f"{'  compare_runs (load + align + loop starts)':52} {whole_ms:10.1f}")
    print(f"{'  build the first window (page builder)':52} {window_ms:10.1f}")
    print(f"{'  baseline: difflib.SequenceMatcher, autojunk':52} {junk_ms:10.1f}")
    print(f"{'  baseline: difflib.SequenceMatcher, no autojunk (1 run)':52} {nojunk_ms:10.1f}")

    prefix_a, prefix_b = keys_a[:2000], keys_b[:2000]
    ours_ms, (pairs, _) = median_ms(lambda: compare.align(prefix_a, prefix_b), r)  # type: ignore[misc]
    dp_ms, lcs = median_ms(lambda: unbounded_lcs(prefix_a, prefix_b), 1)
    ours = sum(1 for i, j in pairs if i is not None and j is not None)
    print(f"\n{'first 2,000 steps of each':52} {'median ms':>10} {'matched':>8}")
    print(f"{'  align (this module)':52} {ours_ms:10.1f} {ours:8}")
    print(f"{'  baseline: unbounded O(n*m) LCS (1 run)':52} {dp_ms:10.1f} {lcs:8}")

    noise_a, noise_b = runs[names[2]], runs[names[3]]
    noisy_ms, noisy = median_ms(lambda: cold_compare(noise_a, noise_b), r)
    print(f"\n{'two unrelated runs (5 signatures, random)':52} {'median ms':>10}")
    print(f"{'  compare_runs, bounded=' + str(noisy.bounded):52} {noisy_ms:10.1f}")  # type: ignore[attr-defined]

    client = Client()
    client.force_login(user)
    url = f"/runs/{left.pk}/compare/{right.pk}/"
    jobs = CompareJob.objects.filter(left=left, right=right)

    def in_request():  # what the page did inside the request before the job
        return comparison.build_window(compare.compare_runs(left, right))

    before_ms, _ = median_ms(in_request, r)
    queued = []
    client.get(f"/runs/{right.pk}/compare/{left.pk}/")  # templates compiled, as in a server
    for _ in range(r):
        jobs.delete()
        began = time.perf_counter()
        response = client.get(url)
        queued.append((time.perf_counter() - began) * 1000)
        assert b'id="compare-job"' in response.content
    job = jobs.get()
    began = time.perf_counter()
    compare.run_job(job.pk)
    worker_ms = (time.perf_counter() - began) * 1000
    job.refresh_from_db()
    assert job.status == "done", job.error
    decode_ms, _ = median_ms(lambda: compare.decode(bytes(job.result), left, right), r)
    print(f"\n{'the compare job, two runs of ' + str(args.steps) + ' steps':52} {'ms':>10}")
    print(f"{'  before: in the request (compare_runs + first window)':52} {before_ms:10.1f}")
    print(
        f"{'  now: the page opens a queued job (no worker)':52} {statistics.median(queued):10.1f}"
    )
    print(f"{'  now: the worker computes and stores it (run_job, 1 run)':52} {worker_ms:10.1f}")
    print(f"{'  decode the stored result':52} {decode_ms:10.1f}")
    print(f"{'  stored result (zlib over JSON columns), KB':52} {len(job.result) / 1024:10.0f}")

    items = comparison.build_window(cmp).items  # type: ignore[arg-type]
    fold = next((item for item in items if item.kind == "fold"), None)
    pages = [
        ("baseline /healthz", "/healthz", {}, False),
        ("compare page, job done, decoded anew", url, {}, True),
        ("compare page, job done, decoded comparison cached", url, {}, False),
        ("compare page, from row 5000, cached", url + "?from=5000", {}, False),
        ("picker (default: previous of the same task)", f"/runs/{right.pk}/compare/", {}, False),
    ]
    if fold is not None:
        unfold = f"{url}?from={fold.index}&to={fold.until}&flat=1"
        hx = {"HX-Request": "true"}
        pages.append((f"unfold {fold.count} equal steps (htmx), cached", unfold, hx, False))
    print(f"\n{'page':52} {'median ms':>10} {'queries':>8} {'KB':>7}")
    for label, page_url, headers, cold in pages:
        client.get(page_url, headers=headers)
        times = []
        for _ in range(r):
            if cold:
                compare._CACHE.clear()
            with CaptureQueriesContext(connection) as captured:
                began = time.perf_counter()
                response = client.get(page_url, headers=headers)
                times.append((time.perf_counter() - began) * 1000)
        assert response.status_code == 200, (page_url, response.status_code)
        size = len(response.content) / 1024
        print(f"  {label:50} {statistics.median(times):10.1f} {len(captured):8} {size:7.0f}")


if __name__ == "__main__":
    main()
