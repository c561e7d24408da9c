"""Who may see and do what, for every entry point: the pages, the API, the admin and (through
the API) the MCP server.

Seeing: a user sees only the projects they belong to (404 otherwise, never 403, so ids do not
leak); a key sees only its own project. Doing: each act that needs more than seeing is one
`Act` below, naming both the least API key scope that may do it and the least role that may
on the web, so a page and the API cannot disagree about the same act.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import Http404
from django.shortcuts import get_object_or_404

from ..models import ApiKey, BacktestJob, LoopIssue, Membership, Project, Run, Trace

# The web's roles in a project, each allowed what the ones before it are.
MEMBER = "member"  # any member
OWNER = "owner"  # an owner, or a staff member
STAFF = "staff"  # a staff member (in the admin, a superuser of every project): Tuning, back-tests


@dataclass(frozen=True, slots=True)
class Act:
    """Something a user or a key may or may not do to a project."""

    doing: str  # what a refusal says is refused
    scope: str  # the least ApiKey.Scope that may do it through the API
    role: str  # the least web role (MEMBER, OWNER, STAFF) that may do it on the pages


READ = Act("reading the project", ApiKey.Scope.READ, MEMBER)
# Uploads, OTLP exports, live runs and the calls the live guard stopped: any write of data.
SEND = Act("sending traces", ApiKey.Scope.INGEST, MEMBER)
CHANGE_ISSUE_STATE = Act("changing an issue's state", ApiKey.Scope.ADMIN, OWNER)
CHANGE_ALERTS = Act("changing alerts", ApiKey.Scope.ADMIN, OWNER)  # channels, rules, zone
CHANGE_RETENTION = Act("changing retention", ApiKey.Scope.ADMIN, OWNER)
CHANGE_POLICY = Act("changing the policy", ApiKey.Scope.ADMIN, STAFF)  # Tuning, PUT /policy
BACKTEST = Act("back-testing a policy", ApiKey.Scope.ADMIN, STAFF)
REANALYZE = Act("re-analyzing a run", ApiKey.Scope.ADMIN, STAFF)
DELETE_RUNS = Act("deleting runs", ApiKey.Scope.ADMIN, OWNER)  # the runs list's bulk delete


# ---- seeing --------------------------------------------------------------------------------


def projects_for(user) -> QuerySet[Project]:
    """Return the projects the user is a member of."""
    if not user.is_authenticated:
        return Project.objects.none()
    return Project.objects.filter(memberships__user=user)


def admin_projects_for(user) -> QuerySet[Project]:
    """Return the projects the user sees in the admin: a superuser's are all of them."""
    return Project.objects.all() if user.is_superuser else projects_for(user)


def runs_for(user) -> QuerySet[Run]:
    return Run.objects.filter(project__in=projects_for(user))


def traces_for(user) -> QuerySet[Trace]:
    return Trace.objects.filter(project__in=projects_for(user))


def get_run(user, run_id: int) -> Run:
    """Return the run if the user may see it; 404 (never 403, so ids do not leak)."""
    return get_object_or_404(runs_for(user).select_related("project", "trace"), pk=run_id)


def get_trace(user, trace_id: int) -> Trace:
    return get_object_or_404(traces_for(user).defer("raw"), pk=trace_id)


def get_project(user, slug_or_id: str | int, act: Act = READ) -> Project:
    """Return the project if the user may see it (404) and do `act` to it (`require`)."""
    projects = projects_for(user)
    if isinstance(slug_or_id, int) or str(slug_or_id).isdigit():
        project = get_object_or_404(projects, pk=int(slug_or_id))
    else:
        project = get_object_or_404(projects, slug=slug_or_id)
    require(user, project, act)
    return project


def get_issue(user, issue_id: int) -> LoopIssue:
    """Return the loop issue if the user may see it; 404 (never 403)."""
    issues = LoopIssue.objects.filter(project__in=projects_for(user))
    return get_object_or_404(issues.select_related("project", "first_run", "last_run"), pk=issue_id)


def get_backtest(user, job_id: int) -> BacktestJob:
    """Return a back-test of one of the user's projects, if the user may back-test (404)."""
    jobs = BacktestJob.objects.filter(project__in=projects_for(user))
    job = get_object_or_404(jobs.select_related("project", "user"), pk=job_id)
    require(user, job.project, BACKTEST)
    return job


# ---- doing: users --------------------------------------------------------------------------


def role_in(user, project: Project) -> str | None:
    """Return the user's web role in the project (MEMBER, OWNER or STAFF), or None."""
    if not user.is_authenticated:
        return None
    membership = project.memberships.filter(user=user).only("role").first()
    if membership is None:
        return STAFF if user.is_superuser else None
    if user.is_staff:
        return STAFF
    return OWNER if membership.role == Membership.Role.OWNER else MEMBER


def may(user, project: Project, act: Act) -> bool:
    """Whether the user may do `act` to the project on the web (or in the admin)."""
    roles = (MEMBER, OWNER, STAFF)
    role = role_in(user, project)
    return role is not None and roles.index(role) >= roles.index(act.role)


def require(user, project: Project, act: Act) -> None:
    """Raise unless the user may do `act`: 403 for a member who sees what they may not
    change; 404 for a staff-only page, which other members are not shown at all."""
    if may(user, project, act):
        return
    if act.role == STAFF:
        raise Http404(f"{act.doing} is for staff")
    raise PermissionDenied(f"{act.doing} is for the project's owners")


def may_tune(user) -> bool:
    """Whether the user sees Tuning at all (on a project, `require(..., CHANGE_POLICY)`)."""
    return bool(user.is_authenticated and user.is_staff)


def key_scopes_for(user) -> list[str]:
    """Return the scopes a user may give a new key: an admin key may do what STAFF may, so
    only staff (or an operator, user None) mint one."""
    scopes = [ApiKey.Scope.READ, ApiKey.Scope.INGEST]
    if user is None or user.is_staff:
        scopes.append(ApiKey.Scope.ADMIN)
    return scopes


# ---- doing: API keys -----------------------------------------------------------------------


def key_may(key: ApiKey, act: Act) -> bool:
    """Whether the key's scope allows `act`."""
    return key.allows(act.scope)


def key_refusal(key: ApiKey, act: Act, doing: str = "") -> str:
    """What the API says when the key may not do `act` ('' when it may)."""
    if key_may(key, act):
        return ""
    return (
        f"{doing or act.doing} needs a key with the {str(act.scope)!r} scope; this key's "
        f"scope is {key.scope!r}"
    )
