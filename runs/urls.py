from django.urls import path

from . import views

app_name = "runs"

urlpatterns = [
    path("", views.run_list, name="list"),
    path("runs/<int:run_id>/", views.run_detail, name="detail"),
    path("upload/", views.upload, name="upload"),
    path("traces/<int:trace_id>/status/", views.trace_status, name="trace_status"),
]
