"""Time loop issues at 1M findings: grouping a new run, the Issues list, an issue's page.

    .venv/bin/python bench/bench_issues.py [--runs 100000] [--per-run 10] [--issues 2000]
                                           [--repeat 7] [--fresh]

Uses the bench database of bench_pages.py (the configured one's name + "_bench", created when
missing) and a project of its own ("issues-bench"), filled once: runs with bulk_create,
findings with COPY (already fingerprinted, spread over the issues by a Zipf law, so one issue
holds about a tenth of them), then every issue counted by `services.issues.refresh`.
Each figure is printed beside a baseline measured in the same run:

- the Issues list (its first page of 50 and their sparklines, as `web.issues.list_context`
  reads them) beside the naive GROUP BY over the findings that computes the same page;
- grouping one new run (`services.issues.group_runs`, in a transaction rolled back) whose
  loop falls in a small issue, and in the biggest one (its counters are added to), beside
  recounting every issue of the project (what a rebuild without denormalised counters would
  do per run);
- re-analysing a run of the biggest issue (its old findings deleted, new ones written and
  grouped as `analysis.write` does: the run's old share of each of its issues taken away and
  the new one added), beside recounting the biggest issue from its findings
  (`services.issues.refresh`, what a re-analysis did before);
- an issue's page for the biggest issue (its runs newest first: the first page, page 200
  and the last; its trend by day and by version), beside the same read from the findings
  (the runs sorted from a subquery over the issue's findings, the versions by a GROUP BY).

The rolled-back rebuilds of the baselines leave a million dead IssueRun rows each; the
script vacuums them away before it times what follows (autovacuum would, later).

Measured (2 shared cores, PostgreSQL 127.0.0.1, other test suites running): see the README's
Speed section.

Prints the median and p95 in milliseconds.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

SLUG = "issues-bench"
TOOLS = ["web_search", "fetch_url", "read_file", "bash", "grep", "kb_search", "sql_query"]
DETECTORS = ["repeat", "blocker", "oscillation", "result_stall", "near_repeat"]
VERSIONS = [f"1.{minor}" for minor in range(12)]

NAIVE_LIST = """
SELECT f.fingerprint, count(*) AS findings, count(DISTINCT f.run_id) AS runs,
    sum(f.waste_steps) AS waste, max(COALESCE(r.started_at, r.created_at)) AS last_seen
