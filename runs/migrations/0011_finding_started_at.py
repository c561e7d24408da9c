from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0010_step_status_invalid"),
    ]

    operations = [
        migrations.AddField(
            model_name="finding",
            name="started_at",
            field=models.PositiveIntegerField(blank=True, null=True),
        ),
    ]
