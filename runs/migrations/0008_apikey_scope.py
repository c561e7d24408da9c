from django.db import migrations, models

SCOPES = [
    ("read", "read: runs, findings, policy, the live check"),
    ("ingest", "ingest: read, and send traces"),
    ("admin", "admin: ingest, and change the policy and re-analyze"),
]


class Migration(migrations.Migration):
    """Keys made before scopes could do everything: they become admin keys."""

    dependencies = [("runs", "0007_otlp_group_request")]

    operations = [
        migrations.AddField(
            model_name="apikey",
            name="scope",
            field=models.CharField(choices=SCOPES, default="admin", max_length=6),
        ),
        migrations.AlterField(
            model_name="apikey",
            name="scope",
            field=models.CharField(choices=SCOPES, default="ingest", max_length=6),
        ),
    ]
