from django.urls import path

from .web import views

app_name = "runs"

urlpatterns = [
    path("", views.run_list, name="list"),
    path("overview/", views.overview, name="overview"),
    path("runs/<int:run_id>/", views.run_detail, name="detail"),
    path("runs/<int:run_id>/steps/<int:seq>/", views.step_detail, name="step"),
    path("runs/<int:run_id>/tree/", views.run_tree, name="tree"),
    path("runs/<int:run_id>/ledger/", views.run_ledger, name="ledger"),
    path("tuning/", views.tuning_index, name="tuning_index"),
    path("projects/<slug:slug>/tuning/", views.tuning_page, name="tuning"),
    path("projects/<slug:slug>/tuning/preview/", views.tuning_preview, name="tuning_preview"),
    path("upload/", views.upload, name="upload"),
    path("traces/<int:trace_id>/status/", views.trace_status, name="trace_status"),
]
