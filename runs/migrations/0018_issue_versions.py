"""IssueRun (one run's share of a loop issue) and IssueFacet (an issue's runs per agent,
model and agent version), filled from the findings grouped so far; an issue's first and last
run without a constraint in PostgreSQL (see LoopIssue)."""

import django.db.models.deletion
from django.db import migrations, models

# What `services.issues.refresh` does for every issue, frozen here in SQL as of this
# migration: one IssueRun row per (issue, run), then the facets from them.
BACKFILL = [
    """
    INSERT INTO runs_issuerun (issue_id, run_id, seen, findings, waste_steps, waste_tokens,
        waste_cost, waste_seconds, agent, model, version)
    SELECT f.issue_id, r.id, COALESCE(r.started_at, r.created_at), count(*),
        COALESCE(sum(f.waste_steps), 0), sum(f.waste_tokens), sum(f.waste_cost),
        sum(f.waste_seconds), r.agent, COALESCE(left(r.metadata->>'model', 200), ''),
        r.agent_version
    FROM runs_finding f JOIN runs_run r ON r.id = f.run_id
    WHERE f.issue_id IS NOT NULL
    GROUP BY f.issue_id, r.id
    """,
    """
    INSERT INTO runs_issuefacet (issue_id, kind, value, runs, findings)
    SELECT ir.issue_id, k.kind, k.value, count(*), sum(ir.findings)
    FROM runs_issuerun ir CROSS JOIN LATERAL (VALUES ('agent', ir.agent), ('model', ir.model),
        ('version', ir.version)) AS k(kind, value)
    GROUP BY 1, 2, 3
    """,
]


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0017_alert_rules"),
    ]

    operations = [
        migrations.CreateModel(
            name="IssueFacet",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                (
                    "kind",
                    models.CharField(
                        choices=[("agent", "Agent"), ("model", "Model"), ("version", "Version")],
                        max_length=7,
                    ),
                ),
                ("value", models.CharField(blank=True, max_length=200)),
                ("runs", models.PositiveIntegerField(default=0)),
                ("findings", models.PositiveIntegerField(default=0)),
                (
                    "issue",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="facets",
                        to="runs.loopissue",
                    ),
                ),
            ],
            options={
                "constraints": [
                    models.UniqueConstraint(
                        fields=("issue", "kind", "value"), name="one_issue_facet"
                    )
                ],
            },
        ),
        migrations.CreateModel(
            name="IssueRun",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("seen", models.DateTimeField()),
                ("findings", models.PositiveIntegerField(default=0)),
                ("waste_steps", models.PositiveBigIntegerField(default=0)),
                ("waste_tokens", models.BigIntegerField(blank=True, null=True)),
                ("waste_cost", models.FloatField(blank=True, null=True)),
                ("waste_seconds", models.FloatField(blank=True, null=True)),
                ("agent", models.CharField(blank=True, max_length=200)),
                ("model", models.CharField(blank=True, max_length=200)),
                ("version", models.CharField(blank=True, max_length=100)),
                (
                    "issue",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="issue_runs",
                        to="runs.loopissue",
                    ),
                ),
                (
                    "run",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="issue_runs",
                        to="runs.run",
                    ),
                ),
            ],
            options={
                "indexes": [models.Index(fields=["issue", "-seen", "-run"], name="issue_run_seen")],
                "constraints": [
                    models.UniqueConstraint(fields=("issue", "run"), name="one_issue_run")
                ],
            },
        ),
        migrations.RunSQL(BACKFILL, reverse_sql=migrations.RunSQL.noop),
        migrations.AlterField(
            model_name="loopissue",
            name="first_run",
            field=models.ForeignKey(
                blank=True,
                db_constraint=False,
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="+",
                to="runs.run",
            ),
        ),
        migrations.AlterField(
            model_name="loopissue",
            name="last_run",
            field=models.ForeignKey(
                blank=True,
                db_constraint=False,
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="+",
                to="runs.run",
            ),
        ),
    ]
