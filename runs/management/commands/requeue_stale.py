"""Queue again the traces and runs that a dead worker left unfinished."""

from datetime import timedelta

from django.core.management.base import BaseCommand

from runs.services import recovery


class Command(BaseCommand):
    help = "Queue again traces stuck in received/parsing and runs still pending analysis."

    def add_arguments(self, parser):
        parser.add_argument(
            "--older-than",
            type=int,
            default=None,
            metavar="SECONDS",
            help="only items untouched this long (default: LOOPBOARD_STALE_SECONDS)",
        )

    def handle(self, *args, older_than, **options):
        age = None if older_than is None else timedelta(seconds=older_than)
        traces, runs = recovery.requeue_stale(older_than=age)
        self.stdout.write(f"queued {traces} trace(s) and {runs} run(s) again")
