"""HTML pages and htmx fragments (function views)."""

from __future__ import annotations

from urllib.parse import urlencode

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.db import connection
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET, require_http_methods, require_POST
from django.views.decorators.vary import vary_on_headers
from django_htmx.http import HTMX_STOP_POLLING, HttpResponseClientRedirect

import detection

from ..models import AlertRule, ApiKey, Project, Run
from ..services import (
    access,
    api_keys,
    digest,
    downloads,
    filters,
    ingest,
    issues,
    live,
    summary,
    uploads,
)
from ..services import alerts as alert_service
from ..services import backtest as backtest_service
from ..services import channels as channel_service
from ..services import delivery as alert_delivery
from ..services import labels as labels_service
from ..services import policy as policy_service
from . import alerts as alerts_page
from . import backtest, charts, forms, stepview, timeline, tree
from . import issues as issues_page
from . import overview as overview_service

RUNS_PER_PAGE = 50
LEDGER_PER_PAGE = 200


def healthz(request: HttpRequest) -> JsonResponse:
    """Report whether the database answers (used by docker compose health checks)."""
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except Exception as exc:  # noqa: BLE001 - any failure means unhealthy
        return JsonResponse({"status": "error", "database": str(exc)}, status=503)
    return JsonResponse({"status": "ok"})


@require_GET
@login_required
def run_list(request: HttpRequest) -> HttpResponse:
    f = filters.RunFilters.from_query(request.GET)
    # Project ids as constants, not a subquery: with one project the planner walks the
    # (project, sort key, id) index in order and stops at the page size.
    project_ids = list(access.projects_for(request.user).values_list("pk", flat=True))
    runs = Run.objects.filter(project_id__in=project_ids)
    runs = filters.apply(runs, f).select_related("project")
    page, next_cursor = filters.page(
        runs.defer("search", "metadata"), f, request.GET.get("after", ""), RUNS_PER_PAGE
    )
    for run in page:
        run.strip = charts.repeat_strip(summary.strip_of(run))
    context = {
        "runs": page,
        "filters": f,
        "query": urlencode(f.query()),
        "next_after": next_cursor,
        "projects": access.projects_for(request.user),
        "sorts": [(k, label) for k, (_, label) in filters.SORTS.items()],
        "verdicts": filters.VERDICTS,
        "detectors": list(detection.catalogue.NAMES),
        "formats": list(ingest.formats()),
        "detector_titles": detection.catalogue.TITLES,
    }
    if request.htmx and request.htmx.target == "run-table":
        template = "runs/run_list.html#run-table"
    elif request.htmx:
        template = "runs/run_list.html#run-rows"
    else:
        template = "runs/run_list.html"
    return render(request, template, context)


def _int(value: str | None, default: int | None = 0) -> int | None:
    return int(value) if value and value.isdigit() else default


FINDINGS_SHOWN = 40
STOPPED_SHOWN = 20  # calls the guard stopped, listed above the findings


def _read_by_notice(read_by: object) -> str:
    """The run page's notice for a run read heuristically (`--format generic`), else ""."""
    if not isinstance(read_by, dict) or not read_by.get("heuristic"):
        return ""
    calls = ", ".join(map(str, read_by.get("call_fields") or [])) or "no field"
    links = ", ".join(map(str, read_by.get("result_link") or [])) or "nothing"
    unplaced = read_by.get("unplaced") or 0
    return (
        f"Read heuristically: calls from {calls}, results linked by {links}; "
        f"{unplaced} object{'' if unplaced == 1 else 's'} could not be placed"
    )[:400]


def _unknowns_notice(run: Run) -> dict | None:
    """What the run page says when calls had no arguments or results in the trace."""
    unknowns = summary.unknowns_of(run)
    if not unknowns.any:
        return None
    parts = [
        f"{unknowns.share(count)}% of the calls have no {what} in the trace"
        for count, what in ((unknowns.args, "arguments"), (unknowns.results, "result"))
        if count
    ]
    return {
        "text": " and ".join(parts),
        "names_only": unknowns.names_only,
        "hints": summary.capture_hints_of(run),
    }


