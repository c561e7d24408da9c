"""Store trace files into a project and queue their import, like an upload."""

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from runs.models import Project, Trace
from runs.services import ingest


class Command(BaseCommand):
    help = "Upload trace files into a project (the worker imports and analyzes them)."

    def add_arguments(self, parser):
        parser.add_argument("paths", nargs="+", type=Path)
        parser.add_argument("--project", default="demo", help="project slug (created if missing)")
        parser.add_argument("--format", default="", choices=["", *ingest.formats()])

    def handle(self, *args, paths, project, format, **options):
        target, _ = Project.objects.get_or_create(slug=project, defaults={"name": project})
        files = [
            p for path in paths for p in ([path] if path.is_file() else sorted(path.rglob("*")))
        ]
        for path in files:
            if not path.is_file():
                if not path.exists():
                    raise CommandError(f"{path}: no such file")
                continue
            trace, created = ingest.store_trace(
                target, path.read_bytes(), name=path.name, format=format, source=Trace.Source.CLI
            )
            state = "queued" if created else f"already stored ({trace.status})"
            self.stdout.write(f"{path}: trace {trace.pk} {state}")
