from django.urls import path

from .web import views

app_name = "runs"

urlpatterns = [
    path("", views.run_list, name="list"),
    path("overview/", views.overview, name="overview"),
    path("runs/<int:run_id>/", views.run_detail, name="detail"),
    path("runs/<int:run_id>/live/", views.run_live, name="live"),
    path("runs/<int:run_id>/steps/<int:seq>/", views.step_detail, name="step"),
    path("runs/<int:run_id>/tree/", views.run_tree, name="tree"),
    path("runs/<int:run_id>/ledger/", views.run_ledger, name="ledger"),
    path("tuning/", views.tuning_index, name="tuning_index"),
    path("projects/<slug:slug>/tuning/", views.tuning_page, name="tuning"),
    path("projects/<slug:slug>/tuning/preview/", views.tuning_preview, name="tuning_preview"),
    path("upload/", views.upload, name="upload"),
    path("traces/<int:trace_id>/status/", views.trace_status, name="trace_status"),
    path("traces/<int:trace_id>/raw", views.trace_raw, name="trace_raw"),
    path("projects/<slug:slug>/settings/", views.project_settings, name="project_settings"),
    path("projects/<slug:slug>/settings/keys/", views.create_key, name="project_key_create"),
    path(
        "projects/<slug:slug>/settings/keys/<int:key_id>/revoke/",
        views.revoke_key,
        name="project_key_revoke",
    ),
]
