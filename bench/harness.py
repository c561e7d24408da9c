"""What the benchmarks that run Django share: the bench database, set up and migrated.

bench_pages.py names the bench database (`bench_database_url`: the configured one's name +
"_bench", created when missing); a script calls `setup_django` before it imports models.
"""

from __future__ import annotations

import os

from bench_pages import bench_database_url


def setup_django() -> None:
    """Point Django at the bench database, set Django up and migrate the database."""
    os.environ["DATABASE_URL"] = bench_database_url()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "loopboard.settings")
    os.environ.setdefault("SECRET_KEY", "bench")
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
