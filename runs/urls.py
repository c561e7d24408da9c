from django.urls import path

from .web import (
    bulk,
    compare,
    find,
    issues,
    latency,
    overview,
    project_settings,
    run_list,
    run_page,
    storage,
    tuning,
    upload,
)

app_name = "runs"

urlpatterns = [
    path("", run_list.run_list, name="list"),
    path("runs/bulk/", bulk.bulk_runs, name="bulk"),
    path("overview/", overview.overview, name="overview"),
    path("runs/<int:run_id>/", run_page.run_detail, name="detail"),
    path("runs/<int:run_id>/live/", run_page.run_live, name="live"),
    path("runs/<int:run_id>/steps/<int:seq>/", run_page.step_detail, name="step"),
    path("runs/<int:run_id>/tree/", run_page.run_tree, name="tree"),
    path("runs/<int:run_id>/ledger/", run_page.run_ledger, name="ledger"),
    path("runs/<int:run_id>/time/", latency.run_latency, name="latency"),
    path("runs/<int:run_id>/find/", find.run_find, name="find"),
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
        run_page.label_finding,
        name="label_finding",
    ),
    path("tuning/", tuning.tuning_index, name="tuning_index"),
    path("projects/<slug:slug>/tuning/", tuning.tuning_page, name="tuning"),
    path("projects/<slug:slug>/tuning/backtests/", tuning.backtest_start, name="backtest_start"),
    path("backtests/<int:job_id>/", tuning.backtest_status, name="backtest"),
    path("backtests/<int:job_id>/cancel/", tuning.backtest_cancel, name="backtest_cancel"),
    path("issues/", issues.issue_list, name="issues"),
    path("issues/<int:issue_id>/", issues.issue_detail, name="issue"),
    path("issues/<int:issue_id>/label/", issues.label_issue, name="label_issue"),
    path("upload/", upload.upload, name="upload"),
    path("traces/<int:trace_id>/status/", upload.trace_status, name="trace_status"),
    path("traces/<int:trace_id>/raw", upload.trace_raw, name="trace_raw"),
    path(
        "projects/<slug:slug>/settings/", project_settings.project_settings, name="project_settings"
    ),
    path(
        "projects/<slug:slug>/settings/keys/",
        project_settings.create_key,
        name="project_key_create",
    ),
    path(
        "projects/<slug:slug>/settings/keys/<int:key_id>/revoke/",
        project_settings.revoke_key,
        name="project_key_revoke",
    ),
    path(
        "projects/<slug:slug>/settings/channels/",
        project_settings.alert_channel_create,
        name="alert_channel_create",
    ),
    path(
        "projects/<slug:slug>/settings/channels/<int:channel_id>/",
        project_settings.alert_channel_action,
        name="alert_channel_action",
    ),
    path(
        "projects/<slug:slug>/settings/rules/",
        project_settings.alert_rule_save,
        name="alert_rule_create",
    ),
    path(
        "projects/<slug:slug>/settings/rules/<int:rule_id>/",
        project_settings.alert_rule_save,
        name="alert_rule_edit",
    ),
    path(
        "projects/<slug:slug>/settings/rules/<int:rule_id>/delete/",
        project_settings.alert_rule_delete,
        name="alert_rule_delete",
    ),
    path(
        "projects/<slug:slug>/settings/timezone/",
        project_settings.project_timezone,
        name="project_timezone",
    ),
    path("projects/<slug:slug>/storage/", storage.project_storage, name="project_storage"),
    path("projects/<slug:slug>/retention/", storage.retention_save, name="project_retention"),
    path(
        "projects/<slug:slug>/settings/deliveries/",
        project_settings.alert_deliveries,
        name="alert_deliveries",
    ),
]
