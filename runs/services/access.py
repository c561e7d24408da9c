"""Who may see what: a user sees only the projects they belong to (404 otherwise); and who
may do the acts that need more than membership, one rule each for the web and the API."""

from __future__ import annotations

from django.db.models import QuerySet
from django.shortcuts import get_object_or_404

from ..models import ApiKey, BacktestJob, LoopIssue, Membership, Project, Run, Trace


def projects_for(user) -> QuerySet[Project]:
    """Return the projects the user is a member of."""
    if not user.is_authenticated:
        return Project.objects.none()
    return Project.objects.filter(memberships__user=user)


def runs_for(user) -> QuerySet[Run]:
    return Run.objects.filter(project__in=projects_for(user))


def traces_for(user) -> QuerySet[Trace]:
    return Trace.objects.filter(project__in=projects_for(user))


def get_run(user, run_id: int) -> Run:
    """Return the run if the user may see it; 404 (never 403, so ids do not leak)."""
    return get_object_or_404(runs_for(user).select_related("project", "trace"), pk=run_id)


def get_trace(user, trace_id: int) -> Trace:
    return get_object_or_404(traces_for(user).defer("raw"), pk=trace_id)


def get_project(user, slug_or_id: str | int) -> Project:
    projects = projects_for(user)
    if isinstance(slug_or_id, int) or str(slug_or_id).isdigit():
        return get_object_or_404(projects, pk=int(slug_or_id))
    return get_object_or_404(projects, slug=slug_or_id)


def get_issue(user, issue_id: int) -> LoopIssue:
    """Return the loop issue if the user may see it; 404 (never 403)."""
    issues = LoopIssue.objects.filter(project__in=projects_for(user))
    return get_object_or_404(issues.select_related("project", "first_run", "last_run"), pk=issue_id)


def get_backtest(user, job_id: int) -> BacktestJob:
    """Return a back-test of one of the user's projects; 404 (never 403)."""
    jobs = BacktestJob.objects.filter(project__in=projects_for(user))
    return get_object_or_404(jobs.select_related("project", "user"), pk=job_id)


# Resolving, ignoring or reopening a loop issue is a project admin's act: in the API a key
# with this scope, on the web a project admin (`is_project_admin`).
ISSUE_STATE_SCOPE = ApiKey.Scope.ADMIN


def is_project_admin(user, project: Project) -> bool:
    """Whether the user is the web's counterpart of an admin key for the project: one of its
    owners, or a staff member of it."""
    if not user.is_authenticated:
        return False
    if user.is_staff:
        return project.memberships.filter(user=user).exists()
    return project.memberships.filter(user=user, role=Membership.Role.OWNER).exists()


def may_change_issue_state(user, project: Project) -> bool:
    """Whether the user may resolve, ignore or reopen the project's loop issues (the API asks
    for an ISSUE_STATE_SCOPE key)."""
    return is_project_admin(user, project)
