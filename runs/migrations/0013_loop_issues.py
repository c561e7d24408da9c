"""Loop issues: findings grouped by fingerprint across runs, and the run's agent version."""

import django.contrib.postgres.fields
import django.contrib.postgres.indexes
import django.db.models.deletion
import django.utils.timezone
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0012_run_live"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AddField(
            model_name="trace",
            name="agent_version",
            field=models.CharField(blank=True, max_length=100),
        ),
        migrations.AddField(
            model_name="run",
            name="agent",
            field=models.CharField(blank=True, db_index=True, max_length=200),
        ),
        migrations.AddField(
            model_name="run",
            name="agent_version",
            field=models.CharField(blank=True, db_index=True, max_length=100),
        ),
        migrations.CreateModel(
            name="LoopIssue",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("fingerprint", models.CharField(max_length=16)),
                ("detector", models.CharField(max_length=40)),
                ("tool", models.CharField(blank=True, max_length=200)),
                ("title", models.CharField(max_length=300)),
                ("example_message", models.TextField(blank=True)),
                (
                    "state",
                    models.CharField(
                        choices=[
                            ("open", "Open"),
                            ("resolved", "Resolved"),
                            ("ignored", "Ignored"),
                            ("regressed", "Regressed"),
                        ],
                        default="open",
                        max_length=10,
                    ),
                ),
                ("resolved_in_version", models.CharField(blank=True, max_length=100)),
                ("state_changed_at", models.DateTimeField(blank=True, null=True)),
                ("created_at", models.DateTimeField(default=django.utils.timezone.now)),
                ("first_seen", models.DateTimeField(blank=True, null=True)),
                ("last_seen", models.DateTimeField(blank=True, null=True)),
                ("run_count", models.PositiveIntegerField(default=0)),
                ("finding_count", models.PositiveIntegerField(default=0)),
                ("waste_steps", models.PositiveBigIntegerField(default=0)),
                ("waste_tokens", models.BigIntegerField(blank=True, null=True)),
                ("waste_cost", models.FloatField(blank=True, null=True)),
                ("waste_seconds", models.FloatField(blank=True, null=True)),
                (
                    "agents",
                    django.contrib.postgres.fields.ArrayField(
                        base_field=models.CharField(max_length=200),
                        blank=True,
                        default=list,
                        size=None,
                    ),
                ),
                (
                    "models_seen",
                    django.contrib.postgres.fields.ArrayField(
                        base_field=models.CharField(max_length=200),
                        blank=True,
                        default=list,
                        size=None,
                    ),
                ),
                (
                    "versions",
                    django.contrib.postgres.fields.ArrayField(
                        base_field=models.CharField(max_length=100),
                        blank=True,
                        default=list,
                        size=None,
                    ),
                ),
                (
                    "first_run",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="+",
                        to="runs.run",
                    ),
                ),
                (
                    "last_run",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="+",
                        to="runs.run",
                    ),
                ),
                (
                    "project",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="loop_issues",
                        to="runs.project",
                    ),
                ),
                (
                    "state_changed_by",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
            ],
            options={
                "ordering": ["-last_seen", "-id"],
                "indexes": [
                    models.Index(fields=["project", "-last_seen", "-id"], name="issue_last_seen"),
                    models.Index(fields=["project", "-run_count", "-id"], name="issue_runs"),
                    models.Index(fields=["project", "-waste_steps", "-id"], name="issue_waste"),
                    django.contrib.postgres.indexes.GinIndex(
                        fields=["versions"], name="issue_versions_gin"
                    ),
                ],
                "constraints": [
                    models.UniqueConstraint(
                        fields=("project", "fingerprint"), name="one_issue_per_fingerprint"
                    )
                ],
            },
        ),
        migrations.CreateModel(
            name="IssueDay",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("day", models.DateField()),
                ("runs", models.PositiveIntegerField(default=0)),
                ("findings", models.PositiveIntegerField(default=0)),
                ("waste_steps", models.PositiveBigIntegerField(default=0)),
                (
                    "issue",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="days",
                        to="runs.loopissue",
                    ),
                ),
            ],
            options={
                "ordering": ["issue", "day"],
                "constraints": [
                    models.UniqueConstraint(fields=("issue", "day"), name="one_issue_day")
                ],
            },
        ),
        migrations.AddField(
            model_name="finding",
            name="fingerprint",
            field=models.CharField(blank=True, max_length=16),
        ),
        migrations.AddField(
            model_name="finding",
            name="issue",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="findings",
                to="runs.loopissue",
            ),
        ),
    ]
