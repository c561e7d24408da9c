"""`/api/issues`: the key's project's loop issues, one issue, and its state (ninja Router).

An issue of another project is 404, like every id in the API. Reading needs a read key;
changing a state needs an admin key, as changing the policy does.
"""

from typing import Literal

from django.http import HttpRequest
from django.shortcuts import get_object_or_404
from ninja import Path, Query, Router
from ninja.errors import HttpError
from ninja.pagination import paginate

from ..models import LoopIssue
from ..services import access, issues
from .router import BODY_ERRORS, ERRORS, MAX_ID, ApiKeyAuth, RunPages
from .schemas import IssueDetailOut, IssueOut, IssueStateIn

router = Router(auth=ApiKeyAuth(), tags=["issues"])

ISSUE_ID = Path(..., ge=1, le=MAX_ID, description="an issue id")


def _issue(request: HttpRequest, issue_id: int) -> LoopIssue:
    return get_object_or_404(LoopIssue.objects.filter(project=request.auth.project), pk=issue_id)


def _out(issue: LoopIssue) -> dict:
    fields = [name for name in IssueOut.model_fields if name != "models"]
    return {name: getattr(issue, name) for name in [*fields, "models_seen"]}


@router.get("/issues", response={200: list[IssueOut], **ERRORS})
@paginate(RunPages)
def list_issues(
    request: HttpRequest,
    state: Literal["open", "resolved", "ignored", "regressed", ""] = "",
    detector: str = Query("", max_length=40),
    tool: str = Query("", max_length=200),
    version: str = Query("", max_length=100, description="an agent version it was seen in"),
    sort: Literal["last_seen", "runs", "waste"] = "last_seen",
):
    """The project's loop issues that have findings, most recently seen first (or with the
    most runs, or the most waste), filtered by state, detector, tool and agent version."""
    wanted = issues.IssueFilter(state, detector, tool, version, sort)
    found = issues.filter_issues(LoopIssue.objects.filter(project=request.auth.project), wanted)
    return found


@router.get("/issues/{issue_id}", response={200: IssueDetailOut, **ERRORS})
def get_issue(request: HttpRequest, issue_id: int = ISSUE_ID):
    """One issue: its counts and state, the example message, its runs and findings by day
    and by agent version."""
    issue = _issue(request, issue_id)
    return _detail(issue)


@router.patch("/issues/{issue_id}", response={200: IssueDetailOut, **BODY_ERRORS, **ERRORS})
def set_issue_state(request: HttpRequest, payload: IssueStateIn, issue_id: int = ISSUE_ID):
    """Resolve an issue (optionally in a version: a finding from a later version makes it
    regressed), ignore it (it stays quiet) or reopen it. Needs an admin key."""
    request.auth.require(access.CHANGE_ISSUE_STATE)
    issue = _issue(request, issue_id)
    try:
        issue = issues.set_state(issue, payload.state, version=payload.resolved_in_version)
    except issues.StateError as exc:
        raise HttpError(400, str(exc)) from exc
    return _detail(issue)


def _detail(issue: LoopIssue) -> dict:
    return _out(issue) | {
        "example_message": issue.example_message,
        "days": list(issue.days.values("day", "runs", "findings")),
        "by_version": [
            {"version": version, "runs": runs, "findings": count}
            for version, runs, count in issues.by_version(issue)
        ],
    }
