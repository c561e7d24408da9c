from django.apps import AppConfig


class RunsConfig(AppConfig):
    name = "runs"
    verbose_name = "Runs"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Register the tasks in every process, as Celery's worker does: `services/queue.py`
        # sends them by name, and a registered task is sent through its own options (and
        # runs inline in eager mode). The tasks import services, whose models need the app
        # registry, so this import waits until Django is ready.
        from runs import tasks  # noqa: F401
