"""What loopboard stores: projects, raw traces, runs, their steps and findings, policy."""

from __future__ import annotations

import hashlib
import secrets

from django.conf import settings
from django.contrib.postgres.fields import ArrayField
from django.contrib.postgres.indexes import GinIndex
from django.contrib.postgres.search import SearchVectorField
from django.db import models
from django.urls import reverse
from django.utils import timezone


class Project(models.Model):
    """A team's space: its traces, runs, policy and members."""

    name = models.CharField(max_length=100)
    slug = models.SlugField(max_length=100, unique=True)
    members = models.ManyToManyField(
        settings.AUTH_USER_MODEL, through="Membership", related_name="projects", blank=True
    )
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Membership(models.Model):
    """A user's membership of a project."""

    class Role(models.TextChoices):
        OWNER = "owner"
        MEMBER = "member"

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="memberships")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships"
    )
    role = models.CharField(max_length=10, choices=Role, default=Role.MEMBER)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["project", "user"], name="one_membership_per_user")
        ]

    def __str__(self) -> str:
        return f"{self.user} in {self.project}"


class ApiKey(models.Model):
    """A project's API key; only its hash is stored, the key is shown once."""

    class Scope(models.TextChoices):
        # Each scope may do what the ones before it may.
        READ = "read", "read: runs, findings, policy, the live check"
        INGEST = "ingest", "ingest: read, and send traces"
        ADMIN = "admin", "admin: ingest, and change the policy and re-analyze"

    PREFIX = "lb_"

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="api_keys")
    name = models.CharField(max_length=100)
    prefix = models.CharField(max_length=16)  # first characters, to tell keys apart
    key_hash = models.CharField(max_length=64, unique=True)
    scope = models.CharField(max_length=6, choices=Scope, default=Scope.INGEST)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    created_at = models.DateTimeField(default=timezone.now)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"

    @classmethod
    def hash(cls, key: str) -> str:
        return hashlib.sha256(key.encode()).hexdigest()

    @classmethod
    def issue(
        cls, project: Project, name: str, user=None, scope: str = Scope.INGEST
    ) -> tuple[ApiKey, str]:
        """Create a key for the project; return the row and the plain key (shown once)."""
        key = cls.PREFIX + secrets.token_urlsafe(32)
        row = cls.objects.create(
            project=project, name=name, prefix=key[:10], key_hash=cls.hash(key),
            created_by=user, scope=scope,
        )  # fmt: skip
        return row, key

    def allows(self, scope: str) -> bool:
        """Return whether this key may do what `scope` needs."""
        order = list(self.Scope.values)
        return order.index(self.scope) >= order.index(scope)

    @property
    def is_active(self) -> bool:
        return self.revoked_at is None


class Trace(models.Model):
    """One received trace file, kept byte for byte, and how its import went."""

    class Status(models.TextChoices):
        RECEIVED = "received"
        PARSING = "parsing"
        ANALYZING = "analyzing"
        ANALYZED = "analyzed"
        FAILED = "failed"

    class Source(models.TextChoices):
        UPLOAD = "upload"
        API = "api"
        OTLP = "otlp"
        CLI = "cli"
        DEMO = "demo"

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="traces")
    name = models.CharField(max_length=255)  # the uploaded file's name
    sha256 = models.CharField(max_length=64)
    size = models.PositiveBigIntegerField()
    raw = models.BinaryField()  # exactly the bytes received (possibly gzipped)
    declared_format = models.CharField(max_length=40, blank=True)  # what the uploader forced
    format = models.CharField(max_length=40, blank=True)  # what was used
    status = models.CharField(max_length=12, choices=Status, default=Status.RECEIVED)
    error = models.TextField(blank=True)
    skipped_lines = models.PositiveIntegerField(default=0)
    import_attempts = models.PositiveSmallIntegerField(default=0)  # imports started
    warnings = models.JSONField(default=list, blank=True)  # "file:line: reason", at most 100
    source = models.CharField(max_length=10, choices=Source, default=Source.UPLOAD)
    uploaded_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(fields=["project", "sha256"], name="one_trace_per_content")
        ]
        indexes = [models.Index(fields=["status", "updated_at"])]

    def __str__(self) -> str:
        return self.name

    @property
    def is_finished(self) -> bool:
        return self.status in (self.Status.ANALYZED, self.Status.FAILED)


