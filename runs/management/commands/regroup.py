"""Rebuild loop issues from the stored findings (all projects, or one)."""

from django.core.management.base import BaseCommand, CommandError

from runs.models import LoopIssue, Project
from runs.services import issues


class Command(BaseCommand):
    help = "Fingerprint every finding again and rebuild the loop issues; states are kept."

    def add_arguments(self, parser):
        parser.add_argument("--project", help="project slug; default all projects")

    def handle(self, *args, project, **options):
        projects = Project.objects.all()
        if project:
            projects = projects.filter(slug=project)
            if not projects.exists():
                raise CommandError(f"no project {project!r}")
        runs = issues.regroup(projects)
        count = LoopIssue.objects.filter(project__in=projects, finding_count__gt=0).count()
        self.stdout.write(f"regrouped {runs} run(s) into {count} issue(s)")