def run_header_context(run: Run, all_findings: bool = False) -> dict:
    """Return what the run page header and tabs need (the first findings, or all)."""
    findings = list(run.findings.all()[: None if all_findings else FINDINGS_SHOWN + 1])
    more_findings = run.findings.count() - FINDINGS_SHOWN if len(findings) > FINDINGS_SHOWN else 0
    findings = findings if all_findings else findings[:FINDINGS_SHOWN]
    stopped = list(live.stopped_calls(run)[: STOPPED_SHOWN + 1])
    judged = labels_service.for_findings(run, findings)
    for finding in findings:
        finding.label = judged.get(finding.pk)  # what _label.html shows
        finding.also, finding.part_of = [], None  # one loop seen by several detectors
    for finding in findings:
        if not finding.lead and 0 <= finding.loop < len(findings):
            lead = findings[finding.loop]
            lead.also.append(finding.detector)
            finding.part_of = lead
    fired = [f.fired_at for f in findings if f.severity != "info"]
    meta = run.metadata if isinstance(run.metadata, dict) else {}
    return {
        "run": run,
        "findings": findings,
        "more_findings": more_findings,
        "stopped_calls": stopped[:STOPPED_SHOWN],
        "more_stopped": len(stopped) > STOPPED_SHOWN,
        "label_reasons": labels_service.REASONS,
        "facts": [
            (label, str(meta[key])[:120])
            for key, label in (("model", "Model"), ("agent", "Agent"), ("task", "Task"))
            if meta.get(key) not in (None, "", [], {})
        ],
        "read_by": _read_by_notice(meta.get("read_by")),
        "unknowns": _unknowns_notice(run),
        "stall_chart": charts.stall_chart(
            summary.stall_series_of(run),
            steps=run.step_count,
            fired=fired,
            width=360,
            height=70,
        ),
    }


@require_GET
@login_required
@vary_on_headers("HX-Request")
def run_detail(request: HttpRequest, run_id: int) -> HttpResponse:
    run = access.get_run(request.user, run_id)
    context = run_header_context(run, all_findings=request.GET.get("findings") == "all")
    highlight: set[int] = set()
    start = _int(request.GET.get("from"))
    focus = _int(request.GET.get("focus"), None)
    if focus is not None:
        finding = run.findings.filter(pk=focus).first()
        if finding is not None:
            highlight = set(finding.seqs)
            start = timeline.finding_window_start(finding)
    end = _int(request.GET.get("to"), None)
    flat = request.GET.get("flat") == "1"
    window = timeline.build_window(
        run,
        start,
        end=end,
        folded=not flat,
        rows=timeline.UNFOLD_PAGE if flat else timeline.ROWS_PER_PAGE,
        highlight=highlight,
    )
    # A live run's page polls for new steps when it shows the timeline to its end.
    live_after = run.step_count if window.more_from is None else -1
    context |= {"timeline": window, "flat": flat, "focus": focus, "live_after": live_after}
    template = "runs/run_detail.html#step-rows" if request.htmx else "runs/run_detail.html"
    return render(request, template, context)


@require_GET
@login_required
def run_live(request: HttpRequest, run_id: int) -> HttpResponse:
    """What a live run's page polls: the steps from seq `after` (none when -1), the header
    and the findings; 286 (stop polling) once the run has ended."""
    run = access.get_run(request.user, run_id)
    after = _int(request.GET.get("after"), -1)
    new_steps = None
    if after is not None and 0 <= after < run.step_count:
        new_steps = timeline.build_window(run, after, folded=False, rows=timeline.UNFOLD_PAGE)
        after = new_steps.more_from if new_steps.more_from is not None else run.step_count
        new_steps.more_from = None  # the next poll brings the rest
    context = run_header_context(run) | {"new_steps": new_steps, "live_after": after}
    response = render(request, "runs/run_detail.html#live-update", context)
    if not run.live:
        response.status_code = HTMX_STOP_POLLING
    return response


@require_POST
@login_required
def label_finding(request: HttpRequest, run_id: int, finding_id: int) -> HttpResponse:
    """Judge one finding: a real loop, or a false alarm with its reason (members only).

    htmx gets the finding's label box back; a plain form post goes back to the finding."""
    run = access.get_run(request.user, run_id)
    finding = get_object_or_404(run.findings, pk=finding_id)
    error = ""
    try:
        labels_service.label_finding(
            request.user,
            finding,
            request.POST.get("verdict", ""),
            request.POST.get("reason", ""),
            request.POST.get("text", ""),
        )
    except labels_service.LabelInvalid as exc:
        error = str(exc)
    if not request.htmx:
        if error:  # the form's own checks (a required reason text) keep browsers from this
            return HttpResponse(error, status=400, content_type="text/plain; charset=utf-8")
        return redirect(f"{run.get_absolute_url()}?focus={finding.pk}#finding-{finding.pk}")
    finding.label = labels_service.for_findings(run, [finding]).get(finding.pk)
    context = {"run": run, "finding": finding, "label_error": error}
    context["label_reasons"] = labels_service.REASONS
    return render(request, "runs/_label.html", context, status=400 if error else 200)


