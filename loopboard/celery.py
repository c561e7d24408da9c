"""The Celery app; workers start with `celery -A loopboard.celery worker`."""

import os

from celery import Celery

from loopboard import broker

broker.install()  # the embedded broker's filesystem transport, safe for several processes
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "loopboard.settings")

app = Celery("loopboard")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks(["runs"])
