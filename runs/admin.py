"""Admin for every model. Policy rows are saved through the policy service, as on Tuning."""

from django import forms
from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html

from .models import (
    Alert,
    AlertRule,
    ApiKey,
    Channel,
    Delivery,
    Finding,
    Label,
    LoopIssue,
    Membership,
    PolicyChange,
    Project,
    Run,
    Step,
    StoppedCall,
    ToolPolicy,
    Trace,
)
from .services import access, deletion, issues, policy


class ProjectScopedAdmin(admin.ModelAdmin):
    """Staff who are not superusers see and change only the rows of their own projects.

    `project_path` is the lookup from the model to its project ("project", "run__project").
    Another project's row is simply not there: its change page answers 404-like "not found".
    """

    project_path = "project"

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        queryset = super().get_queryset(request)
        lookup = "pk__in" if self.project_path == "" else f"{self.project_path}__in"
        return queryset.filter(**{lookup: access.admin_projects_for(request.user)})

    def formfield_for_foreignkey(self, db_field, request, **kwargs):  # type: ignore[no-untyped-def]
        projects = access.admin_projects_for(request.user)
        if db_field.related_model is Project:
            kwargs["queryset"] = projects
        elif db_field.related_model is Run:
            kwargs["queryset"] = Run.objects.filter(project__in=projects)
        elif db_field.related_model is Trace:
            kwargs["queryset"] = Trace.objects.filter(project__in=projects).defer("raw")
        return super().formfield_for_foreignkey(db_field, request, **kwargs)


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 1


class ToolPolicyInline(admin.TabularInline):
    """The project's policy rows, read-only: they change on their own admin page or Tuning."""

    model = ToolPolicy
    extra = 0
    fields = ("tool", "warn", "stop", "max_repeats", "polling", "mutating", "quota", "volatile")
    readonly_fields = fields
    can_delete = False
    show_change_link = True

    def has_add_permission(self, request: HttpRequest, obj=None) -> bool:  # type: ignore[no-untyped-def]
        return False


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

    def delete_model(self, request: HttpRequest, obj: Trace) -> None:
        deletion.delete_traces(Trace.objects.filter(pk=obj.pk))

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet) -> None:
        deletion.delete_traces(queryset)


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

    def delete_model(self, request: HttpRequest, obj: Run) -> None:
        deletion.delete_runs(Run.objects.filter(pk=obj.pk))

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet) -> None:
        deletion.delete_runs(queryset)


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
    raw_id_fields = ("run", "issue")