class Verdict(models.TextChoices):
    PENDING = "pending"
    OK = "ok"
    WARN = "warn"
    STOP = "stop"


class Run(models.Model):
    """One agent session from a trace, with the engine's summary of it."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="runs")
    trace = models.ForeignKey(
        Trace, null=True, blank=True, on_delete=models.CASCADE, related_name="runs"
    )
    external_id = models.CharField(max_length=255)
    name = models.CharField(max_length=255)
    format = models.CharField(max_length=40)
    metadata = models.JSONField(default=dict, blank=True)
    step_count = models.PositiveIntegerField(default=0)
    tool_call_count = models.PositiveIntegerField(default=0)
    verdict = models.CharField(max_length=8, choices=Verdict, default=Verdict.PENDING)
    stall_score = models.FloatField(default=0)
    # Waste: what the steps after the first warning cost (None when the trace lacks it).
    waste_steps = models.PositiveIntegerField(default=0)
    waste_tokens = models.BigIntegerField(null=True, blank=True)
    waste_cost = models.FloatField(null=True, blank=True)
    waste_seconds = models.FloatField(null=True, blank=True)
    # Denormalised from the findings and steps so the runs list filters without joins.
    detectors = ArrayField(models.CharField(max_length=40), default=list, blank=True)
    tools = ArrayField(models.CharField(max_length=200), default=list, blank=True)
    summary = models.JSONField(default=dict, blank=True)  # stall series, repeat picture
    started_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    analyzed_at = models.DateTimeField(null=True, blank=True)
    # Denormalised for the runs list's free text: tool names plus a bounded sample of the
    # arguments (`services.analysis.StepSample`), as a tsvector so a GIN index answers it.
    search = SearchVectorField(null=True, blank=True, editable=False)
    # A live run (opened through the live API, format "live") takes appends; `next_seq` and
    # `version` change under the row lock of each append, so every web process can tell
    # from this row alone which steps its cached Monitor has not seen yet.
    live = models.BooleanField(default=False)
    next_seq = models.PositiveIntegerField(default=0)
    version = models.PositiveBigIntegerField(default=0)  # appends so far
    last_append_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            # The live API addresses a run by the agent's session id within the project.
            models.UniqueConstraint(
                fields=["project", "external_id"],
                name="one_live_run_per_external_id",
                condition=models.Q(format="live"),
            )
        ]
        indexes = [
            models.Index(fields=["project", "-created_at", "-id"]),
            models.Index(fields=["project", "verdict", "-created_at"]),
            models.Index(fields=["project", "-stall_score", "-id"]),
            models.Index(fields=["project", "-waste_steps", "-id"], name="run_project_waste"),
            GinIndex(fields=["detectors"], name="run_detectors_gin"),
            GinIndex(fields=["tools"], name="run_tools_gin"),
            GinIndex(fields=["search"], name="run_search_gin"),
            # For users in several projects: the list walks these in order (keyset).
            models.Index(fields=["-created_at", "-id"], name="run_newest"),
            models.Index(fields=["-stall_score", "-id"], name="run_stall"),
            models.Index(fields=["-waste_steps", "-id"], name="run_waste"),
            # Recovery looks for runs left pending every minute: only those are indexed.
            models.Index(
                fields=["created_at"], name="run_pending", condition=models.Q(verdict="pending")
            ),
            # The beat ends live runs gone quiet: only live runs are indexed.
            models.Index(
                fields=["last_append_at"], name="run_live_quiet", condition=models.Q(live=True)
            ),
        ]

    def __str__(self) -> str:
        return self.name

    def get_absolute_url(self) -> str:
        return reverse("runs:detail", args=[self.pk])

    @property
    def is_flagged(self) -> bool:
        return self.verdict in (Verdict.WARN, Verdict.STOP)

    @property
    def duration_seconds(self) -> float | None:
        if self.started_at and self.ended_at:
            return (self.ended_at - self.started_at).total_seconds()
        return None


class Step(models.Model):
    """One step of a run: a message, or a tool call with its result (the common model)."""

    class Kind(models.TextChoices):
        USER = "user"
        ASSISTANT = "assistant"
        TOOL_CALL = "tool_call"
        SYSTEM = "system"
        REASONING = "reasoning"

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="steps")
    seq = models.PositiveIntegerField()
    kind = models.CharField(max_length=10, choices=Kind)
    source_id = models.CharField(max_length=255, blank=True)  # the source's own id
    parent_id = models.CharField(max_length=255, blank=True)  # the source's parent id
    tool = models.CharField(max_length=200, blank=True)
    args = models.JSONField(null=True, blank=True)
    result = models.JSONField(null=True, blank=True)
    status = models.CharField(max_length=8, default="ok")  # ok, error or invalid
    batch_id = models.CharField(max_length=255, blank=True)
    text = models.TextField(blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    tokens_in = models.IntegerField(null=True, blank=True)
    tokens_out = models.IntegerField(null=True, blank=True)
    cost = models.FloatField(null=True, blank=True)
    call_sig = models.CharField(max_length=80, blank=True)  # detection.keys.call_signature

    class Meta:
        ordering = ["run", "seq"]
        constraints = [models.UniqueConstraint(fields=["run", "seq"], name="one_step_per_seq")]
        indexes = [
            models.Index(fields=["run", "call_sig"]),
            # A live append looks its steps' ids up, so a retried step is not stored twice.
            models.Index(
                fields=["run", "source_id"],
                name="step_source_id",
                condition=~models.Q(source_id=""),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.run_id}#{self.seq} {self.tool or self.kind}"


class Finding(models.Model):
    """One thing the engine found in a run: a loop, a stall, a budget breach."""

    class Severity(models.TextChoices):
        INFO = "info"
        WARN = "warn"
        STOP = "stop"

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="findings")
    detector = models.CharField(max_length=40)
    severity = models.CharField(max_length=5, choices=Severity)
    tool = models.CharField(max_length=200, blank=True)
    signature = models.CharField(max_length=200, blank=True)
    seqs = ArrayField(models.PositiveIntegerField(), default=list)
    count = models.PositiveIntegerField(default=0)
    threshold = models.PositiveIntegerField(default=0)
    fired_at = models.PositiveIntegerField(default=0)  # the seq where it first crossed a threshold
    started_at = models.PositiveIntegerField(null=True, blank=True)  # its first iteration's seq
    stop_at = models.PositiveIntegerField(null=True, blank=True)  # where it crossed stop
    rule = models.CharField(max_length=255, blank=True)  # the policy row that set the threshold
    message = models.TextField()
    waste_steps = models.PositiveIntegerField(default=0)
    waste_tokens = models.BigIntegerField(null=True, blank=True)
    waste_cost = models.FloatField(null=True, blank=True)
    waste_seconds = models.FloatField(null=True, blank=True)

    class Meta:
        ordering = ["run", "fired_at", "id"]
        indexes = [models.Index(fields=["detector"]), models.Index(fields=["tool"])]

    def __str__(self) -> str:
        return f"{self.detector} {self.severity} on {self.tool or 'run'}"

    def crossings(self) -> list[tuple[str, int]]:
        """Return (severity, seq) for each threshold it crossed: warn, then stop."""
        if self.stop_at is not None and self.stop_at != self.fired_at:
            return [("warn", self.fired_at), ("stop", self.stop_at)]
        return [(self.severity, self.fired_at)]


class ToolPolicy(models.Model):
    """One row of a project's policy: the defaults (blank tool) or a tool name / glob."""

    class Scope(models.TextChoices):
        TURN = "turn"
        RUN = "run"

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="tool_policies")
    tool = models.CharField(
        max_length=200,
        blank=True,
        help_text="Exact tool name or glob (mcp__*__bash); blank = defaults",
    )
    scope = models.CharField(max_length=4, choices=Scope, blank=True, help_text="defaults row only")
    warn = models.PositiveIntegerField(null=True, blank=True)
    stop = models.PositiveIntegerField(null=True, blank=True)
    max_repeats = models.PositiveIntegerField(null=True, blank=True)
    polling = models.BooleanField(null=True, blank=True)
    mutating = models.BooleanField(null=True, blank=True)
    quota = models.PositiveIntegerField(null=True, blank=True)
    volatile = models.JSONField(default=list, blank=True)
    max_steps = models.PositiveIntegerField(null=True, blank=True)
    max_tokens = models.PositiveBigIntegerField(null=True, blank=True)
    max_cost = models.FloatField(null=True, blank=True)
    detectors = models.JSONField(default=dict, blank=True)  # {"oscillation": {"warn": 3}}
    updated_at = models.DateTimeField(auto_now=True)
    updated_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )

    FIELDS = (
        "scope",
        "warn",
        "stop",
        "max_repeats",
        "polling",
        "mutating",
        "quota",
        "volatile",
        "max_steps",
        "max_tokens",
        "max_cost",
        "detectors",
    )

    class Meta:
        ordering = ["project", "tool"]
        verbose_name_plural = "tool policies"
        constraints = [
            models.UniqueConstraint(fields=["project", "tool"], name="one_policy_row_per_tool")
        ]

    def __str__(self) -> str:
        return f"{self.project}: {self.tool or 'defaults'}"


