"""Services: edit a project's thresholds, back-test a draft on recent runs, save it.

The back-test re-runs the engine in the request, so it is bounded: at most BACKTEST_RUNS
recent runs and BACKTEST_STEPS steps in all, and BACKTEST_SECONDS of work.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from fnmatch import fnmatchcase

from django import forms
from django.db import connection, transaction

import detection

from . import analysis
from .models import PolicyChange, Project, Run, ToolPolicy

BACKTEST_RUNS = 200
BACKTEST_STEPS = 300_000
BACKTEST_SECONDS = 10.0

TRISTATE = [("", "inherit"), ("yes", "yes"), ("no", "no")]


class DefaultsForm(forms.Form):
    """The project's defaults row."""

    scope = forms.ChoiceField(
        choices=[("", "per turn (default)"), ("turn", "per turn"), ("run", "whole run")],
        required=False,
    )
    warn = forms.IntegerField(min_value=1, required=False)
    stop = forms.IntegerField(min_value=1, required=False)
    max_steps = forms.IntegerField(min_value=0, required=False, label="Step budget")
    max_tokens = forms.IntegerField(min_value=0, required=False, label="Token budget")
    max_cost = forms.FloatField(min_value=0, required=False, label="Cost budget")


class ToolRowForm(forms.Form):
    """One per-tool row: an exact tool name or a glob."""

    tool = forms.CharField(
        max_length=200, required=False, widget=forms.TextInput(attrs={"list": "tool-names"})
    )
    warn = forms.IntegerField(min_value=1, required=False)
    stop = forms.IntegerField(min_value=1, required=False)
    max_repeats = forms.IntegerField(min_value=1, required=False)
    quota = forms.IntegerField(min_value=1, required=False)
    polling = forms.ChoiceField(choices=TRISTATE, required=False)
    mutating = forms.ChoiceField(choices=TRISTATE, required=False)


ToolRowFormSet = forms.formset_factory(ToolRowForm, extra=1, can_delete=True, max_num=200)

_TRI_IN = {"": None, "yes": True, "no": False}
_TRI_OUT = {None: "", True: "yes", False: "no"}


def forms_for(project: Project, data=None) -> tuple[DefaultsForm, forms.BaseFormSet]:
    """Return the bound (data) or initial forms for a project's policy."""
    if data is not None:
        return DefaultsForm(data, prefix="d"), ToolRowFormSet(data, prefix="t")
    policy = project.policy_dict()
    defaults = DefaultsForm(initial=policy["defaults"], prefix="d")
    rows = [
        {**values, "tool": tool, **{k: _TRI_OUT[values.get(k)] for k in ("polling", "mutating")}}
        for tool, values in sorted(policy["tools"].items())
    ]
    return defaults, ToolRowFormSet(initial=rows, prefix="t")


def draft_policy(project: Project, defaults: DefaultsForm, rows) -> tuple[dict | None, list[str]]:
    """Return the policy dict the forms describe (fields the form lacks kept), or errors."""
    if not (defaults.is_valid() and rows.is_valid()):
        errors = [f"{k}: {' '.join(v)}" for k, v in defaults.errors.items()]
        for i, form_errors in enumerate(rows.errors):
            errors += [f"row {i + 1} {k}: {' '.join(v)}" for k, v in form_errors.items()]
        errors += list(rows.non_form_errors())
        return None, errors
    current = project.policy_dict()
    out_defaults = {k: v for k, v in current["defaults"].items() if k not in defaults.fields}
    out_defaults |= {k: v for k, v in defaults.cleaned_data.items() if v not in (None, "")}
    tools: dict = {}
    errors: list[str] = []
    for form in rows.forms:
        data = getattr(form, "cleaned_data", {}) or {}
        pattern = (data.get("tool") or "").strip()
        if not pattern or data.get("DELETE"):
            continue
        if pattern in tools:
            errors.append(f"{pattern}: appears twice")
        kept = {k: v for k, v in current["tools"].get(pattern, {}).items() if k not in form.fields}
        values = {k: data.get(k) for k in ("warn", "stop", "max_repeats", "quota")}
        values |= {k: _TRI_IN[data.get(k) or ""] for k in ("polling", "mutating")}
        tools[pattern] = kept | {k: v for k, v in values.items() if v is not None}
    policy = {"defaults": out_defaults, "tools": tools}
    try:
        detection.Policy.from_dict(policy)
    except ValueError as exc:
        errors.append(str(exc))
    return (None if errors else policy), errors


