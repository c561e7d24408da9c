"""The alerts part of a project's settings page: the channel and rule forms, and what the
Channels, Rules and Delivery log sections show."""

from __future__ import annotations

from django import forms
from django.db.models import Count

from ..models import AlertRule, Channel, Delivery, Project
from ..services import access, alerts, channels, delivery, digest

DELIVERY_LOG_ROWS = 100


class ChannelForm(forms.Form):
    """A new channel: a webhook or Slack URL, or email recipients."""

    name = forms.CharField(max_length=100)
    kind = forms.ChoiceField(choices=Channel.Kind.choices)
    url = forms.CharField(
        max_length=2000, required=False, label="URL", help_text="webhook or Slack incoming webhook"
    )
    secret = forms.CharField(
        max_length=200,
        required=False,
        label="Signing secret",
        help_text="webhook; blank = generate one (shown once)",
        widget=forms.PasswordInput(render_value=False),
    )
    recipients = forms.CharField(
        max_length=5000, required=False, help_text="email: addresses, comma separated"
    )

    def data_for_service(self) -> channels.ChannelData:
        data = self.cleaned_data
        recipients = [r for r in data["recipients"].replace("\n", ",").split(",") if r.strip()]
        return channels.ChannelData(
            name=data["name"],
            kind=data["kind"],
            url=data["url"] if data["kind"] != Channel.Kind.EMAIL else None,
            secret=data["secret"] or None,
            recipients=recipients if data["kind"] == Channel.Kind.EMAIL else None,
        )


class RuleForm(forms.ModelForm):
    """A rule of any kind; the fields that do not apply to its kind are ignored."""

    class Meta:
        model = AlertRule
        fields = ["channels", *alerts.RULE_FIELDS]
        widgets = {"channels": forms.CheckboxSelectMultiple}
        help_texts = {
            "tools": "names or globs, comma separated; blank = any",
            "agents": "comma separated; blank = any",
            "detectors": "comma separated; blank = any",
            "hour": "digest: hour of day in the project's time zone",
        }

    def __init__(self, *args, project: Project, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.fields["channels"].queryset = project.channels.all()
        self.fields["channels"].required = False
        for name in ("tools", "agents", "detectors"):
            self.fields[name].required = False


def settings_context(project: Project, user, *, rule_form: RuleForm | None = None) -> dict:
    """What the Channels, Rules and Delivery log sections show."""
    editing = rule_form.instance if rule_form is not None and rule_form.instance.pk else None
    return {
        "can_manage": access.may(user, project, access.CHANGE_ALERTS),
        "channels": project.channels.annotate(rule_count=Count("rules")),
        "rules": project.alert_rules.prefetch_related("channels"),
        "channel_form": ChannelForm(prefix="channel"),
        "rule_form": rule_form or RuleForm(prefix="rule", project=project),
        "editing_rule": editing,
        "deliveries": delivery_log(project),
        "timezones": digest.timezone_names(),
    }


def delivery_log(project: Project) -> list[Delivery]:
    """The project's latest delivery attempts, newest first."""
    return list(delivery.log_of(project)[:DELIVERY_LOG_ROWS])