@admin.register(LoopIssue)
class LoopIssueAdmin(ProjectScopedAdmin):
    """Loop issues, read-only but for their state, which the actions set (as the issue page
    does, through `services.issues.set_state`)."""

    list_display = ("title", "project", "state", "run_count", "finding_count", "last_seen")
    list_filter = ("state", "detector", ("project", admin.RelatedOnlyFieldListFilter))
    search_fields = ("title", "tool", "fingerprint")
    readonly_fields = [field.name for field in LoopIssue._meta.fields]
    actions = ["resolve", "ignore", "reopen"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def _set(self, request: HttpRequest, queryset: QuerySet, state: str) -> None:
        """Set the state of the selected issues the user may change (as on the issue page)."""
        selected = list(queryset.select_related("project"))
        for issue in selected:
            access.require(request.user, issue.project, access.CHANGE_ISSUE_STATE)
        for issue in selected:
            issues.set_state(issue, state, user=request.user)
        self.message_user(request, f"{len(selected)} issue(s) set to {state}")

    @admin.action(description="Resolve the selected issues", permissions=["change"])
    def resolve(self, request: HttpRequest, queryset: QuerySet) -> None:
        self._set(request, queryset, "resolved")

    @admin.action(description="Ignore the selected issues", permissions=["change"])
    def ignore(self, request: HttpRequest, queryset: QuerySet) -> None:
        self._set(request, queryset, "ignored")

    @admin.action(description="Reopen the selected issues", permissions=["change"])
    def reopen(self, request: HttpRequest, queryset: QuerySet) -> None:
        self._set(request, queryset, "open")


@admin.register(Label)
class LabelAdmin(ProjectScopedAdmin):
    """People's judgements of findings, as made on the run page (read-only here)."""

    list_display = ("created_at", "verdict", "reason", "detector", "tool", "run", "user")
    list_filter = ("verdict", "reason", "detector", ("project", admin.RelatedOnlyFieldListFilter))
    search_fields = ("tool", "text", "run__name", "run__external_id", "user__username")
    date_hierarchy = "created_at"
    list_select_related = ("run", "user")
    readonly_fields = [field.name for field in Label._meta.fields]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False


class ToolPolicyForm(forms.ModelForm):
    """One policy row, checked as part of the whole project policy it would make."""

    class Meta:
        model = ToolPolicy
        fields = ("project", "tool", *ToolPolicy.FIELDS)

    def clean(self) -> dict:
        data = super().clean()
        project = data.get("project") or getattr(self.instance, "project", None)
        if project is None or self.errors:
            return data
        old_tool = self.instance.tool if self.instance.pk else None
        values = {name: data.get(name) for name in ToolPolicy.FIELDS}
        self.policy = policy.with_row(project, old_tool, data.get("tool") or "", values)
        try:
            policy.validate(self.policy)
        except ValueError as exc:
            message = f"This row would make the project policy invalid: {exc}"
            raise forms.ValidationError(message) from None
        return data


@admin.register(ToolPolicy)
class ToolPolicyAdmin(ProjectScopedAdmin):
    """Saving or deleting a row replaces the project policy through `policy.save_policy`:
    validated, recorded as a policy change, and the affected runs re-analyzed."""

    form = ToolPolicyForm
    list_display = ("project", "tool", "warn", "stop", "max_repeats", "polling", "mutating",
                    "quota", "tuning_link")  # fmt: skip
    list_filter = (("project", admin.RelatedOnlyFieldListFilter),)

    @admin.display(description="Tuning")
    def tuning_link(self, row: ToolPolicy) -> str:
        url = reverse("runs:tuning", args=[row.project.slug])
        return format_html('<a href="{}">tune and back-test</a>', url)

    def get_readonly_fields(self, request: HttpRequest, obj=None):  # type: ignore[no-untyped-def]
        return ("project",) if obj is not None else ()

    def save_model(self, request: HttpRequest, obj: ToolPolicy, form, change: bool) -> None:  # type: ignore[no-untyped-def]
        policy.save_policy(obj.project, form.policy, request.user)
        saved = ToolPolicy.objects.get(project=obj.project, tool=obj.tool)
        obj.pk, obj.updated_at = saved.pk, saved.updated_at

    def delete_model(self, request: HttpRequest, obj: ToolPolicy) -> None:
        policy.save_policy(obj.project, policy.without_row(obj.project, obj.tool), request.user)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet) -> None:
        for row in queryset.select_related("project"):
            self.delete_model(request, row)


@admin.register(PolicyChange)
class PolicyChangeAdmin(ProjectScopedAdmin):
    list_display = ("project", "user", "created_at", "summary", "reanalyzed")
    readonly_fields = ("project", "user", "created_at", "before", "after", "summary", "reanalyzed")


class ViewOnlyAdmin(ProjectScopedAdmin):
    """Alerts are changed on the project settings page and through the API, where their
    validation lives (`services.channels`, `services.alerts.save_rule`); here they are only
    seen, and deleted."""

    def has_add_permission(self, request: HttpRequest, obj=None) -> bool:  # type: ignore[no-untyped-def]
        return False

    def has_change_permission(self, request: HttpRequest, obj=None) -> bool:  # type: ignore[no-untyped-def]
        return False


@admin.register(Channel)
class ChannelAdmin(ViewOnlyAdmin):
    list_display = ("name", "project", "kind", "hint", "enabled", "created_at")
    list_filter = ("kind", "enabled", ("project", admin.RelatedOnlyFieldListFilter))
    exclude = ("url_encrypted", "secret_encrypted")  # never shown again after saving


@admin.register(AlertRule)
class AlertRuleAdmin(ViewOnlyAdmin):
    list_display = ("name", "project", "kind", "enabled", "severity", "metric", "state")
    list_filter = ("kind", "enabled", ("project", admin.RelatedOnlyFieldListFilter))


@admin.register(Alert)
class AlertAdmin(ViewOnlyAdmin):
    project_path = "rule__project"
    list_display = ("key", "rule", "held", "created_at")
    list_filter = ("held",)
    raw_id_fields = ("rule", "summed_into")


@admin.register(Delivery)
class DeliveryAdmin(ViewOnlyAdmin):
    project_path = "channel__project"
    list_display = ("alert", "channel", "attempt", "status", "response_code", "created_at")
    list_filter = ("status",)
    raw_id_fields = ("alert", "channel")


@admin.register(StoppedCall)
class StoppedCallAdmin(ViewOnlyAdmin):
    """What the live guard stopped: kept by the check, only seen here."""

    project_path = "run__project"
    list_display = ("run", "tool", "before_seq", "times", "last_at")
    list_filter = ("tool",)
    raw_id_fields = ("run",)
