"""Acting on many runs from the runs list: compare two, re-analyze, label or delete.

The runs list's check boxes post here. Each action is allowed or refused per project by
`services/access.py`, for every selected run: a selection that holds one run the user may
not act on is refused whole, and nothing is done. Deleting asks first, on a page that lists
the runs (no script: the page posts the selection again with `confirmed=yes`).
"""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.db import transaction
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_POST

from ..models import Finding, Label, Run
from ..services import access, analysis, deletion, labels

MAX_SELECTED = 500  # one page of the list holds 50; "Older runs" adds more to the selection
ACTIONS = {
    "compare": access.READ,
    "reanalyze": access.REANALYZE,
    "label-real": access.READ,
    "label-false": access.READ,
    "delete": access.DELETE_RUNS,
}


@require_POST
@login_required
def bulk_runs(request: HttpRequest) -> HttpResponse:
    """Do one action to the selected runs, then go back to the list with what was done."""
    back = _back(request)
    action = request.POST.get("action", "")
    act = ACTIONS.get(action)
    ids = _ids(request.POST.getlist("run"))
    if act is None:
        messages.error(request, "Choose what to do with the selected runs.")
        return redirect(back)
    if not ids:
        messages.error(request, "Select at least one run first.")
        return redirect(back)
    if len(ids) > MAX_SELECTED:
        messages.error(request, f"Select at most {MAX_SELECTED} runs at once.")
        return redirect(back)
    runs = access.runs_for(request.user).filter(pk__in=ids).select_related("project")
    found = list(runs)
    if len(found) < len(ids):
        messages.error(request, "Some of the selected runs no longer exist; nothing was done.")
        return redirect(back)
    refused = sorted(
        {run.project.name for run in found if not access.may(request.user, run.project, act)}
    )
    if refused:
        messages.error(request, f"You may not do this in {', '.join(refused)}; nothing was done.")
        return redirect(back)

    if action == "compare":
        if len(found) != 2:
            messages.error(request, "Select exactly two runs to compare them.")
            return redirect(back)
        first, second = sorted(found, key=lambda run: run.pk)
        return redirect(reverse("runs:compare", args=[first.pk, second.pk]))
    if action == "reanalyze":
        with transaction.atomic():
            count = analysis.reanalyze(Run.objects.filter(pk__in=ids), bulk=True)
        messages.success(request, f"{_runs(count)} queued for analysis.")
    elif action == "delete":
        if request.POST.get("confirmed") != "yes":  # deleting cannot be undone: ask first
            return _confirm_delete(request, found, back)
        count = deletion.delete_runs(Run.objects.filter(pk__in=ids))
        messages.success(request, f"{_runs(count)} deleted.")
    else:
        verdict = Label.Verdict.REAL if action == "label-real" else Label.Verdict.FALSE
        reason = request.POST.get("reason", "") if verdict == Label.Verdict.FALSE else ""
        try:
            count = _label(request.user, ids, verdict, reason, request.POST.get("text", ""))
        except labels.LabelInvalid as exc:
            messages.error(request, str(exc))
            return redirect(back)
        if count:
            messages.success(
                request, f"{count} finding{'s' if count != 1 else ''} labeled “{verdict.label}”."
            )
        else:
            messages.info(request, "The selected runs have no warn or stop findings to label.")
    return redirect(back)


def _confirm_delete(request: HttpRequest, runs: list[Run], back: str) -> HttpResponse:
    """The page that asks before the selected runs are deleted, listing them; its button
    posts the same selection again, confirmed."""
    runs = sorted(runs, key=lambda run: run.pk)
    context = {"runs": runs, "count": _runs(len(runs)), "back": back,
               "findings": Finding.objects.filter(run__in=runs).count()}  # fmt: skip
    return render(request, "runs/bulk_delete.html", context)


def _label(user, run_ids: list[int], verdict: str, reason: str, text: str) -> int:  # type: ignore[no-untyped-def]
    """Label every warn or stop finding of these runs; return how many, all or none."""
    labels.clean(verdict, reason, text)  # one clear error before anything is written
    findings = Finding.objects.filter(
        run_id__in=run_ids, severity__in=[Finding.Severity.WARN, Finding.Severity.STOP]
    ).order_by("run_id", "pk")
    with transaction.atomic():
        count = 0
        for finding in findings:
            labels.label_finding(user, finding, verdict, reason, text)
            count += 1
    return count


def _ids(values: list[str]) -> list[int]:
    """Return the distinct run ids posted, ignoring what is not a positive number."""
    ids = {int(value) for value in values if value.isdigit() and 0 < int(value) < 2**63}
    return sorted(ids)


def _back(request: HttpRequest) -> str:
    """Return the runs list the form was posted from (its filters kept), or the plain list."""
    back = request.POST.get("next", "")
    if back.startswith("/") and url_has_allowed_host_and_scheme(
        back, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        return back
    return reverse("runs:list")


def _runs(count: int) -> str:
    return f"{count} run{'s' if count != 1 else ''}"
