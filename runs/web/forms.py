"""The Tuning page's forms: the defaults row and the per-tool rows, turned into a draft policy."""

from __future__ import annotations

from django import forms

from ..models import Project
from ..services.policy import INT_LIMIT, current, validate

TRISTATE = [("", "inherit"), ("yes", "yes"), ("no", "no")]


class DefaultsForm(forms.Form):
    """The project's defaults row."""

    scope = forms.ChoiceField(
        choices=[("", "per turn (default)"), ("turn", "per turn"), ("run", "whole run")],
        required=False,
    )
    warn = forms.IntegerField(min_value=1, max_value=INT_LIMIT, required=False)
    stop = forms.IntegerField(min_value=1, max_value=INT_LIMIT, required=False)
    max_steps = forms.IntegerField(
        min_value=0, max_value=INT_LIMIT, required=False, label="Step budget"
    )
    max_tokens = forms.IntegerField(
        min_value=0, max_value=INT_LIMIT, required=False, label="Token budget"
    )
    max_cost = forms.FloatField(
        min_value=0, max_value=INT_LIMIT, required=False, label="Cost budget"
    )


class ToolRowForm(forms.Form):
    """One per-tool row: an exact tool name or a glob."""

    tool = forms.CharField(
        max_length=200, required=False, widget=forms.TextInput(attrs={"list": "tool-names"})
    )
    warn = forms.IntegerField(min_value=1, max_value=INT_LIMIT, required=False)
    stop = forms.IntegerField(min_value=1, max_value=INT_LIMIT, required=False)
    max_repeats = forms.IntegerField(min_value=1, max_value=INT_LIMIT, required=False)
    quota = forms.IntegerField(min_value=1, max_value=INT_LIMIT, required=False)
    polling = forms.ChoiceField(choices=TRISTATE, required=False)
    mutating = forms.ChoiceField(choices=TRISTATE, required=False)


class ToolRowBaseFormSet(forms.BaseFormSet):
    """The tool rows, one table row each: every control is named after its column and row,
    since the table's header is its only visible label."""

    COLUMNS = {
        "tool": "Tool or glob",
        "warn": "Warn at",
        "stop": "Stop at",
        "max_repeats": "Max repeats",
        "quota": "Quota",
        "polling": "Polling",
        "mutating": "Mutating",
        "DELETE": "Remove",
    }

    def add_fields(self, form, index) -> None:
        super().add_fields(form, index)
        row = "new row" if index is None else f"row {index + 1}"
        for name, field in form.fields.items():
            field.widget.attrs["aria-label"] = f"{self.COLUMNS.get(name, name)}, {row}"


ToolRowFormSet = forms.formset_factory(
    ToolRowForm, formset=ToolRowBaseFormSet, extra=1, can_delete=True, max_num=200
)

_TRI_IN = {"": None, "yes": True, "no": False}
_TRI_OUT = {None: "", True: "yes", False: "no"}


def forms_for(project: Project, data=None) -> tuple[DefaultsForm, forms.BaseFormSet]:
    """Return the bound (data) or initial forms for a project's policy."""
    if data is not None:
        return DefaultsForm(data, prefix="d"), ToolRowFormSet(data, prefix="t")
    policy = current(project)
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
    saved = current(project)
    out_defaults = {k: v for k, v in saved["defaults"].items() if k not in defaults.fields}
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
        kept = {k: v for k, v in saved["tools"].get(pattern, {}).items() if k not in form.fields}
        values = {k: data.get(k) for k in ("warn", "stop", "max_repeats", "quota")}
        values |= {k: _TRI_IN[data.get(k) or ""] for k in ("polling", "mutating")}
        tools[pattern] = kept | {k: v for k, v in values.items() if v is not None}
    policy = {"defaults": out_defaults, "tools": tools}
    try:
        validate(policy)
    except ValueError as exc:
        errors.append(str(exc))
    return (None if errors else policy), errors


class IssueStateForm(forms.Form):
    """A person's decision on a loop issue (the rules live in `services.issues.set_state`)."""

    action = forms.ChoiceField(choices=[("resolve", "Resolve"), ("ignore", "Ignore"),
                                        ("reopen", "Reopen")])  # fmt: skip
    version = forms.CharField(required=False, max_length=100)
