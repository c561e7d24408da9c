"""`manage.py create_api_key PROJECT NAME`: issue a project API key and print it (once)."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError, CommandParser

from runs.models import ApiKey, Project
from runs.services import api_keys


class Command(BaseCommand):
    help = "Create an API key for a project (by slug or id) and print it; it is shown once."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("project", help="project slug or id")
        parser.add_argument("name", help="what the key is for, e.g. CI")
        parser.add_argument(
            "--scope",
            choices=ApiKey.Scope.values,
            default=ApiKey.Scope.ADMIN,
            help="what the key may do (default: admin, as the operator running this)",
        )

    def handle(self, *args, project: str, name: str, scope: str, **options) -> None:
        found = Project.objects.filter(slug=project).first()
        if found is None and project.isdigit():
            found = Project.objects.filter(pk=int(project)).first()
        if found is None:
            raise CommandError(f"no project {project!r}")
        if not name.strip():
            raise CommandError("the key needs a name")
        row, key = api_keys.create_key(found, name.strip(), scope=scope)
        self.stderr.write(
            f"Created {row.scope} key {row.name!r} for project {found.slug} (shown once):"
        )
        self.stdout.write(key)
