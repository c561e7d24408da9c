"""What loopboard stores: projects, raw traces, runs, their steps and findings, policy."""

from __future__ import annotations

import hashlib
import secrets
import threading

import zstandard
from django.conf import settings
from django.contrib.postgres.fields import ArrayField
from django.contrib.postgres.indexes import GinIndex
from django.contrib.postgres.search import SearchVectorField
from django.db import models
from django.db.models.functions import Coalesce, TruncDate
from django.db.models.signals import pre_delete
from django.dispatch import receiver
from django.urls import reverse
from django.utils import timezone

from . import rawstore


class Project(models.Model):
    """A team's space: its traces, runs, policy and members."""

    name = models.CharField(max_length=100)
    slug = models.SlugField(max_length=100, unique=True)
    members = models.ManyToManyField(
        settings.AUTH_USER_MODEL, through="Membership", related_name="projects", blank=True
    )
    created_at = models.DateTimeField(default=timezone.now)
    timezone = models.CharField(max_length=64, default="UTC")  # IANA name: the digest's hour
    # Retention (`services.retention`): how many days raw bytes, steps, and runs with their
    # findings are kept; None keeps them for ever. Projects made before retention existed
    # keep everything (migration 0026) until someone chooses.
    raw_retention_days = models.PositiveIntegerField(null=True, blank=True, default=30)
    step_retention_days = models.PositiveIntegerField(null=True, blank=True, default=90)
    run_retention_days = models.PositiveIntegerField(null=True, blank=True, default=365)
    # The stored bytes (raw, steps, findings) the alert channels are warned near; None: none.
    storage_budget_bytes = models.PositiveBigIntegerField(null=True, blank=True)

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
    # The bytes received (possibly gzipped), as `raw_encoding` stores them (`pack_raw`): read
    # them through `raw_bytes()`.
    raw = models.BinaryField()
    raw_encoding = models.CharField(max_length=8, blank=True)  # "": as received; "zstd"
    # Outside the database (LOOPBOARD_RAW_STORE, runs/rawstore.py): the object holding the
    # packed bytes, and its size; `raw` is then empty.
    raw_key = models.CharField(max_length=300, blank=True)
    raw_external_bytes = models.PositiveBigIntegerField(default=0)
    raw_expired_at = models.DateTimeField(null=True, blank=True)  # retention emptied `raw`
    declared_format = models.CharField(max_length=40, blank=True)  # what the uploader forced
    format = models.CharField(max_length=40, blank=True)  # what was used
    status = models.CharField(max_length=12, choices=Status, default=Status.RECEIVED)
    error = models.TextField(blank=True)
    skipped_lines = models.PositiveIntegerField(default=0)
    import_attempts = models.PositiveSmallIntegerField(default=0)  # imports started
    warnings = models.JSONField(default=list, blank=True)  # "file:line: reason", at most 100
    source = models.CharField(max_length=10, choices=Source, default=Source.UPLOAD)
    # The agent version the uploader gave (upload form, API); its runs take it at ingest.
    agent_version = models.CharField(max_length=100, blank=True)
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
        indexes = [
            models.Index(fields=["status", "updated_at"]),
            # Retention looks for a project's oldest traces that still hold their bytes.
            models.Index(
                fields=["project", "created_at"],
                name="trace_raw_kept",
                condition=models.Q(raw_expired_at=None),
            ),
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def is_finished(self) -> bool:
        return self.status in (self.Status.ANALYZED, self.Status.FAILED)

    def raw_bytes(self) -> bytes:
        """Return the bytes exactly as received (empty once retention has removed them)."""
        return unpack_raw(rawstore.read(self.raw, self.raw_key), self.raw_encoding)


#: bench/bench_raw_compression.py: nearly level 9's ratio (7.5x against 8.4x on the samples
#: in tests/data) at five times its speed.
ZSTD_LEVEL = 3
_zstd_c = threading.local()


def pack_raw(data: bytes) -> tuple[bytes, str]:
    """Return received bytes as stored, with their `Trace.raw_encoding`: zstd-compressed, or
    as they are when compressing saves nothing (an upload that is gzipped already)."""
    compressor = getattr(_zstd_c, "compressor", None)
    if compressor is None:  # not thread-safe: one per thread
        compressor = _zstd_c.compressor = zstandard.ZstdCompressor(level=ZSTD_LEVEL)
    packed = compressor.compress(data)
    return (packed, "zstd") if len(packed) < len(data) else (data, "")


@receiver(pre_delete, sender=Project)
def _forget_raw_objects(sender, instance: Project, **kwargs) -> None:  # type: ignore[no-untyped-def]
    """A deleted project's raw objects outside the database go once the deletion commits."""
    rawstore.forget(instance.traces.exclude(raw_key="").values_list("raw_key", flat=True))


def unpack_raw(stored: bytes | memoryview, encoding: str) -> bytes:
    """Return the received bytes from `Trace.raw` as stored with `encoding`."""
    if encoding == "zstd":
        return zstandard.ZstdDecompressor().decompress(bytes(stored))
    if encoding:
        raise ValueError(f"unknown raw encoding {encoding!r}")
    return bytes(stored)


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
    # Denormalised from the metadata at ingest (`services.ingest.agent_of`): loop issues
    # group and filter by them.
    agent = models.CharField(max_length=200, blank=True, db_index=True)
    agent_version = models.CharField(max_length=100, blank=True, db_index=True)
    step_count = models.PositiveIntegerField(default=0)
    tool_call_count = models.PositiveIntegerField(default=0)
    verdict = models.CharField(max_length=8, choices=Verdict, default=Verdict.PENDING)
    stall_score = models.FloatField(default=0)
    # Waste: what the loops cost from their warnings on, their own iterations only (README,
    # "waste"; None when the trace lacks it).
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
    # When retention deleted the run's steps: its verdict, findings and summary stay, and
    # it is never analyzed again (`issues.group_runs` refuses it).
    steps_expired_at = models.DateTimeField(null=True, blank=True)
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
    # When a live finding fired and the worker was asked to fold the run into its loop
    # issues (`live.group_live_issues`, queued once until it has run; recovery queues it
    # again when it is older than LOOPBOARD_STALE_SECONDS); None when nothing waits.
    issues_queued_at = models.DateTimeField(null=True, blank=True)

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
            # The Overview counts runs per day of their own start (received, without one).
            models.Index(
                "project",
                TruncDate(Coalesce("started_at", "created_at")),
                name="run_project_day",
            ),
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
    lane = models.CharField(max_length=255, blank=True)  # the actor (sub-agent); "": the main one

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
    # Findings over the same calls are one loop (detection.findings.group_loops): `loop` is
    # the position, in the run's findings, of the one that leads it (-1: its own, as live
    # findings are until the final analysis); only a lead counts for issues and waste.
    loop = models.IntegerField(default=-1)
    lead = models.BooleanField(default=True)
    # The loop's fingerprint (`detection.fingerprints`) and the issue it is grouped into.
    fingerprint = models.CharField(max_length=16, blank=True)
    issue = models.ForeignKey(
        "LoopIssue", null=True, blank=True, on_delete=models.SET_NULL, related_name="findings"
    )

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
    trace_id = models.CharField(max_length=32)  # the run buffer key: OTLP trace id or session
    # The key the spans carry in the request (their OTLP trace id) when the row was filed
    # under a session that a later span named (or that took their trace earlier); "" when
    # it is trace_id.
    span_key = models.CharField(max_length=32, blank=True, default="")
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
            models.Index(
                fields=["project", "span_key"],
                name="otlp_group_span_key",
                condition=~models.Q(span_key=""),
            ),
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


class StoppedCall(models.Model):
    """A call the live guard answered `stop` for: the agent was told not to make it (a hook
    denied it, the Python guard did not run it). It is not a step, and analysis never sees
    it; asking again at the same point of the run counts in `times`."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="stopped_calls")
    before_seq = models.PositiveIntegerField()  # the run's next seq when asked
    tool = models.CharField(max_length=200)
    args = models.TextField(blank=True)  # the arguments as JSON text, cut to ARGS_SHOWN
    message = models.TextField()  # what the agent was told
    detectors = ArrayField(models.CharField(max_length=40), default=list)
    times = models.PositiveIntegerField(default=1)
    first_at = models.DateTimeField(default=timezone.now)
    last_at = models.DateTimeField(default=timezone.now)

    ARGS_SHOWN = 2000

    class Meta:
        ordering = ["run", "before_seq"]
        constraints = [
            models.UniqueConstraint(
                fields=["run", "before_seq", "tool"], name="one_stopped_call_per_point"
            )
        ]

    def __str__(self) -> str:
        return f"{self.tool} stopped before #{self.before_seq} of run {self.run_id}"


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


# Labels ----------------------------------------------------------------------------------------


class Label(models.Model):
    """A person's judgement of one finding of a run: a real loop, or a false alarm and why.

    Re-analysis deletes and rewrites a run's findings (`services.analysis.write`), so a label
    keeps the finding's identity (detector, tool, signature, seq range) and is matched to the
    run's current findings by it (`services.labels`); `finding` is the row it was made on, NULL
    once that row is gone. Every judgement is kept; the latest one per finding identity counts.
    """

    class Verdict(models.TextChoices):
        REAL = "real", "real loop"
        FALSE = "false", "false alarm"

    class Reason(models.TextChoices):
        POLLING = "polling", "polling"
        PAGING = "paging", "paging"
        BATCH = "batch", "batch work"
        EDIT_RECHECK = "edit-recheck", "edit and re-check"
        OTHER = "other", "other"

    # Denormalised from the run: the export reads a project's labels by time without a join.
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="labels")
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="labels")
    # Its constraint, ON DELETE SET NULL, is made by migration 0014: PostgreSQL clears it, so
    # deleting a run's findings on re-analysis stays one DELETE (a Python-level SET_NULL makes
    # Django load every finding first; Django refuses DB_SET_NULL beside a CASCADE).
    finding = models.ForeignKey(
        Finding,
        null=True,
        blank=True,
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        related_name="labels",
    )
    # The finding's identity, copied so the label outlives the finding row.
    detector = models.CharField(max_length=40)
    tool = models.CharField(max_length=200, blank=True)
    signature = models.CharField(max_length=200, blank=True)
    fingerprint = models.CharField(max_length=64, blank=True)  # the loop's, across runs
    severity = models.CharField(max_length=5, choices=Finding.Severity)
    fired_at = models.PositiveIntegerField(default=0)
    started_at = models.PositiveIntegerField(null=True, blank=True)
    seq_first = models.PositiveIntegerField(null=True, blank=True)  # NULL: a run-wide finding
    seq_last = models.PositiveIntegerField(null=True, blank=True)
    verdict = models.CharField(max_length=5, choices=Verdict)
    reason = models.CharField(max_length=12, choices=Reason, blank=True)  # false alarms only
    text = models.CharField(max_length=500, blank=True)  # the reason in words, for "other"
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    created_at = models.DateTimeField(default=timezone.now)
    policy_version = models.PositiveIntegerField(default=0)  # policy.current_version then

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            models.Index(fields=["run", "-created_at"], name="label_run_newest"),
            models.Index(fields=["project", "created_at"], name="label_project_time"),
        ]

    def __str__(self) -> str:
        return (
            f"{self.get_verdict_display()}: {self.detector} {self.tool or 'run'} in {self.run_id}"
        )


# Alerts ----------------------------------------------------------------------------------------


class Channel(models.Model):
    """Where a project's alerts go: a signed webhook, a Slack incoming webhook or email.

    The URL and the signing secret are stored encrypted (`services.channels`), and shown
    again only as `hint`.
    """

    class Kind(models.TextChoices):
        WEBHOOK = "webhook"
        SLACK = "slack"
        EMAIL = "email"

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="channels")
    name = models.CharField(max_length=100)
    kind = models.CharField(max_length=8, choices=Kind)
    url_encrypted = models.TextField(blank=True)  # Fernet token; a Slack URL is a secret
    secret_encrypted = models.TextField(blank=True)  # Fernet token of the HMAC signing key
    # What the pages show of the URL and the secret, e.g. "hooks.slack.com/…abcd".
    hint = models.CharField(max_length=120, blank=True)
    recipients = ArrayField(models.EmailField(), default=list, blank=True)
    enabled = models.BooleanField(default=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["project", "name", "id"]

    def __str__(self) -> str:
        return f"{self.name} ({self.kind})"


class AlertRule(models.Model):
    """When to alert a project's channels: a run reaches a severity, a loop issue is new or
    regressed, a windowed rate crosses a threshold, or the daily digest's hour comes."""

    class Kind(models.TextChoices):
        RUN = "run", "a run reaches stop or warn"
        ISSUE = "issue", "a loop issue is new or regressed"
        RATE = "rate", "a windowed rate crosses a threshold"
        DIGEST = "digest", "a daily digest"

    class Metric(models.TextChoices):
        FLAGGED_SHARE = "flagged_share", "flagged runs as a share of runs (0–1)"
        WASTE_COST_PER_HOUR = "waste_cost_per_hour", "waste cost per hour"
        WASTE_TOKENS_PER_HOUR = "waste_tokens_per_hour", "waste tokens per hour"
        STOP_FINDINGS_PER_HOUR = "stop_findings_per_hour", "stop findings per hour"

    class NoData(models.TextChoices):
        OK = "ok", "counts as ok"
        ALERT = "alert", "counts as alert"
        KEEP = "keep", "keeps the last level"

    class Level(models.TextChoices):
        OK = "ok"
        WARN = "warn"
        ALERT = "alert"

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="alert_rules")
    name = models.CharField(max_length=100)
    kind = models.CharField(max_length=6, choices=Kind)
    channels = models.ManyToManyField(Channel, related_name="rules", blank=True)
    enabled = models.BooleanField(default=True)
    # kind "run": the least severity that fires, and optional filters (any of each list).
    severity = models.CharField(max_length=4, choices=Verdict.choices[2:], default=Verdict.STOP)
    tools = ArrayField(models.CharField(max_length=200), default=list, blank=True)
    agents = ArrayField(models.CharField(max_length=200), default=list, blank=True)
    detectors = ArrayField(models.CharField(max_length=40), default=list, blank=True)
    # kinds "run" and "issue": alerts over this many an hour are held and summed into the next.
    max_per_hour = models.PositiveIntegerField(default=10)
    # kind "rate"
    metric = models.CharField(max_length=24, choices=Metric, blank=True)
    window_minutes = models.PositiveIntegerField(default=60)
    warn_threshold = models.FloatField(null=True, blank=True)
    alert_threshold = models.FloatField(null=True, blank=True)
    no_data = models.CharField(max_length=5, choices=NoData, default=NoData.OK)
    state = models.CharField(max_length=5, choices=Level, default=Level.OK)  # the last level
    state_changed_at = models.DateTimeField(null=True, blank=True)
    # kind "digest": the hour of day, in the project's time zone
    hour = models.PositiveSmallIntegerField(default=9)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["project", "name", "id"]
        indexes = [models.Index(fields=["kind", "enabled"], name="alertrule_kind_enabled")]

    def __str__(self) -> str:
        return f"{self.name} ({self.kind})"


