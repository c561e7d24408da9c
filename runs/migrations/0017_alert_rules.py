"""Alert rules, the alerts they fired and every delivery attempt."""

import django.contrib.postgres.fields
import django.db.models.deletion
import django.utils.timezone
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0016_channels"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name="AlertRule",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("name", models.CharField(max_length=100)),
                (
                    "kind",
                    models.CharField(
                        choices=[
                            ("run", "a run reaches stop or warn"),
                            ("issue", "a loop issue is new or regressed"),
                            ("rate", "a windowed rate crosses a threshold"),
                            ("digest", "a daily digest"),
                        ],
                        max_length=6,
                    ),
                ),
                ("enabled", models.BooleanField(default=True)),
                (
                    "severity",
                    models.CharField(
                        choices=[("warn", "Warn"), ("stop", "Stop")], default="stop", max_length=4
                    ),
                ),
                (
                    "tools",
                    django.contrib.postgres.fields.ArrayField(
                        base_field=models.CharField(max_length=200), blank=True, default=list
                    ),
                ),
                (
                    "agents",
                    django.contrib.postgres.fields.ArrayField(
                        base_field=models.CharField(max_length=200), blank=True, default=list
                    ),
                ),
                (
                    "detectors",
                    django.contrib.postgres.fields.ArrayField(
                        base_field=models.CharField(max_length=40), blank=True, default=list
                    ),
                ),
                ("max_per_hour", models.PositiveIntegerField(default=10)),
                (
                    "metric",
                    models.CharField(
                        blank=True,
                        choices=[
                            ("flagged_share", "flagged runs as a share of runs (0–1)"),
                            ("waste_cost_per_hour", "waste cost per hour"),
                            ("waste_tokens_per_hour", "waste tokens per hour"),
                            ("stop_findings_per_hour", "stop findings per hour"),
                        ],
                        max_length=24,
                    ),
                ),
                ("window_minutes", models.PositiveIntegerField(default=60)),
                ("warn_threshold", models.FloatField(blank=True, null=True)),
                ("alert_threshold", models.FloatField(blank=True, null=True)),
                (
                    "no_data",
                    models.CharField(
                        choices=[
                            ("ok", "counts as ok"),
                            ("alert", "counts as alert"),
                            ("keep", "keeps the last level"),
                        ],
                        default="ok",
                        max_length=5,
                    ),
                ),
                (
                    "state",
                    models.CharField(
                        choices=[("ok", "Ok"), ("warn", "Warn"), ("alert", "Alert")],
                        default="ok",
                        max_length=5,
                    ),
                ),
                ("state_changed_at", models.DateTimeField(blank=True, null=True)),
                ("hour", models.PositiveSmallIntegerField(default=9)),
                ("created_at", models.DateTimeField(default=django.utils.timezone.now)),
                (
                    "created_by",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
                (
                    "project",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="alert_rules",
                        to="runs.project",
                    ),
                ),
                (
                    "channels",
                    models.ManyToManyField(blank=True, related_name="rules", to="runs.channel"),
                ),
            ],
            options={
                "ordering": ["project", "name", "id"],
                "indexes": [
                    models.Index(fields=["kind", "enabled"], name="alertrule_kind_enabled")
                ],
            },
        ),
        migrations.CreateModel(
            name="Alert",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("key", models.CharField(max_length=200)),
                ("payload", models.JSONField(default=dict)),
                ("held", models.BooleanField(default=False)),
                ("created_at", models.DateTimeField(default=django.utils.timezone.now)),
                (
                    "summed_into",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="summed",
                        to="runs.alert",
                    ),
                ),
                (
                    "rule",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="alerts",
                        to="runs.alertrule",
                    ),
                ),
            ],
            options={
                "ordering": ["-created_at", "-id"],
                "indexes": [models.Index(fields=["rule", "-created_at"], name="alert_rule_newest")],
                "constraints": [
                    models.UniqueConstraint(fields=("rule", "key"), name="one_alert_per_rule_key")
                ],
            },
        ),
        migrations.CreateModel(
            name="Delivery",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("attempt", models.PositiveSmallIntegerField(default=1)),
                (
                    "status",
                    models.CharField(
                        choices=[
                            ("sent", "Sent"),
                            ("failed", "Failed"),
                            ("retrying", "Retrying"),
                            ("gave_up", "Gave Up"),
                        ],
                        max_length=8,
                    ),
                ),
                ("response_code", models.PositiveSmallIntegerField(blank=True, null=True)),
                ("error", models.TextField(blank=True)),
                ("payload_sha256", models.CharField(max_length=64)),
                ("created_at", models.DateTimeField(default=django.utils.timezone.now)),
                (
                    "alert",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="deliveries",
                        to="runs.alert",
                    ),
                ),
                (
                    "channel",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="deliveries",
                        to="runs.channel",
                    ),
                ),
            ],
            options={
                "verbose_name_plural": "deliveries",
                "ordering": ["-created_at", "-id"],
                "indexes": [
                    models.Index(fields=["channel", "-created_at"], name="delivery_channel_newest"),
                    models.Index(fields=["alert", "channel"], name="delivery_alert_channel"),
                ],
            },
        ),
    ]