class PolicyChange(models.Model):
    """An audit record: who changed a project's policy, when, and from what to what."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="policy_changes")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    created_at = models.DateTimeField(default=timezone.now)
    before = models.JSONField(default=dict)
    after = models.JSONField(default=dict)
    summary = models.TextField(blank=True)
    reanalyzed = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.project} policy changed {self.created_at:%Y-%m-%d %H:%M}"


class OtlpSpanGroup(models.Model):
    """The spans of one OTLP trace id that arrived in one request (the OTLP span buffer).

    The request's bytes are kept whole as a Trace (source "otlp"); these rows say which
    trace ids each request holds, so the spans of one trace id that arrive in several
    requests are assembled into one run (`runs.services.otlp`).
    """

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="otlp_groups")
    # The export request that brought the spans, kept whole as a Trace.
    request = models.ForeignKey(Trace, on_delete=models.CASCADE, related_name="otlp_groups")
    trace_id = models.CharField(max_length=32)  # OTLP trace id, hex
    span_count = models.PositiveIntegerField(default=0)
    has_root = models.BooleanField(default=False)  # the root span (no parent) is in here
    received_at = models.DateTimeField(default=timezone.now)
    assembled = models.BooleanField(default=False)  # its spans are in the run
    run = models.ForeignKey(
        Run, null=True, blank=True, on_delete=models.SET_NULL, related_name="otlp_groups"
    )

    class Meta:
        indexes = [
            models.Index(fields=["project", "trace_id"]),
            models.Index(fields=["request"]),
            # Recovery looks for groups left unassembled every minute: only those are indexed.
            models.Index(
                fields=["received_at"],
                name="otlp_group_waiting",
                condition=models.Q(assembled=False),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.trace_id} in trace {self.request_id}"


class RateBucket(models.Model):
    """An API key's token bucket for rate limiting, shared by every web worker."""

    key = models.OneToOneField(ApiKey, on_delete=models.CASCADE, primary_key=True)
    tokens = models.FloatField()
    updated_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"{self.key_id}: {self.tokens:.1f}"


class LedgerRow(models.Model):
    """One repeated tool call in a run's progress ledger (calls that were new are not stored).

    Denormalised from the engine's ledger at analysis time so the ledger table, the timeline's
    ×count and the folded bands read a few rows instead of re-running the engine.
    """

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="ledger_rows")
    seq = models.PositiveIntegerField()
    tool = models.CharField(max_length=200, blank=True)
    repeat_of = models.PositiveIntegerField()  # first seq of the no-progress group
    count = models.PositiveIntegerField()  # calls in that group so far (2 = first repeat)

    class Meta:
        ordering = ["run", "seq"]
        constraints = [
            models.UniqueConstraint(fields=["run", "seq"], name="one_ledger_row_per_seq")
        ]

    def __str__(self) -> str:
        return f"{self.run_id}#{self.seq} repeats #{self.repeat_of} (x{self.count})"
