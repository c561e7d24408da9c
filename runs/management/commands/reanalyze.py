"""Queue analysis again for runs (all, or one project's)."""

from django.core.management.base import BaseCommand
from django.db import transaction

from runs.models import Run
from runs.services import analysis


class Command(BaseCommand):
    help = "Re-run the detection engine over stored runs in the worker."

    def add_arguments(self, parser):
        parser.add_argument("--project", help="project slug; default all projects")
        parser.add_argument("--now", action="store_true", help="analyze here instead of queueing")

    def handle(self, *args, project, now, **options):
        runs = Run.objects.all()
        if project:
            runs = runs.filter(project__slug=project)
        if now:
            for run_id in runs.values_list("pk", flat=True):
                analysis.analyze_run(run_id)
            self.stdout.write(f"analyzed {runs.count()} run(s)")
            return
        with transaction.atomic():
            count = analysis.reanalyze(runs, bulk=True)
        self.stdout.write(f"queued {count} run(s)")