FROM runs_finding f JOIN runs_run r ON r.id = f.run_id
WHERE r.project_id = %s AND f.severity <> 'info'
GROUP BY f.fingerprint ORDER BY last_seen DESC LIMIT 50
"""
NAIVE_SPARKS = """
SELECT f.fingerprint, (COALESCE(r.started_at, r.created_at))::date, count(DISTINCT f.run_id)
FROM runs_finding f JOIN runs_run r ON r.id = f.run_id
WHERE r.project_id = %s AND f.fingerprint = ANY(%s) AND r.started_at >= %s
GROUP BY 1, 2
"""

# The issue page as it was read before IssueRun and IssueFacet: the first page of runs
# sorted from the issue's findings, and the count per agent version grouped from them.
OLD_RUNS = """
SELECT r.id, r.name FROM runs_run r
WHERE r.id IN (SELECT run_id FROM runs_finding WHERE issue_id = %s)
ORDER BY r.started_at DESC, r.created_at DESC, r.id DESC LIMIT 20
"""
OLD_BY_VERSION = """
SELECT r.agent_version, count(*), sum(f.n)
FROM (SELECT run_id, count(*) AS n FROM runs_finding WHERE issue_id = %s GROUP BY run_id) AS f
JOIN runs_run r ON r.id = f.run_id
GROUP BY 1
"""


def fill(project, runs: int, per_run: int, issue_count: int) -> None:
    """Insert the runs, the issues and the findings, and count every issue once."""
    from django.db import transaction

    from runs.models import LoopIssue, Run
    from runs.services import issues, storage

    rng = random.Random(16)
    now = datetime.now(UTC)
    with transaction.atomic():
        made = [
            LoopIssue(
                project=project,
                fingerprint=f"{i:016x}",
                detector=DETECTORS[i % len(DETECTORS)],
                tool=TOOLS[i % len(TOOLS)],
                title=f"`{TOOLS[i % len(TOOLS)]}` loop {i}",
            )  # fmt: skip
            for i in range(issue_count)
        ]
        LoopIssue.objects.bulk_create(made, batch_size=5000)
        ids = [issue.pk for issue in made]
        rows = []
        for i in range(runs):
            started = now - timedelta(days=30) + timedelta(seconds=i * (30 * 86400 / runs))
            rows.append(
                Run(
                    project=project,
                    external_id=f"r{i}",
                    name=f"run {i}",
                    format="native",
                    verdict="warn",
                    step_count=40,
                    tool_call_count=30,
                    started_at=started,
                    agent="bench-agent",
                    agent_version=VERSIONS[i * len(VERSIONS) // runs],
                )  # fmt: skip
            )
        Run.objects.bulk_create(rows, batch_size=5000)
        weights = [1 / (k + 1) for k in range(issue_count)]  # Zipf: the first holds the most
        columns = (
            "run_id", "detector", "severity", "tool", "signature", "seqs", "count", "threshold",
            "fired_at", "rule", "message", "waste_steps", "fingerprint", "issue_id",
        )  # fmt: skip

        def findings():
            for run in rows:
                for k in rng.choices(range(issue_count), weights, k=per_run):
                    issue = made[k]
                    yield (
                        run.pk, issue.detector, "warn", issue.tool, f"{issue.tool}:x", [3, 4, 5],
                        3, 3, 5, "defaults", "The same call again.", rng.randint(0, 20),
                        issue.fingerprint, issue.pk,
                    )  # fmt: skip

        storage.copy_rows("runs_finding", columns, findings())
        issues.refresh(ids)


def timed(work, repeat: int) -> tuple[float, float]:
    work()  # warm
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        work()
        times.append((time.perf_counter() - start) * 1000)
    times.sort()
    return statistics.median(times), times[min(len(times) - 1, int(len(times) * 0.95))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=100_000)
    parser.add_argument("--per-run", type=int, default=10, help="findings per run")
    parser.add_argument("--issues", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--fresh", action="store_true", help="drop the bench project first")
    args = parser.parse_args()

    from harness import setup_django

    setup_django()
    from django.contrib.auth import get_user_model
    from django.db import connection, transaction
    from django.http import QueryDict

    import detection
    from runs.models import Finding, LoopIssue, Membership, Project, Run
    from runs.services import analysis, issues
    from runs.web import issues as issues_page

    if args.fresh:
        Project.objects.filter(slug=SLUG).delete()
    project, created = Project.objects.get_or_create(slug=SLUG, defaults={"name": SLUG})
    want = args.runs * args.per_run
    if created or Finding.objects.filter(run__project=project).count() != want:
        Project.objects.filter(pk=project.pk).delete()
        project = Project.objects.create(slug=SLUG, name=SLUG)
        start = time.perf_counter()
        fill(project, args.runs, args.per_run, args.issues)
        print(f"filled {args.runs:,} runs, {want:,} findings, {args.issues:,} issues "
              f"in {time.perf_counter() - start:.0f} s (one full refresh included)")  # fmt: skip
        with connection.cursor() as cursor:
            cursor.execute(
                "ANALYZE runs_finding; ANALYZE runs_run; ANALYZE runs_loopissue;"
                " ANALYZE runs_issuerun; ANALYZE runs_issuefacet"
            )
    user, _ = get_user_model().objects.get_or_create(username="issues-bench")
    Membership.objects.get_or_create(project=project, user=user)
    biggest = LoopIssue.objects.filter(project=project).order_by("-finding_count").first()
    small = LoopIssue.objects.filter(project=project, finding_count__gte=20).order_by(
        "finding_count"
    )[0]
    print(f"biggest issue: {biggest.finding_count:,} findings in {biggest.run_count:,} runs; "
          f"small issue: {small.finding_count:,} findings")  # fmt: skip
    all_ids = list(LoopIssue.objects.filter(project=project).values_list("pk", flat=True))

    def list_page():
        context = issues_page.list_context(user, QueryDict(""))
        list(context["issues"])

    def list_by_waste():
        list(issues_page.list_context(user, QueryDict("sort=waste"))["issues"])

    def naive_list():
        with connection.cursor() as cursor:
            cursor.execute(NAIVE_LIST, [project.pk])
            marks = [row[0] for row in cursor.fetchall()]
            since = datetime.now(UTC) - timedelta(days=30)
            cursor.execute(NAIVE_SPARKS, [project.pk, marks, since])
            cursor.fetchall()

    def grouping(issue: LoopIssue):
        steps = [detection.Step(seq=0, kind="user", text="go")]
        steps += [
            detection.Step(seq=i, kind="tool_call", tool=issue.tool, args={"q": "x"}, result=[])
            for i in range(1, 7)
        ]
        run = Run.objects.create(project=project, external_id="new", name="new", format="native",
                                 agent_version=VERSIONS[-1])  # fmt: skip
        found = analysis.prepare([(run, steps)], detection.Policy())[0]
        mark = issues.fingerprints.fingerprint(found.result.findings[0])  # no stored steps
        LoopIssue.objects.filter(pk=issue.pk).update(fingerprint=mark)  # the loop is this issue

        def work():
            with transaction.atomic():
                Finding.objects.bulk_create(
                    analysis.finding_row(run, f) for f in found.result.findings
                )
                issues.group_runs([run])
                transaction.set_rollback(True)

        result = timed(work, args.repeat)
        LoopIssue.objects.filter(pk=issue.pk).update(fingerprint=issue.fingerprint)
        run.delete()
        return result

    def reanalysis(issue: LoopIssue, keep: bool):
        """Re-analyze a stored run of the issue: its findings replaced by one finding of the
        issue's loop (`keep`) or by none (the policy no longer flags it)."""
        run = Run.objects.filter(issue_runs__issue=issue).order_by("-pk").first()
        steps = [detection.Step(seq=0, kind="user", text="go")]
        steps += [
            detection.Step(seq=i, kind="tool_call", tool=issue.tool, args={"q": "x"}, result=[])
            for i in range(1, 7)
        ]
        found = analysis.prepare([(run, steps)], detection.Policy())[0].result.findings
        mark = issues.fingerprints.fingerprint(found[0])
        LoopIssue.objects.filter(pk=issue.pk).update(fingerprint=mark)

        def work():
            with transaction.atomic():
                Finding.objects.filter(run=run).delete()
                if keep:
                    Finding.objects.bulk_create(analysis.finding_row(run, f) for f in found)
                issues.group_runs([run])
                transaction.set_rollback(True)

        result = timed(work, args.repeat)
        LoopIssue.objects.filter(pk=issue.pk).update(fingerprint=issue.fingerprint)
        return result

    def recount(ids):
        def work():
            with transaction.atomic():
                issues.refresh(ids)
                transaction.set_rollback(True)

        return work

    def vacuum():
        """Clear the dead rows the rolled-back rebuilds above leave (a million IssueRun rows
        each, which a real table never gets at once): autovacuum would, some time later."""
        with connection.cursor() as cursor:
            cursor.execute(
                "VACUUM (ANALYZE) runs_issuerun, runs_issuefacet, runs_issueday, runs_loopissue"
            )

    def issue_page(page: str | None):
        def work():
            context = issues_page.detail_context(biggest, page)
            list(context["runs"])

        return work

    def issue_page_from_findings():
        with connection.cursor() as cursor:
            cursor.execute(OLD_RUNS, [biggest.pk])
            cursor.fetchall()
            cursor.execute(OLD_BY_VERSION, [biggest.pk])
            cursor.fetchall()

    rows = [
        ("Issues list, first page (last seen)", timed(list_page, args.repeat)),
        ("Issues list, first page (most waste)", timed(list_by_waste, args.repeat)),
        ("  baseline: GROUP BY over the findings", timed(naive_list, max(3, args.repeat // 2))),
        ("group a new run into a small issue", grouping(small)),
        ("group a new run into the biggest issue", grouping(biggest)),
        ("  baseline: recount every issue", timed(recount(all_ids), 1)),
    ]
    vacuum()
    rows += [
        ("re-analyze a run of the biggest issue (kept)", reanalysis(biggest, True)),
        ("re-analyze a run of the biggest issue (gone)", reanalysis(biggest, False)),
        ("  baseline: recount the biggest issue", timed(recount([biggest.pk]), 3)),
    ]
    vacuum()
    last = (biggest.run_count + issues_page.RUNS_PER_PAGE - 1) // issues_page.RUNS_PER_PAGE
    rows += [
        ("issue page of the biggest issue", timed(issue_page(None), args.repeat)),
        ("issue page of the biggest issue, page 200", timed(issue_page("200"), args.repeat)),
        (f"issue page of the biggest issue, page {last:,}", timed(issue_page(str(last)), 3)),
        ("  baseline: its runs and versions from findings", timed(issue_page_from_findings, 3)),
    ]
    print(f"\n{'':44} {'median ms':>10} {'p95 ms':>10}")
    for label, (median, p95) in rows:
        print(f"{label:44} {median:10.1f} {p95:10.1f}")


if __name__ == "__main__":
    main()