class Alert(models.Model):
    """One thing a rule fired for, once: its key ("run:123", "issue:7:regressed:…",
    "rate:<rule>:<minute>:<level>", "digest:2026-12-01") is unique per rule.

    A rule's alerts over its hourly cap are kept with `held` set and not delivered; the next
    alert delivered sums them up (`summed_into`).
    """

    # Null for a channel's "send test".
    rule = models.ForeignKey(
        AlertRule, null=True, blank=True, on_delete=models.CASCADE, related_name="alerts"
    )
    key = models.CharField(max_length=200)
    payload = models.JSONField(default=dict)
    held = models.BooleanField(default=False)
    summed_into = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="summed"
    )
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(fields=["rule", "key"], name="one_alert_per_rule_key")
        ]
        indexes = [models.Index(fields=["rule", "-created_at"], name="alert_rule_newest")]

    def __str__(self) -> str:
        return f"{self.key} ({self.rule_id})"


class Delivery(models.Model):
    """One attempt to send an alert to a channel, as the delivery log shows it."""

    class Status(models.TextChoices):
        SENT = "sent"
        FAILED = "failed"  # refused for good (a 4xx, a redirect, a refused address)
        RETRYING = "retrying"  # failed; another attempt follows
        GAVE_UP = "gave_up"  # failed on the last attempt

    alert = models.ForeignKey(Alert, on_delete=models.CASCADE, related_name="deliveries")
    channel = models.ForeignKey(Channel, on_delete=models.CASCADE, related_name="deliveries")
    attempt = models.PositiveSmallIntegerField(default=1)
    status = models.CharField(max_length=8, choices=Status)
    response_code = models.PositiveSmallIntegerField(null=True, blank=True)
    error = models.TextField(blank=True)
    payload_sha256 = models.CharField(max_length=64)  # of the body sent
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-created_at", "-id"]
        verbose_name_plural = "deliveries"
        indexes = [
            models.Index(fields=["channel", "-created_at"], name="delivery_channel_newest"),
            models.Index(fields=["alert", "channel"], name="delivery_alert_channel"),
        ]

    def __str__(self) -> str:
        return f"alert {self.alert_id} to {self.channel_id} #{self.attempt}: {self.status}"


