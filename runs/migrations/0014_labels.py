"""Labels: people's judgements of findings (real loop / false alarm and why)."""

import django.db.models.deletion
import django.utils.timezone
from django.conf import settings
from django.db import migrations, models

# Label.finding is DO_NOTHING without a constraint to Django; PostgreSQL sets it NULL.
FINDING_SET_NULL = """
ALTER TABLE runs_label ADD CONSTRAINT label_finding_set_null FOREIGN KEY (finding_id)
    REFERENCES runs_finding (id) ON DELETE SET NULL
"""


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0013_loop_issues"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name="Label",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("detector", models.CharField(max_length=40)),
                ("tool", models.CharField(blank=True, max_length=200)),
                ("signature", models.CharField(blank=True, max_length=200)),
                ("fingerprint", models.CharField(blank=True, max_length=64)),
                (
                    "severity",
                    models.CharField(
                        choices=[("info", "Info"), ("warn", "Warn"), ("stop", "Stop")], max_length=5
                    ),
                ),
                ("fired_at", models.PositiveIntegerField(default=0)),
                ("started_at", models.PositiveIntegerField(blank=True, null=True)),
                ("seq_first", models.PositiveIntegerField(blank=True, null=True)),
                ("seq_last", models.PositiveIntegerField(blank=True, null=True)),
                (
                    "verdict",
                    models.CharField(
                        choices=[("real", "real loop"), ("false", "false alarm")], max_length=5
                    ),
                ),
                (
                    "reason",
                    models.CharField(
                        blank=True,
                        choices=[
                            ("polling", "polling"),
                            ("paging", "paging"),
                            ("batch", "batch work"),
                            ("edit-recheck", "edit and re-check"),
                            ("other", "other"),
                        ],
                        max_length=12,
                    ),
                ),
                ("text", models.CharField(blank=True, max_length=500)),
                ("created_at", models.DateTimeField(default=django.utils.timezone.now)),
                ("policy_version", models.PositiveIntegerField(default=0)),
                (
                    "finding",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        db_constraint=False,
                        on_delete=django.db.models.deletion.DO_NOTHING,
                        related_name="labels",
                        to="runs.finding",
                    ),
                ),
                (
                    "project",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="labels",
                        to="runs.project",
                    ),
                ),
                (
                    "run",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="labels",
                        to="runs.run",
                    ),
                ),
                (
                    "user",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
            ],
            options={
                "ordering": ["-created_at", "-id"],
                "indexes": [
                    models.Index(fields=["run", "-created_at"], name="label_run_newest"),
                    models.Index(fields=["project", "created_at"], name="label_project_time"),
                ],
            },
        ),
        migrations.RunSQL(
            FINDING_SET_NULL, "ALTER TABLE runs_label DROP CONSTRAINT label_finding_set_null"
        ),
    ]
