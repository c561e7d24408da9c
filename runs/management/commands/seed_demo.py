"""Create the `demo` project with the bundled sample traces (idempotent)."""

import json
from collections import defaultdict
from datetime import datetime, time, timedelta
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand

from runs.models import LoopIssue, Membership, Project, Run, Trace
from runs.services import analysis, ingest, issues

DEMO_DIR = Path(__file__).resolve().parents[2] / "demo"


class Command(BaseCommand):
    help = "Create the demo project and load the bundled sample traces into it (idempotent)."

    def add_arguments(self, parser):
        parser.add_argument(
            "--user",
            action="store_true",
            help="also create the demo/demo login (only allowed on the embedded default)",
        )

    def handle(self, *args, user: bool, **options):
        project, _ = Project.objects.get_or_create(slug="demo", defaults={"name": "demo"})
        demo = None
        if user:
            if not settings.EMBEDDED:
                self.stderr.write(
                    "Refusing to create the demo login: DATABASE_URL is a real database."
                )
            else:
                demo, created = get_user_model().objects.get_or_create(
                    username="demo", defaults={"is_staff": True, "is_superuser": True}
                )
                if created:
                    demo.set_password("demo")
                    demo.save()
                Membership.objects.get_or_create(
                    project=project, user=demo, defaults={"role": Membership.Role.OWNER}
                )
        new = 0
        for path in sorted(DEMO_DIR.iterdir()):
            if path.is_file() and not path.name.endswith((".md", ".py")):
                _, created = ingest.store_trace(
                    project, path.read_bytes(), name=path.name, source=Trace.Source.DEMO
                )
                new += created
        new += load_versions(project, demo)
        self.stdout.write(f"demo project: {new} new sample trace(s) queued")


def load_versions(project: Project, user=None) -> int:
    """Store the runs of `demo/versions/manifest.json`, analyze them, and judge their issues.

    Each template file is stored once per day it lists, its times moved to that many days
    before the project was created, with the agent version it gives (the bytes depend only on
    that date, so loading twice stores nothing new). The runs are imported and analyzed here,
    entry by entry in the manifest's order (nothing else runs while `serve` seeds), so that
    after an entry with `"resolves": true` the loops of that agent's earlier runs can be
    resolved in the entry's version, by `user` (the demo login, or None), through the issues
    service, as a person would: the support-agent loop stays resolved (1.1 does not loop),
    the triage-bot loop, resolved in 2.1, comes back with 2.2 and shows regressed. An issue
    someone already judged is left alone. Returns how many traces were new."""
    folder = DEMO_DIR / "versions"
    anchor = datetime.combine(project.created_at.date(), time(9), tzinfo=project.created_at.tzinfo)
    new = 0
    earlier: dict[str, list[int]] = defaultdict(list)  # agent -> its traces loaded so far
    for entry in json.loads((folder / "manifest.json").read_text())["runs"]:
        events = [json.loads(line) for line in (folder / entry["file"]).read_text().splitlines()]
        traces = []
        for days in entry["days_ago"]:
            start = (anchor - timedelta(days=days)).timestamp()
            data = "".join(
                json.dumps({**event, "ts": start + event.get("ts", 0)}) + "\n" for event in events
            ).encode()
            name = f"{entry['agent']}-{entry['version']}-{days}d-ago.jsonl"
            trace, created = ingest.store_trace(
                project, data, name=name, source=Trace.Source.DEMO, version=entry["version"]
            )
            new += created
            traces.append(trace.pk)
            ingest.ingest_trace(trace.pk)  # nothing when it is in already
            for run_id in Run.objects.filter(
                trace_id=trace.pk, analyzed_at__isnull=True
            ).values_list("pk", flat=True):
                analysis.analyze_run(run_id)
        if entry.get("resolves"):
            _resolve(project, earlier[entry["agent"]], entry["version"], user)
        earlier[entry["agent"]] += traces
    return new


def _resolve(project: Project, trace_ids: list[int], version: str, user) -> None:
    """Resolve in `version` the open loop issues of these traces' runs nobody judged yet."""
    found = LoopIssue.objects.filter(
        project=project,
        state=LoopIssue.State.OPEN,
        state_changed_at__isnull=True,
        issue_runs__run__trace_id__in=trace_ids,
    ).distinct()
    for issue in found.order_by("pk"):
        issues.set_state(issue, "resolve", user=user, version=version)
