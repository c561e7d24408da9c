"""Create the `demo` project with the bundled sample traces (idempotent)."""

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
        self.stdout.write(f"demo project: {new} new sample trace(s) queued")
