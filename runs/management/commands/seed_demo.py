"""Create the `demo` project with the bundled sample traces (idempotent)."""

import json
from datetime import datetime, time, timedelta
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand

from runs.models import Membership, Project, Trace
from runs.services import ingest

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
        new += load_versions(project)
        self.stdout.write(f"demo project: {new} new sample trace(s) queued")


def load_versions(project: Project) -> int:
    """Store the runs of `demo/versions/manifest.json`: each template file once per day it
    lists, its times moved to that many days before the project was created, with the
    agent version it gives. The bytes depend only on that date, so loading is idempotent."""
    folder = DEMO_DIR / "versions"
    anchor = datetime.combine(project.created_at.date(), time(9), tzinfo=project.created_at.tzinfo)
    new = 0
    for entry in json.loads((folder / "manifest.json").read_text())["runs"]:
        events = [json.loads(line) for line in (folder / entry["file"]).read_text().splitlines()]
        for days in entry["days_ago"]:
            start = (anchor - timedelta(days=days)).timestamp()
            data = "".join(
                json.dumps({**event, "ts": start + event.get("ts", 0)}) + "\n" for event in events
            ).encode()
            name = f"{entry['agent']}-{entry['version']}-{days}d-ago.jsonl"
            _, created = ingest.store_trace(
                project, data, name=name, source=Trace.Source.DEMO, version=entry["version"]
            )
            new += created
    return new
