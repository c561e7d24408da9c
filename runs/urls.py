from django.urls import path

from .web import compare, latency, storage, views

app_name = "runs"

urlpatterns = [
    path("", views.run_list, name="list"),
    path("overview/", views.overview, name="overview"),
    path("runs/<int:run_id>/", views.run_detail, name="detail"),
    path("runs/<int:run_id>/live/", views.run_live, name="live"),
    path("runs/<int:run_id>/steps/<int:seq>/", views.step_detail, name="step"),
    path("runs/<int:run_id>/tree/", views.run_tree, name="tree"),
    path("runs/<int:run_id>/ledger/", views.run_ledger, name="ledger"),
    path("runs/<int:run_id>/time/", latency.run_latency, name="latency"),
    path("runs/<int:run_id>/compare/", compare.compare_pick, name="compare_pick"),
    path("runs/<int:run_id>/compare/<int:other_id>/", compare.compare, name="compare"),
    path(
        "runs/<int:run_id>/compare/<int:other_id>/status/",
        compare.compare_status,
        name="compare_status",
    ),
    path(
        "runs/<int:run_id>/compare/<int:other_id>/cancel/",
        compare.compare_cancel,
        name="compare_cancel",
    ),
    path(
        "runs/<int:run_id>/compare/<int:other_id>/retry/",
        compare.compare_retry,
        name="compare_retry",
    ),
    path(
        "runs/<int:run_id>/findings/<int:finding_id>/label/",
        views.label_finding,
        name="label_finding",
    ),
    path("tuning/", views.tuning_index, name="tuning_index"),
    path("projects/<slug:slug>/tuning/", views.tuning_page, name="tuning"),
    path("projects/<slug:slug>/tuning/backtests/", views.backtest_start, name="backtest_start"),
    path("backtests/<int:job_id>/", views.backtest_status, name="backtest"),
    path("backtests/<int:job_id>/cancel/", views.backtest_cancel, name="backtest_cancel"),
    path("issues/", views.issue_list, name="issues"),
    path("issues/<int:issue_id>/", views.issue_detail, name="issue"),
    path("issues/<int:issue_id>/label/", views.label_issue, name="label_issue"),
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
    path(
        "projects/<slug:slug>/settings/channels/",
        views.alert_channel_create,
        name="alert_channel_create",
    ),
    path(
        "projects/<slug:slug>/settings/channels/<int:channel_id>/",
        views.alert_channel_action,
        name="alert_channel_action",
    ),
    path("projects/<slug:slug>/settings/rules/", views.alert_rule_save, name="alert_rule_create"),
    path(
        "projects/<slug:slug>/settings/rules/<int:rule_id>/",
        views.alert_rule_save,
        name="alert_rule_edit",
    ),
    path(
        "projects/<slug:slug>/settings/rules/<int:rule_id>/delete/",
        views.alert_rule_delete,
        name="alert_rule_delete",
    ),
    path(
        "projects/<slug:slug>/settings/timezone/",
        views.project_timezone,
        name="project_timezone",
    ),
    path("projects/<slug:slug>/storage/", storage.project_storage, name="project_storage"),
    path("projects/<slug:slug>/retention/", storage.retention_save, name="project_retention"),
    path(
        "projects/<slug:slug>/settings/deliveries/",
        views.alert_deliveries,
        name="alert_deliveries",
    ),
]
