"""A project's settings page: its API keys, how to send traces, and its alert channels,
rules, time zone and delivery log (owners change them; members see them)."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST
from django.views.decorators.vary import vary_on_headers

from ..models import AlertRule, ApiKey, Project
from ..services import access, alerts, api_keys, channels, delivery, digest
from .alerts import ChannelForm, RuleForm, delivery_log, settings_context
from .params import int_param


@require_GET
@login_required
def project_settings(request: HttpRequest, slug: str) -> HttpResponse:
    """A project's settings: its API keys (create, revoke), how to send traces, and its alert
    channels, rules (?rule=<id> edits one) and delivery log."""
    project = access.get_project(request.user, slug)
    rule_form = None
    if rule_id := int_param(request.GET.get("rule"), None):
        rule = get_object_or_404(project.alert_rules, pk=rule_id)
        rule_form = RuleForm(prefix="rule", project=project, instance=rule)
    return settings_page(request, project, rule_form=rule_form)


def settings_page(
    request: HttpRequest, project: Project, *, rule_form=None, status: int = 200
) -> HttpResponse:
    context = {
        "project": project,
        "keys": project.api_keys.select_related("created_by"),
        "scopes": [(s, ApiKey.Scope(s).label) for s in access.key_scopes_for(request.user)],
        "new_key": request.session.pop("new_api_key", None),
        "new_channel_secret": request.session.pop("new_channel_secret", None),
        "otlp_url": request.build_absolute_uri("/v1/traces"),
        "api_url": request.build_absolute_uri("/api/"),
        **settings_context(project, request.user, rule_form=rule_form),
    }
    return render(request, "runs/project_settings.html", context, status=status)


@require_POST
@login_required
def create_key(request: HttpRequest, slug: str) -> HttpResponse:
    """Issue a key; its plain value is shown once, on the next page load."""
    project = access.get_project(request.user, slug)
    name = request.POST.get("name", "").strip()[:100]
    scope = request.POST.get("scope") or ApiKey.Scope.INGEST
    if not name:
        messages.error(request, "Give the key a name (what will use it, e.g. 'CI').")
        return redirect("runs:project_settings", slug=project.slug)
    try:
        row, key = api_keys.create_key(project, name, user=request.user, scope=scope)
    except PermissionError as exc:
        messages.error(request, sentence(str(exc)))
    else:
        request.session["new_api_key"] = {"name": row.name, "key": key, "scope": row.scope}
    return redirect("runs:project_settings", slug=project.slug)


def sentence(text: str) -> str:
    """End a message with one period: error texts that already end a sentence keep theirs."""
    text = text.rstrip()
    return text if text.endswith((".", "!", "?", "…")) else text + "."


@require_POST
@login_required
def revoke_key(request: HttpRequest, slug: str, key_id: int) -> HttpResponse:
    project = access.get_project(request.user, slug)
    key = get_object_or_404(project.api_keys, pk=key_id)
    api_keys.revoke_key(key)
    messages.success(request, f"Key “{key.name}” revoked {timezone.now():%Y-%m-%d %H:%M} UTC.")
    return redirect("runs:project_settings", slug=project.slug)


def _to_settings(project: Project, section: str) -> HttpResponse:
    return redirect(reverse("runs:project_settings", args=[project.slug]) + f"#{section}")


@require_POST
@login_required
def alert_channel_create(request: HttpRequest, slug: str) -> HttpResponse:
    """Add a channel; a generated webhook signing secret is shown once, on the next load."""
    project = access.get_project(request.user, slug, access.CHANGE_ALERTS)
    form = ChannelForm(request.POST, prefix="channel")
    if not form.is_valid():
        errors = "; ".join(f"{name}: {' '.join(e)}" for name, e in form.errors.items())
        messages.error(request, sentence(f"Channel not added: {errors}"))
        return _to_settings(project, "alert-channels")
    try:
        channel, secret = channels.create_channel(
            project, form.data_for_service(), user=request.user
        )
    except channels.ChannelInvalid as exc:
        messages.error(request, sentence(f"Channel not added: {exc}"))
    else:
        if secret and not form.cleaned_data["secret"]:
            request.session["new_channel_secret"] = {"name": channel.name, "secret": secret}
        messages.success(request, f"Channel “{channel.name}” added.")
    return _to_settings(project, "alert-channels")


@require_POST
@login_required
def alert_channel_action(request: HttpRequest, slug: str, channel_id: int) -> HttpResponse:
    """Send a test to a channel, enable, disable or delete it (POST action=...)."""
    project = access.get_project(request.user, slug, access.CHANGE_ALERTS)
    channel = get_object_or_404(project.channels, pk=channel_id)
    action = request.POST.get("action")
    if action == "test":
        delivery.queue_test(channel)
        messages.success(
            request,
            f"Test queued for “{channel.name}”: its result shows in the delivery log "
            "as soon as the worker has sent it.",
        )
    elif action in ("enable", "disable"):
        channels.update_channel(channel, channels.ChannelData(enabled=action == "enable"))
    elif action == "delete":
        channels.delete_channel(channel)
        messages.success(request, f"Channel “{channel.name}” deleted.")
    else:
        messages.error(request, "Unknown channel action.")
    return _to_settings(project, "alert-channels")


@require_POST
@login_required
def alert_rule_save(request: HttpRequest, slug: str, rule_id: int | None = None) -> HttpResponse:
    """Create a rule, or change one; an invalid one is shown again with its errors (400)."""
    project = access.get_project(request.user, slug, access.CHANGE_ALERTS)
    rule = get_object_or_404(project.alert_rules, pk=rule_id) if rule_id else None
    instance = rule or AlertRule(project=project)
    form = RuleForm(request.POST, prefix="rule", project=project, instance=instance)
    if form.is_valid():
        values = {field: form.cleaned_data[field] for field in alerts.RULE_FIELDS}
        channel_ids = [channel.pk for channel in form.cleaned_data["channels"]]
        try:
            saved = alerts.save_rule(
                project, values, rule=rule, channel_ids=channel_ids, user=request.user
            )
        except alerts.RuleInvalid as exc:
            form.add_error(None, str(exc))
        else:
            messages.success(request, f"Rule “{saved.name}” saved.")
            return _to_settings(project, "alert-rules")
    return settings_page(request, project, rule_form=form, status=400)


@require_POST
@login_required
def alert_rule_delete(request: HttpRequest, slug: str, rule_id: int) -> HttpResponse:
    project = access.get_project(request.user, slug, access.CHANGE_ALERTS)
    rule = get_object_or_404(project.alert_rules, pk=rule_id)
    alerts.delete_rule(rule)
    messages.success(request, f"Rule “{rule.name}” deleted.")
    return _to_settings(project, "alert-rules")


@require_POST
@login_required
def project_timezone(request: HttpRequest, slug: str) -> HttpResponse:
    """Set the project's time zone, in which the daily digest's hour and day are (owners)."""
    project = access.get_project(request.user, slug, access.CHANGE_ALERTS)
    try:
        digest.set_timezone(project, request.POST.get("timezone", ""))
    except digest.TimezoneInvalid as exc:
        messages.error(request, sentence(f"Time zone not changed: {exc}"))
    else:
        messages.success(request, f"Time zone set to {project.timezone}.")
    return _to_settings(project, "alert-rules")


@require_GET
@login_required
@vary_on_headers("HX-Request")
def alert_deliveries(request: HttpRequest, slug: str) -> HttpResponse:
    """The delivery log alone (htmx refresh); without htmx, the settings page at the log."""
    project = access.get_project(request.user, slug)
    if not request.htmx:
        return _to_settings(project, "delivery-log")
    context = {"project": project, "deliveries": delivery_log(project)}
    return render(request, "runs/_alerts.html#delivery-log", context)