@require_POST
@login_required
def label_issue(request: HttpRequest, issue_id: int) -> HttpResponse:
    """Judge every finding of a loop issue alike (members only); htmx gets the issue's label
    box back with how many were labeled, a plain form post goes back to the issue."""
    issue = access.get_issue(request.user, issue_id)
    context: dict = {"issue": issue, "label_reasons": labels_service.REASONS}
    try:
        context["labeled"] = labels_service.label_issue(
            request.user,
            issue,
            request.POST.get("verdict", ""),
            request.POST.get("reason", ""),
            request.POST.get("text", ""),
        )
    except labels_service.LabelInvalid as exc:
        context["label_error"] = str(exc)
    if not request.htmx:
        if "label_error" in context:
            return HttpResponse(
                context["label_error"], status=400, content_type="text/plain; charset=utf-8"
            )
        return redirect(issue.get_absolute_url())
    status = 400 if "label_error" in context else 200
    return render(request, "runs/_label_issue.html", context, status=status)


@require_GET
@login_required
@vary_on_headers("HX-Request")
def step_detail(request: HttpRequest, run_id: int, seq: int) -> HttpResponse:
    run = access.get_run(request.user, run_id)
    step = stepview.get_step(run, seq)
    full = request.GET.get("full") == "1"
    context = {
        "run": run,
        "step": step,
        "full": full,
        "args_html": stepview.json_html(step.args, full=full),
        "result_html": stepview.json_html(step.result, full=full),
        "large": stepview.is_large(step.args) or stepview.is_large(step.result),
        "diff": stepview.step_diff(step),
        "ledger": run.ledger_rows.filter(seq=seq).first(),
    }
    template = "runs/step_detail.html#step-detail" if request.htmx else "runs/step_detail.html"
    return render(request, template, context)


@require_GET
@login_required
@vary_on_headers("HX-Request")
def run_tree(request: HttpRequest, run_id: int) -> HttpResponse:
    run = access.get_run(request.user, run_id)
    index = tree.load(run)
    node = _int(request.GET.get("node"), None)
    if node is not None and node not in index.nodes:
        raise Http404("no such step")
    offset = _int(request.GET.get("offset"))
    rows, more = tree.rows_for(run, index, node, offset, open_flagged=node is None)
    context = {"rows": rows, "more": more, "node": node, "parent": node} | (
        {} if request.htmx else run_header_context(run)
    )
    context["run"] = run
    if node is not None:
        context["node_row"] = index.nodes[node]
    template = "runs/run_tree.html#children" if request.htmx else "runs/run_tree.html"
    return render(request, template, context)


@require_GET
@login_required
@vary_on_headers("HX-Request")
def run_ledger(request: HttpRequest, run_id: int) -> HttpResponse:
    run = access.get_run(request.user, run_id)
    start = _int(request.GET.get("from"))
    calls = list(
        run.steps.filter(kind="tool_call", seq__gte=start)
        .only("seq", "tool", "status", "call_sig")
        .order_by("seq")[: LEDGER_PER_PAGE + 1]
    )
    more_from = calls[-1].seq if len(calls) > LEDGER_PER_PAGE else None
    calls = calls[:LEDGER_PER_PAGE]
    marks = {
        row.seq: row
        for row in run.ledger_rows.filter(seq__in=[c.seq for c in calls]).only(
            "seq", "repeat_of", "count"
        )
    }
    for call in calls:
        call.mark = marks.get(call.seq)
        call.hue = timeline.hue(call.call_sig) if call.mark else None
    context = {"run": run, "calls": calls, "more_from": more_from}
    if request.htmx:
        return render(request, "runs/run_ledger.html#ledger-rows", context)
    context |= run_header_context(run)
    fired = [f.fired_at for f in context["findings"] if f.severity != "info"]
    context["big_chart"] = charts.stall_chart(
        summary.stall_series_of(run),
        steps=run.step_count,
        fired=fired,
        width=900,
        height=200,
    )
    context["repeats"] = run.ledger_rows.count()
    return render(request, "runs/run_ledger.html", context)


@require_GET
@login_required
def overview(request: HttpRequest) -> HttpResponse:
    return render(request, "runs/overview.html", overview_service.overview(request.user))


@require_GET
@login_required
def tuning_index(request: HttpRequest) -> HttpResponse:
    project = access.projects_for(request.user).first()
    if project is None or not access.may_tune(request.user):
        raise Http404("no project to tune")
    return redirect("runs:tuning", slug=project.slug)


