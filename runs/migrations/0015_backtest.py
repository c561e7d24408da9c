import django.db.models.deletion
import django.utils.timezone
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0014_labels"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name="BacktestJob",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("kind", models.CharField(choices=[("manual", "Manual"), ("nightly", "Nightly")], default="manual", max_length=8)),
                ("draft", models.JSONField(default=dict)),
                ("baseline", models.JSONField(default=dict)),
                ("policy_version", models.PositiveIntegerField(default=0)),
                ("since", models.DateTimeField()),
                ("until", models.DateTimeField()),
                ("sample", models.PositiveIntegerField(blank=True, null=True)),
                ("night", models.DateField(blank=True, null=True)),
                ("status", models.CharField(choices=[("queued", "Queued"), ("running", "Running"), ("done", "Done"), ("cancelled", "Cancelled"), ("failed", "Failed")], default="queued", max_length=9)),
                ("done", models.PositiveIntegerField(default=0)),
                ("total", models.PositiveIntegerField(default=0)),
                ("cancel_requested", models.BooleanField(default=False)),
                ("cursor", models.BigIntegerField(default=0)),
                ("attempt", models.PositiveIntegerField(default=0)),
                ("heartbeat_at", models.DateTimeField(blank=True, null=True)),
                ("created_at", models.DateTimeField(default=django.utils.timezone.now)),
                ("started_at", models.DateTimeField(blank=True, null=True)),
                ("finished_at", models.DateTimeField(blank=True, null=True)),
                ("results", models.JSONField(blank=True, default=dict)),
                ("error", models.TextField(blank=True)),
                ("project", models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name="backtests", to="runs.project")),
                ("user", models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, to=settings.AUTH_USER_MODEL)),
            ],
            options={
                "ordering": ["-created_at", "-id"],
                "indexes": [
                    models.Index(fields=["project", "kind", "-created_at"], name="backtest_project_kind"),
                    models.Index(condition=models.Q(("status__in", ["queued", "running"])), fields=["heartbeat_at"], name="backtest_unfinished"),
                ],
                "constraints": [
                    models.UniqueConstraint(condition=models.Q(("kind", "nightly")), fields=("project", "night"), name="one_nightly_backtest_per_night"),
                ],
            },
        ),
    ]  # fmt: skip