# Back-tests ------------------------------------------------------------------------------------


class BacktestJob(models.Model):
    """One back-test: a frozen draft policy against the saved one over a range of stored runs.

    The worker claims the row, walks the runs in id order and writes its progress (and the
    results so far, with `cursor`) every second or so, so a job a dead worker left behind is
    resumed where it stopped (`services.backtest`).
    """

    class Kind(models.TextChoices):
        MANUAL = "manual"
        NIGHTLY = "nightly"

    class Status(models.TextChoices):
        QUEUED = "queued"
        RUNNING = "running"
        DONE = "done"
        CANCELLED = "cancelled"
        FAILED = "failed"

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="backtests")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    kind = models.CharField(max_length=8, choices=Kind, default=Kind.MANUAL)
    # The snapshot, frozen when the job is created: editing the policy meanwhile changes nothing.
    draft = models.JSONField(default=dict)  # the draft policy, canonical (policy.validate)
    baseline = models.JSONField(default=dict)  # the saved policy at that moment
    policy_version = models.PositiveIntegerField(default=0)  # policy.current_version then
    since = models.DateTimeField()
    until = models.DateTimeField()
    sample = models.PositiveIntegerField(null=True, blank=True)  # N runs of the range, or all
    night = models.DateField(null=True, blank=True)  # a nightly job's date: one per night
    status = models.CharField(max_length=9, choices=Status, default=Status.QUEUED)
    done = models.PositiveIntegerField(default=0)
    total = models.PositiveIntegerField(default=0)
    cancel_requested = models.BooleanField(default=False)
    # The last run id whose results are in `results`: a resumed job goes on after it.
    cursor = models.BigIntegerField(default=0)
    # Which claim owns the job: a worker's progress writes match it, so a worker that lost
    # the job (it was reclaimed as stale) stops at its next write.
    attempt = models.PositiveIntegerField(default=0)
    heartbeat_at = models.DateTimeField(null=True, blank=True)  # its last progress write
    created_at = models.DateTimeField(default=timezone.now)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    results = models.JSONField(default=dict, blank=True)  # see services.backtest.Tally
    error = models.TextField(blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["project", "night"],
                name="one_nightly_backtest_per_night",
                condition=models.Q(kind="nightly"),
            )
        ]
        indexes = [
            models.Index(fields=["project", "kind", "-created_at"], name="backtest_project_kind"),
            # Recovery looks for unfinished jobs every minute: only those are indexed.
            models.Index(
                fields=["heartbeat_at"],
                name="backtest_unfinished",
                condition=models.Q(status__in=["queued", "running"]),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.kind} back-test {self.pk} of {self.project}"

    def get_absolute_url(self) -> str:
        return reverse("runs:backtest", args=[self.pk])

    @property
    def is_finished(self) -> bool:
        return self.status in (self.Status.DONE, self.Status.CANCELLED, self.Status.FAILED)

    @property
    def percent(self) -> int:
        return int(100 * self.done / self.total) if self.total else (100 if self.is_finished else 0)


# Loop issues ----------------------------------------------------------------------------------


class LoopIssue(models.Model):
    """One kind of loop in a project: its findings across runs, grouped by fingerprint."""

    class State(models.TextChoices):
        OPEN = "open"
        RESOLVED = "resolved"
        IGNORED = "ignored"
        REGRESSED = "regressed"

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="loop_issues")
    fingerprint = models.CharField(max_length=16)
    detector = models.CharField(max_length=40)
    tool = models.CharField(max_length=200, blank=True)
    title = models.CharField(max_length=300)
    example_message = models.TextField(blank=True)  # the message of its first finding
    state = models.CharField(max_length=10, choices=State, default=State.OPEN)
    resolved_in_version = models.CharField(max_length=100, blank=True)
    state_changed_at = models.DateTimeField(null=True, blank=True)
    state_changed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    created_at = models.DateTimeField(default=timezone.now)
    # Everything below is denormalised from the issue's findings and their runs (kept under
    # the row lock by `services.issues.recount_runs`, each run's share in IssueRun), so the
    # Issues list sorts and filters a million findings' worth of issues without a GROUP BY.
    first_seen = models.DateTimeField(null=True, blank=True)
    last_seen = models.DateTimeField(null=True, blank=True)
    # No constraint in PostgreSQL: its check at commit would take a key-share lock on the
    # run, which a worker re-analysing that run holds FOR UPDATE while it waits for this
    # issue's row lock (a deadlock). Django still sets them NULL when the run is deleted.
    first_run = models.ForeignKey(
        Run, null=True, blank=True, on_delete=models.SET_NULL, related_name="+",
        db_constraint=False,
    )  # fmt: skip
    last_run = models.ForeignKey(
        Run, null=True, blank=True, on_delete=models.SET_NULL, related_name="+",
        db_constraint=False,
    )  # fmt: skip
    run_count = models.PositiveIntegerField(default=0)
    finding_count = models.PositiveIntegerField(default=0)
    waste_steps = models.PositiveBigIntegerField(default=0)
    waste_tokens = models.BigIntegerField(null=True, blank=True)
    waste_cost = models.FloatField(null=True, blank=True)
    waste_seconds = models.FloatField(null=True, blank=True)
    agents = ArrayField(models.CharField(max_length=200), default=list, blank=True)
    models_seen = ArrayField(models.CharField(max_length=200), default=list, blank=True)
    versions = ArrayField(models.CharField(max_length=100), default=list, blank=True)

    class Meta:
        ordering = ["-last_seen", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["project", "fingerprint"], name="one_issue_per_fingerprint"
            )
        ]
        indexes = [
            models.Index(fields=["project", "-last_seen", "-id"], name="issue_last_seen"),
            models.Index(fields=["project", "-run_count", "-id"], name="issue_runs"),
            models.Index(fields=["project", "-waste_steps", "-id"], name="issue_waste"),
            GinIndex(fields=["versions"], name="issue_versions_gin"),
        ]

    def __str__(self) -> str:
        return self.title

    def get_absolute_url(self) -> str:
        return reverse("runs:issue", args=[self.pk])


