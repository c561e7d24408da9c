"""Store trace files into a project and queue their import, like an upload."""

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from runs.models import Project, Trace
from runs.services import ingest, uploads


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
        refused = 0
        for path in files:
            if not path.is_file():
                if not path.exists():
                    raise CommandError(f"{path}: no such file")
                continue
            try:
                with path.open("rb") as file:
                    trace, created = uploads.accept(
                        target, file, name=path.name, size=path.stat().st_size, format=format,
                        source=Trace.Source.CLI,
                    )  # fmt: skip
            except uploads.UploadRefused as exc:
                self.stderr.write(f"{path.parent}/{exc.message}")
                refused += 1
                continue
            state = "queued" if created else f"already stored ({trace.status})"
            self.stdout.write(f"{path}: trace {trace.pk} {state}")
        if refused:
            raise CommandError(f"{refused} of {len(files)} file(s) refused")
