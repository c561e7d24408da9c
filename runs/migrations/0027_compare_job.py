"""Compare jobs: two runs compared in the worker, with progress, kept while both stay the same."""

import django.db.models.deletion
import django.utils.timezone
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0026_retention_storage"),
    ]

    operations = [
        migrations.CreateModel(
            name="CompareJob",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("cache_key", models.CharField(max_length=64)),
                (
                    "status",
                    models.CharField(
                        choices=[
                            ("queued", "Queued"),
                            ("running", "Running"),
                            ("done", "Done"),
                            ("cancelled", "Cancelled"),
                            ("failed", "Failed"),
                        ],
                        default="queued",
                        max_length=9,
                    ),
                ),
                ("progress", models.FloatField(default=0)),
                ("phase", models.CharField(blank=True, max_length=40)),
                ("cancel_requested", models.BooleanField(default=False)),
                ("attempt", models.PositiveIntegerField(default=0)),
                ("heartbeat_at", models.DateTimeField(blank=True, null=True)),
                ("created_at", models.DateTimeField(default=django.utils.timezone.now)),
                ("started_at", models.DateTimeField(blank=True, null=True)),
                ("finished_at", models.DateTimeField(blank=True, null=True)),
                ("result", models.BinaryField(blank=True, null=True)),
                ("error", models.TextField(blank=True)),
                (
                    "left",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE, related_name="+", to="runs.run"
                    ),
                ),
                (
                    "project",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="compare_jobs",
                        to="runs.project",
                    ),
                ),
                (
                    "right",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE, related_name="+", to="runs.run"
                    ),
                ),
            ],
            options={
                "ordering": ["-created_at", "-id"],
                "constraints": [
                    models.UniqueConstraint(
                        fields=("left", "right", "cache_key"), name="one_compare_job_per_state"
                    )
                ],
            },
        ),
    ]
