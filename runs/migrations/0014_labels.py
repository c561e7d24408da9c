# Placeholder in the migration chain; its owner fills in the operations.

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0013_loop_issues"),
    ]

    operations = []