class IssueDay(models.Model):
    """One day of a loop issue: its runs, findings and waste that day (for the trend)."""

    issue = models.ForeignKey(LoopIssue, on_delete=models.CASCADE, related_name="days")
    day = models.DateField()
    runs = models.PositiveIntegerField(default=0)
    findings = models.PositiveIntegerField(default=0)
    waste_steps = models.PositiveBigIntegerField(default=0)

    class Meta:
        ordering = ["issue", "day"]
        constraints = [models.UniqueConstraint(fields=["issue", "day"], name="one_issue_day")]

    def __str__(self) -> str:
        return f"{self.issue_id} on {self.day}: {self.runs} runs"


class IssueRun(models.Model):
    """One run's share of a loop issue: what `services.issues` added to the issue's counters
    for it (so a re-analysis subtracts exactly that), and the index its page lists runs by."""

    issue = models.ForeignKey(LoopIssue, on_delete=models.CASCADE, related_name="issue_runs")
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="issue_runs")
    seen = models.DateTimeField()  # the run's COALESCE(started_at, created_at) when added
    findings = models.PositiveIntegerField(default=0)
    waste_steps = models.PositiveBigIntegerField(default=0)
    waste_tokens = models.BigIntegerField(null=True, blank=True)
    waste_cost = models.FloatField(null=True, blank=True)
    waste_seconds = models.FloatField(null=True, blank=True)
    agent = models.CharField(max_length=200, blank=True)
    model = models.CharField(max_length=200, blank=True)
    version = models.CharField(max_length=100, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["issue", "run"], name="one_issue_run")]
        indexes = [models.Index(fields=["issue", "-seen", "-run"], name="issue_run_seen")]

    def __str__(self) -> str:
        return f"{self.issue_id} in run {self.run_id}"