@require_http_methods(["GET", "POST"])
@login_required
def tuning_page(request: HttpRequest, slug: str) -> HttpResponse:
    project = access.get_project(request.user, slug, access.CHANGE_POLICY)
    errors: list[str] = []
    if request.method == "POST":
        defaults, rows = forms.forms_for(project, request.POST)
        policy, errors = forms.draft_policy(project, defaults, rows)
        if policy is not None:
            change = policy_service.save_policy(project, policy, request.user)
            url = reverse("runs:tuning", args=[project.slug]) + f"?saved={change.pk}"
            if request.htmx:
                return HttpResponseClientRedirect(url)
            return redirect(url)
    else:
        defaults, rows = forms.forms_for(project)
    saved = _int(request.GET.get("saved"), None)
    context = tuning_context(request, project, defaults, rows) | {
        "errors": errors,
        "saved": project.policy_changes.filter(pk=saved).first() if saved else None,
    }
    return render(request, "runs/tuning.html", context, status=400 if errors else 200)


@require_POST
@login_required
def backtest_start(request: HttpRequest, slug: str) -> HttpResponse:
    """Start a back-test of the posted draft over the posted range; show its progress."""
    project = access.get_project(request.user, slug, access.BACKTEST)
    defaults, rows = forms.forms_for(project, request.POST)
    policy, errors = forms.draft_policy(project, defaults, rows)
    window = backtest.range_form(request.POST)
    if window.is_valid() and policy is not None:
        try:
            job = backtest_service.start(
                project, request.user, policy, *window.window(), window.cleaned_data["sample"]
            )
        except ValueError as exc:
            errors.append(str(exc))
        else:
            if request.htmx:
                return render(request, "runs/backtest.html#backtest", backtest.job_context(job))
            return redirect(job)
    errors += [e for field_errors in window.errors.values() for e in field_errors]
    if request.htmx:
        return render(request, "runs/backtest.html#backtest", {"backtest_errors": errors})
    context = tuning_context(request, project, defaults, rows) | {
        "errors": errors,
        "range_form": window,
    }
    return render(request, "runs/tuning.html", context, status=400)


@require_GET
@login_required
@vary_on_headers("HX-Request")
def backtest_status(request: HttpRequest, job_id: int) -> HttpResponse:
    """A back-test's page, or (htmx) its block, which stops polling (286) once finished."""
    job = access.get_backtest(request.user, job_id)
    context = backtest.job_context(job)
    if not request.htmx:
        return render(request, "runs/backtest.html", context)
    response = render(request, "runs/backtest.html#backtest", context)
    if job.is_finished:
        response.status_code = HTMX_STOP_POLLING
    return response


@require_POST
@login_required
def backtest_cancel(request: HttpRequest, job_id: int) -> HttpResponse:
    job = backtest_service.cancel(access.get_backtest(request.user, job_id))
    if request.htmx:
        return render(request, "runs/backtest.html#backtest", backtest.job_context(job))
    return redirect(job)


def tuning_context(request: HttpRequest, project: Project, defaults, rows) -> dict:  # type: ignore[no-untyped-def]
    """Return what the whole Tuning page shows around its forms."""
    return {
        "project": project,
        "projects": access.projects_for(request.user),
        "defaults": defaults,
        "rows": rows,
        "changes": project.policy_changes.select_related("user")[:10],
        "tools": sorted(policy_service.project_tools(project))[:300],
        "range_form": backtest.range_form(),
    } | backtest.tuning_context(project)


@require_http_methods(["GET", "POST"])
@login_required
def upload(request: HttpRequest) -> HttpResponse:
    projects = list(access.projects_for(request.user))
    context = {
        "projects": projects,
        "formats": ingest.formats(),
        "max_bytes": settings.MAX_UPLOAD_BYTES,
        "recent": access.traces_for(request.user).defer("raw").select_related("project")[:20],
    }
    if request.method == "GET":
        return render(request, "runs/upload.html", context)
    errors, traces = [], []
    project = None
    if slug := request.POST.get("project"):
        project = next((p for p in projects if p.slug == slug), None)
    elif len(projects) >= 1:
        project = projects[0]
    if project is None:
        errors.append("Choose a project you are a member of.")
    files = request.FILES.getlist("files")
    if not files:
        errors.append("Choose at least one trace file.")
    if not errors:
        for upload_ in files:
            try:
                trace, created = uploads.accept(
                    project, upload_, name=upload_.name or "upload", size=upload_.size,
                    format=request.POST.get("format", ""), user=request.user,
                    version=request.POST.get("version", ""),
                )  # fmt: skip
            except uploads.UploadRefused as exc:
                errors.append(f"{exc.message}.")
                continue
            trace.was_duplicate = not created
            traces.append(trace)
    context |= {"traces": traces, "errors": errors}
    status = 400 if errors and not traces else 200
    if request.htmx:
        return render(request, "runs/upload.html#upload-results", context, status=status)
    return render(request, "runs/upload.html", context, status=status)


