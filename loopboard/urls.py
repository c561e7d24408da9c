"""The site's URLs: health check, login, admin, the JSON API, the OTLP receivers (traces,
logs, metrics), Prometheus metrics, the pages."""

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

from loopboard.api import api
from runs.api import metrics as metrics_http
from runs.api import otlp as otlp_http
from runs.web import health

urlpatterns = [
    path("healthz", health.healthz, name="healthz"),
    path("accounts/login/", auth_views.LoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("admin/", admin.site.urls),
    path("api/", api.urls),
    path("v1/traces", otlp_http.receive_traces, name="otlp_traces"),
    path("v1/logs", otlp_http.receive_logs, name="otlp_logs"),
    path("v1/metrics", otlp_http.receive_metrics, name="otlp_metrics"),
    path("metrics", metrics_http.metrics, name="metrics"),
    path("", include("runs.urls")),
]
