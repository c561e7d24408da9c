"""A run's pages: the header and findings every tab shows, the timeline (and its live
polling), one step, the tree, the ledger, and judging a finding."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_GET, require_POST
from django.views.decorators.vary import vary_on_headers
from django_htmx.http import HTMX_STOP_POLLING

from ..models import Run
from ..services import access, labels, live, summary
from . import charts, stepview, timeline, tree
from .params import int_param

LEDGER_PER_PAGE = 200
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
    judged = labels.for_findings(run, findings)
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
        "label_reasons": labels.REASONS,
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
    start = int_param(request.GET.get("from"))
    focus = int_param(request.GET.get("focus"), None)
    if focus is not None:
        finding = run.findings.filter(pk=focus).first()
        if finding is not None:
            highlight = set(finding.seqs)
            start = timeline.finding_window_start(finding)
    end = int_param(request.GET.get("to"), None)
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
    after = int_param(request.GET.get("after"), -1)
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
        labels.label_finding(
            request.user,
            finding,
            request.POST.get("verdict", ""),
            request.POST.get("reason", ""),
            request.POST.get("text", ""),
        )
    except labels.LabelInvalid as exc:
        error = str(exc)
    if not request.htmx:
        if error:  # the form's own checks (a required reason text) keep browsers from this
            return HttpResponse(error, status=400, content_type="text/plain; charset=utf-8")
        return redirect(f"{run.get_absolute_url()}?focus={finding.pk}#finding-{finding.pk}")
    finding.label = labels.for_findings(run, [finding]).get(finding.pk)
    context = {"run": run, "finding": finding, "label_error": error}
    context["label_reasons"] = labels.REASONS
    return render(request, "runs/_label.html", context, status=400 if error else 200)


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
    node = int_param(request.GET.get("node"), None)
    if node is not None and node not in index.nodes:
        raise Http404("no such step")
    offset = int_param(request.GET.get("offset"))
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
    start = int_param(request.GET.get("from"))
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