class IssueFacet(models.Model):
    """How many of a loop issue's runs (and findings) have one agent, model or agent version:
    the issue page's trend by version, and what keeps `LoopIssue.agents` / `models_seen` /
    `versions` exact when a run leaves the issue."""

    class Kind(models.TextChoices):
        AGENT = "agent"
        MODEL = "model"
        VERSION = "version"

    issue = models.ForeignKey(LoopIssue, on_delete=models.CASCADE, related_name="facets")
    kind = models.CharField(max_length=7, choices=Kind)
    value = models.CharField(max_length=200, blank=True)  # "" counts runs without one
    runs = models.PositiveIntegerField(default=0)
    findings = models.PositiveIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["issue", "kind", "value"], name="one_issue_facet")
        ]

    def __str__(self) -> str:
        return f"{self.issue_id} {self.kind}={self.value}: {self.runs} runs"


# Storage ---------------------------------------------------------------------------------------


class StorageDay(models.Model):
    """What one project stored on one day, as the retention beat last measured it that day."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="storage_days")
    day = models.DateField()
    raw_bytes = models.PositiveBigIntegerField(default=0)  # Trace.raw as stored (compressed)
    # Apportioned from the tables' size on disk by the project's share of their rows.
    step_bytes = models.PositiveBigIntegerField(default=0)
    finding_bytes = models.PositiveBigIntegerField(default=0)
    measured_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["project", "day"]
        constraints = [models.UniqueConstraint(fields=["project", "day"], name="one_storage_day")]

    def __str__(self) -> str:
        return f"{self.project_id} on {self.day}: {self.total_bytes} bytes"

    @property
    def total_bytes(self) -> int:
        return self.raw_bytes + self.step_bytes + self.finding_bytes


# Compare ---------------------------------------------------------------------------------------


class CompareJob(models.Model):
    """One comparison of two runs, computed in the worker and kept while both stay the same.

    `cache_key` digests what the result depends on (both runs' analysis, steps and appends,
    and the stored form's version: `services.compare.cache_key`), so opening the same pair
    again shows the stored result at once, and a changed run gets a new job. The worker
    claims the row, writes its progress every second or so (reading `cancel_requested`), and
    a job a dead worker left behind is claimed again once its heartbeat is stale.
    """

    class Status(models.TextChoices):
        QUEUED = "queued"
        RUNNING = "running"
        DONE = "done"
        CANCELLED = "cancelled"
        FAILED = "failed"

    # Denormalised from `left`: who may see the job is decided on both runs, this is for
    # the admin and for deleting a project's jobs with it.
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="compare_jobs")
    left = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="+")
    right = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="+")
    cache_key = models.CharField(max_length=64)
    status = models.CharField(max_length=9, choices=Status, default=Status.QUEUED)
    progress = models.FloatField(default=0)  # 0 to 1
    phase = models.CharField(max_length=40, blank=True)  # what the worker is doing, in words
    cancel_requested = models.BooleanField(default=False)
    # Which claim owns the job: a worker's writes match it, so one that lost the job (it was
    # reclaimed as stale) stops at its next write.
    attempt = models.PositiveIntegerField(default=0)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    # The comparison in a compact form (`services.compare.encode`): zlib over JSON columns.
    result = models.BinaryField(null=True, blank=True, editable=False)
    error = models.TextField(blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            # Two requests opening the same compare at once make one job.
            models.UniqueConstraint(
                fields=["left", "right", "cache_key"], name="one_compare_job_per_state"
            )
        ]

    def __str__(self) -> str:
        return f"compare {self.left_id} with {self.right_id} ({self.status})"

    def get_absolute_url(self) -> str:
        return reverse("runs:compare", args=[self.left_id, self.right_id])

    @property
    def is_finished(self) -> bool:
        return self.status in (self.Status.DONE, self.Status.CANCELLED, self.Status.FAILED)

    @property
    def percent(self) -> int:
        return 100 if self.status == self.Status.DONE else min(int(100 * self.progress), 99)
