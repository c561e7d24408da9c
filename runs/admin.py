"""Admin for every model; per-tool thresholds are editable in place."""

from django.contrib import admin

from .models import ApiKey, Finding, Membership, PolicyChange, Project, Run, Step, ToolPolicy, Trace


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 1


class ToolPolicyInline(admin.TabularInline):
    model = ToolPolicy
    extra = 0
    fields = ("tool", "warn", "stop", "max_repeats", "polling", "mutating", "quota", "volatile")


@admin.register(Project)
class ProjectAdmin(admin.ModelAdmin):
    list_display = ("name", "slug", "created_at")
    prepopulated_fields = {"slug": ("name",)}
    inlines = [MembershipInline, ToolPolicyInline]


@admin.register(Membership)
class MembershipAdmin(admin.ModelAdmin):
    list_display = ("user", "project", "role")
    list_filter = ("role", "project")


@admin.register(ApiKey)
class ApiKeyAdmin(admin.ModelAdmin):
    list_display = ("name", "project", "prefix", "created_at", "last_used_at", "revoked_at")
    readonly_fields = ("prefix", "key_hash", "created_at", "last_used_at")
    list_filter = ("project",)


@admin.register(Trace)
class TraceAdmin(admin.ModelAdmin):
    list_display = ("name", "project", "format", "status", "size", "created_at")
    list_filter = ("status", "format", "project")
    search_fields = ("name", "sha256")
    exclude = ("raw",)
    readonly_fields = ("sha256", "size", "error", "warnings", "skipped_lines")


@admin.register(Run)
class RunAdmin(admin.ModelAdmin):
    list_display = (
        "name",
        "project",
        "format",
        "verdict",
        "step_count",
        "tool_call_count",
        "stall_score",
    )
    list_filter = ("verdict", "format", "project")
    search_fields = ("name", "external_id")
    raw_id_fields = ("trace",)


@admin.register(Step)
class StepAdmin(admin.ModelAdmin):
    list_display = ("run", "seq", "kind", "tool", "status")
    list_filter = ("kind", "status")
    raw_id_fields = ("run",)
    search_fields = ("tool",)


@admin.register(Finding)
class FindingAdmin(admin.ModelAdmin):
    list_display = ("run", "detector", "severity", "tool", "count", "threshold", "fired_at")
    list_filter = ("detector", "severity")
    raw_id_fields = ("run",)


@admin.register(ToolPolicy)
class ToolPolicyAdmin(admin.ModelAdmin):
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
    list_filter = ("project",)


@admin.register(PolicyChange)
class PolicyChangeAdmin(admin.ModelAdmin):
    list_display = ("project", "user", "created_at", "summary", "reanalyzed")
    readonly_fields = ("project", "user", "created_at", "before", "after", "summary", "reanalyzed")