@dataclass
class Change:
    run: Run
    before: str
    after: str
    findings: list = field(default_factory=list)

    @property
    def kind(self) -> str:
        flagged = ("warn", "stop")
        if self.before not in flagged and self.after in flagged:
            return "flagged"
        if self.before in flagged and self.after not in flagged:
            return "cleared"
        return "changed"


@dataclass
class Backtest:
    examined: int
    changes: list[Change]
    stopped_early: bool
    seconds: float

    def count(self, kind: str) -> int:
        return sum(1 for c in self.changes if c.kind == kind)

    @property
    def newly_flagged(self) -> int:
        return self.count("flagged")

    @property
    def cleared(self) -> int:
        return self.count("cleared")

    @property
    def changed(self) -> int:
        return self.count("changed")


def backtest(project: Project, policy: dict, *, limit: int = BACKTEST_RUNS) -> Backtest:
    """Re-run the engine with a draft policy over recent runs; return the verdicts it changes."""
    engine_policy = detection.Policy.from_dict(policy)
    began = time.monotonic()
    runs = (
        Run.objects.filter(project=project)
        .exclude(verdict="pending")
        .only("id", "name", "verdict", "step_count", "created_at", "project_id")
        .order_by("-created_at", "-id")[:limit]
    )
    examined, steps, changes, stopped = 0, 0, [], False
    for run in runs:
        if steps + run.step_count > BACKTEST_STEPS or time.monotonic() - began > BACKTEST_SECONDS:
            stopped = True
            break
        result = detection.analyze(analysis.iter_steps(run.pk), engine_policy)
        examined += 1
        steps += run.step_count
        if result.verdict != run.verdict:
            worst = [f for f in result.findings if f.severity != "info"][:1]
            changes.append(Change(run, run.verdict, result.verdict, worst))
    return Backtest(examined, changes, stopped, time.monotonic() - began)


def project_tools(project: Project) -> list[str]:
    """Return the distinct tool names seen in the project's runs."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT DISTINCT unnest(tools) FROM runs_run WHERE project_id = %s", [project.pk]
        )
        return [row[0] for row in cursor.fetchall()]


def affected_runs(project: Project, before: dict, after: dict):
    """Return the runs a policy change can alter: all when defaults change, else by tool."""
    runs = Run.objects.filter(project=project)
    if before.get("defaults") != after.get("defaults"):
        return runs
    old, new = before.get("tools", {}), after.get("tools", {})
    patterns = {p for p in old.keys() | new.keys() if old.get(p) != new.get(p)}
    if not patterns:
        return runs.none()
    tools = [t for t in project_tools(project) if any(fnmatchcase(t, p) for p in patterns)]
    return runs.filter(tools__overlap=tools) if tools else runs.none()


def describe(before: dict, after: dict) -> str:
    """Return a one-line-per-change summary of a policy change."""
    lines = []
    for key in sorted(before.get("defaults", {}).keys() | after.get("defaults", {}).keys()):
        a, b = before.get("defaults", {}).get(key), after.get("defaults", {}).get(key)
        if a != b:
            lines.append(f"defaults.{key}: {a!r} → {b!r}")
    old, new = before.get("tools", {}), after.get("tools", {})
    for tool in sorted(old.keys() | new.keys()):
        if tool not in new:
            lines.append(f"removed tool row {tool}")
        elif tool not in old:
            lines.append(f"added tool row {tool}: {new[tool]}")
        elif old[tool] != new[tool]:
            lines.append(f"{tool}: {old[tool]} → {new[tool]}")
    return "\n".join(lines)


def save_policy(project: Project, policy: dict, user) -> PolicyChange:
    """Replace the project's policy rows, record who changed what, re-analyze affected runs."""
    before = project.policy_dict()
    with transaction.atomic():
        rows = {"": policy.get("defaults", {})} | policy.get("tools", {})
        ToolPolicy.objects.filter(project=project).exclude(tool__in=list(rows)).delete()
        for tool, values in rows.items():
            fields = {name: values.get(name) for name in ToolPolicy.FIELDS}
            fields["volatile"] = fields["volatile"] or []
            fields["detectors"] = fields["detectors"] or {}
            fields["scope"] = fields["scope"] or ""
            ToolPolicy.objects.update_or_create(
                project=project, tool=tool, defaults=fields | {"updated_by": user}
            )
        after = project.policy_dict()
        count = analysis.reanalyze(affected_runs(project, before, after))
        return PolicyChange.objects.create(
            project=project,
            user=user,
            before=before,
            after=after,
            summary=describe(before, after),
            reanalyzed=count,
        )
