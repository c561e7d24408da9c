"""The Overview's runs per day: an index on (project, the day of the run's own start).

Built concurrently, so a large runs table keeps taking writes while it is made. At 10.5M
steps (bench/bench_scale.py) the per-day query went from 955 ms to 196 ms.
"""

from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models
from django.db.models.functions import Coalesce, TruncDate


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("runs", "0028_raw_store"),
    ]

    operations = [
        AddIndexConcurrently(
            model_name="run",
            index=models.Index(
                models.F("project"),
                TruncDate(Coalesce("started_at", "created_at")),
                name="run_project_day",
            ),
        ),
    ]