@require_GET
@login_required
def trace_status(request: HttpRequest, trace_id: int) -> HttpResponse:
    trace = access.get_trace(request.user, trace_id)
    trace.run_list = list(trace.runs.only("id", "name", "verdict", "step_count")[:20])
    response = render(request, "runs/upload.html#trace-row", {"trace": trace})
    if trace.is_finished:
        response.status_code = HTMX_STOP_POLLING
    return response


# ---- project settings: API keys, raw downloads -----------------------------------------


@require_GET
@login_required
def project_settings(request: HttpRequest, slug: str) -> HttpResponse:
    """A project's settings: its API keys (create, revoke), how to send traces, and its alert
    channels, rules (?rule=<id> edits one) and delivery log."""
    project = access.get_project(request.user, slug)
    rule_form = None
    if rule_id := _int(request.GET.get("rule"), None):
        rule = get_object_or_404(project.alert_rules, pk=rule_id)
        rule_form = alerts_page.RuleForm(prefix="rule", project=project, instance=rule)
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
        **alerts_page.settings_context(project, request.user, rule_form=rule_form),
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
    form = alerts_page.ChannelForm(request.POST, prefix="channel")
    if not form.is_valid():
        errors = "; ".join(f"{name}: {' '.join(e)}" for name, e in form.errors.items())
        messages.error(request, sentence(f"Channel not added: {errors}"))
        return _to_settings(project, "alert-channels")
    try:
        channel, secret = channel_service.create_channel(
            project, form.data_for_service(), user=request.user
        )
    except channel_service.ChannelInvalid as exc:
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
        alert_delivery.queue_test(channel)
        messages.success(
            request,
            f"Test queued for “{channel.name}”: its result shows in the delivery log "
            "as soon as the worker has sent it.",
        )
    elif action in ("enable", "disable"):
        channel_service.update_channel(
            channel, channel_service.ChannelData(enabled=action == "enable")
        )
    elif action == "delete":
        channel_service.delete_channel(channel)
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
    form = alerts_page.RuleForm(request.POST, prefix="rule", project=project, instance=instance)
    if form.is_valid():
        values = {field: form.cleaned_data[field] for field in alert_service.RULE_FIELDS}
        channel_ids = [channel.pk for channel in form.cleaned_data["channels"]]
        try:
            saved = alert_service.save_rule(
                project, values, rule=rule, channel_ids=channel_ids, user=request.user
            )
        except alert_service.RuleInvalid as exc:
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
    alert_service.delete_rule(rule)
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
    context = {"project": project, "deliveries": alerts_page.delivery_log(project)}
    return render(request, "runs/_alerts.html#delivery-log", context)


@require_http_methods(["GET"])
@login_required
def trace_raw(request: HttpRequest, trace_id: int) -> HttpResponse:
    """Download a trace's bytes as received, if the user is a member of its project."""
    trace = get_object_or_404(access.traces_for(request.user), pk=trace_id)
    return downloads.raw_response(trace)


@require_GET
@login_required
@vary_on_headers("HX-Request")
def issue_list(request: HttpRequest) -> HttpResponse:
    context = issues_page.list_context(request.user, request.GET)
    template = "runs/issue_list.html#issue-table" if request.htmx else "runs/issue_list.html"
    return render(request, template, context)


@require_http_methods(["GET", "POST"])
@login_required
@vary_on_headers("HX-Request")
def issue_detail(request: HttpRequest, issue_id: int) -> HttpResponse:
    issue = access.get_issue(request.user, issue_id)
    error = ""
    if request.method == "POST":
        form = forms.IssueStateForm(request.POST)
        try:
            if not form.is_valid():
                raise issues.StateError("choose resolve, ignore or reopen")
            access.require(request.user, issue.project, access.CHANGE_ISSUE_STATE)
            data = form.cleaned_data
            issues.set_state(issue, data["action"], user=request.user, version=data["version"])
            return redirect(issue.get_absolute_url())
        except issues.StateError as exc:
            error = str(exc)
    context = issues_page.detail_context(issue, request.GET.get("page")) | {
        "error": error,
        "label_reasons": labels_service.REASONS,
    }
    template = "runs/issue_detail.html#issue-runs" if request.htmx else "runs/issue_detail.html"
    return render(request, template, context, status=400 if error else 200)
