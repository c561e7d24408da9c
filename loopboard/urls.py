from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

from loopboard.api import api
from runs.api import otlp as otlp_http
from runs.web import settings_views as project_views
from runs.web import views as run_views

urlpatterns = [
    path("healthz", run_views.healthz, name="healthz"),
    path("accounts/login/", auth_views.LoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("admin/", admin.site.urls),
    # issue #6: JSON API, OTLP/HTTP receiver, project settings (API keys), raw downloads
    path("api/", api.urls),
    path("v1/traces", otlp_http.receive_traces, name="otlp_traces"),
    path(
        "projects/<slug:slug>/settings/",
        project_views.project_settings,
        name="project_settings",
    ),
    path(
        "projects/<slug:slug>/settings/keys/",
        project_views.create_key,
        name="project_key_create",
    ),
    path(
        "projects/<slug:slug>/settings/keys/<int:key_id>/revoke/",
        project_views.revoke_key,
        name="project_key_revoke",
    ),
    path("traces/<int:trace_id>/raw", project_views.trace_raw, name="trace_raw"),
    path("", include("runs.urls")),
]
