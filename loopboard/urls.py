from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

from runs import views as run_views

urlpatterns = [
    path("healthz", run_views.healthz, name="healthz"),
    path("accounts/login/", auth_views.LoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("admin/", admin.site.urls),
    path("", include("runs.urls")),
]
