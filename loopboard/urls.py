"""The site's URLs: health check, login, admin, the JSON API, the OTLP receivers (traces,
logs, metrics), Prometheus metrics, the pages."""

from django.contrib import admin
from django.contrib.auth.views import LoginView, LogoutView
from django.urls import include, path

from loopboard.api import api
from runs.api import metrics, otlp
from runs.web import health

urlpatterns = [
    path("healthz", health.healthz, name="healthz"),
    path("accounts/login/", LoginView.as_view(), name="login"),
    path("accounts/logout/", LogoutView.as_view(), name="logout"),
    path("admin/", admin.site.urls),
    path("api/", api.urls),
    path("v1/traces", otlp.receive_traces, name="otlp_traces"),
    path("v1/logs", otlp.receive_logs, name="otlp_logs"),
    path("v1/metrics", otlp.receive_metrics, name="otlp_metrics"),
    path("metrics", metrics.metrics, name="metrics"),
    path("", include("runs.urls")),
]
