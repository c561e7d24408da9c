"""Admin for every model; per-tool thresholds are editable in place."""

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest

from .models import ApiKey, Finding, Membership, PolicyChange, Project, Run, Step, ToolPolicy, Trace
from .services import access


class ProjectScopedAdmin(admin.ModelAdmin):
    """Staff who are not superusers see and change only the rows of their own projects.

    `project_path` is the lookup from the model to its project ("project", "run__project").
    Another project's row is simply not there: its change page answers 404-like "not found".
    """

    project_path = "project"

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        queryset = super().get_queryset(request)
        if request.user.is_superuser:
            return queryset
        lookup = "pk__in" if self.project_path == "" else f"{self.project_path}__in"
        return queryset.filter(**{lookup: access.projects_for(request.user)})

    def formfield_for_foreignkey(self, db_field, request, **kwargs):  # type: ignore[no-untyped-def]
        if db_field.related_model is Project and not request.user.is_superuser:
            kwargs["queryset"] = access.projects_for(request.user)
        elif db_field.related_model is Run and not request.user.is_superuser:
            kwargs["queryset"] = access.runs_for(request.user)
        elif db_field.related_model is Trace and not request.user.is_superuser:
            kwargs["queryset"] = access.traces_for(request.user).defer("raw")
        return super().formfield_for_foreignkey(db_field, request, **kwargs)


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 1


class ToolPolicyInline(admin.TabularInline):
    model = ToolPolicy
    extra = 0
    fields = ("tool", "warn", "stop", "max_repeats", "polling", "mutating", "quota", "volatile")


@admin.register(Project)
class ProjectAdmin(ProjectScopedAdmin):
    project_path = ""
    list_display = ("name", "slug", "created_at")
    prepopulated_fields = {"slug": ("name",)}
    inlines = [MembershipInline, ToolPolicyInline]


@admin.register(Membership)
class MembershipAdmin(ProjectScopedAdmin):
    list_display = ("user", "project", "role")
    list_filter = ("role", ("project", admin.RelatedOnlyFieldListFilter))


@admin.register(ApiKey)
class ApiKeyAdmin(ProjectScopedAdmin):
    list_display = ("name", "project", "prefix", "created_at", "last_used_at", "revoked_at")
    readonly_fields = ("prefix", "key_hash", "created_at", "last_used_at")
    list_filter = (("project", admin.RelatedOnlyFieldListFilter),)


@admin.register(Trace)
class TraceAdmin(ProjectScopedAdmin):
    list_display = ("name", "project", "format", "status", "size", "created_at")
    list_filter = ("status", "format", ("project", admin.RelatedOnlyFieldListFilter))
    search_fields = ("name", "sha256")
    exclude = ("raw",)
    readonly_fields = ("sha256", "size", "error", "warnings", "skipped_lines")


@admin.register(Run)
class RunAdmin(ProjectScopedAdmin):
    list_display = (
        "name",
        "project",
        "format",
        "verdict",
        "step_count",
        "tool_call_count",
        "stall_score",
    )
    list_filter = ("verdict", "format", ("project", admin.RelatedOnlyFieldListFilter))
    search_fields = ("name", "external_id")
    raw_id_fields = ("trace",)


@admin.register(Step)
class StepAdmin(ProjectScopedAdmin):
    project_path = "run__project"
    list_display = ("run", "seq", "kind", "tool", "status")
    list_filter = ("kind", "status")
    raw_id_fields = ("run",)
    search_fields = ("tool",)


@admin.register(Finding)
class FindingAdmin(ProjectScopedAdmin):
    project_path = "run__project"
    list_display = ("run", "detector", "severity", "tool", "count", "threshold", "fired_at")
    list_filter = ("detector", "severity")
    raw_id_fields = ("run",)


@admin.register(ToolPolicy)
class ToolPolicyAdmin(ProjectScopedAdmin):
    list_display = (
        "project",
        "tool",
        "warn",
        "stop",
        "max_repeats",
        "polling",
        "mutating",
        "quota",
    )
    list_editable = ("warn", "stop", "max_repeats", "polling", "mutating", "quota")
    list_filter = (("project", admin.RelatedOnlyFieldListFilter),)


@admin.register(PolicyChange)
class PolicyChangeAdmin(ProjectScopedAdmin):
    list_display = ("project", "user", "created_at", "summary", "reanalyzed")
    readonly_fields = ("project", "user", "created_at", "before", "after", "summary", "reanalyzed")
