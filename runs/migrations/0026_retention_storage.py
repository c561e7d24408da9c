"""Retention per project (NULL, keep for ever, on existing projects), raw bytes' encoding,
the runs whose steps expired, and each project's stored bytes by day."""

import django.db.models.deletion
import django.utils.timezone
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0025_otlp_span_key"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name="StorageDay",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("day", models.DateField()),
                ("raw_bytes", models.PositiveBigIntegerField(default=0)),
                ("step_bytes", models.PositiveBigIntegerField(default=0)),
                ("finding_bytes", models.PositiveBigIntegerField(default=0)),
                ("measured_at", models.DateTimeField(default=django.utils.timezone.now)),
            ],
            options={
                "ordering": ["project", "day"],
            },
        ),
        migrations.AddField(
            model_name="project",
            name="raw_retention_days",
            field=models.PositiveIntegerField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="project",
            name="run_retention_days",
            field=models.PositiveIntegerField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="project",
            name="step_retention_days",
            field=models.PositiveIntegerField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="project",
            name="storage_budget_bytes",
            field=models.PositiveBigIntegerField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="run",
            name="steps_expired_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="trace",
            name="raw_encoding",
            field=models.CharField(blank=True, max_length=8),
        ),
        migrations.AddField(
            model_name="trace",
            name="raw_expired_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddIndex(
            model_name="trace",
            index=models.Index(
                condition=models.Q(("raw_expired_at", None)),
                fields=["project", "created_at"],
                name="trace_raw_kept",
            ),
        ),
        migrations.AddField(
            model_name="storageday",
            name="project",
            field=models.ForeignKey(
                on_delete=django.db.models.deletion.CASCADE,
                related_name="storage_days",
                to="runs.project",
            ),
        ),
        migrations.AddConstraint(
            model_name="storageday",
            constraint=models.UniqueConstraint(fields=("project", "day"), name="one_storage_day"),
        ),
        # New projects get the default; existing ones keep everything (NULL) until chosen.
        migrations.AlterField(
            model_name="project",
            name="raw_retention_days",
            field=models.PositiveIntegerField(blank=True, default=30, null=True),
        ),
        # New projects get the default; existing ones keep everything (NULL) until chosen.
        migrations.AlterField(
            model_name="project",
            name="run_retention_days",
            field=models.PositiveIntegerField(blank=True, default=365, null=True),
        ),
        # New projects get the default; existing ones keep everything (NULL) until chosen.
        migrations.AlterField(
            model_name="project",
            name="step_retention_days",
            field=models.PositiveIntegerField(blank=True, default=90, null=True),
        ),
    ]
