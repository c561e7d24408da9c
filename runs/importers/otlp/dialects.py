"""The OpenTelemetry dialects agents write, as one table: which span is a tool call, a model
call or an agent, and where each dialect keeps the tool, its arguments, its result, the call
id, the model's output, tokens, the session and its own failure flag.

Written from the format notes §3.10 and §3.23 (each library's attribute names). A span's role
is found by walking `DIALECTS` in order: a dialect matches by the value of its kind attribute
(`kinds`, compared case-folded, one JSON layer unwrapped: MLflow writes `"\\"TOOL\\""`; for
the Vercel AI SDK the span name may stand for it), by an
exact span name (`names`), by a span-name prefix (`prefixes`) or by a marker attribute whose
presence alone says "tool" (`marker`, Pydantic AI's `gen_ai.tool.name`); `requires` limits a
dialect to spans carrying one of its own attributes (Google ADK's `gcp.vertex.agent.*`). The
first dialect that says "tool", "llm" or "detail" wins; a dialect that only says "agent" or
"group" (Langfuse `span`, Traceloop `task`) is kept unless a later one knows better, except
for a `final` dialect (OpenLIT's span names: `coding_agent.tool.requested` is no call).

Roles: "tool" (a tool_call step), "llm" (an assistant step), "agent" (a system step that names
the agent), "group" (a system step), "detail" (a child span of a tool span that only says how
the call went, Claude Code's `claude_code.tool.execution` / `.blocked_on_user`: folded into
the parent tool step, no step of its own).

Field lookups try the dialect's keys first, then the GenAI semantic-convention keys
(`COMMON`), so a span that carries both reads the same.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from itertools import repeat
from typing import Any

TOOL, LLM, AGENT, GROUP, DETAIL = "tool", "llm", "agent", "group", "detail"
STRONG = {TOOL, LLM, DETAIL}


@dataclass(frozen=True, slots=True)
class Dialect:
    """Where one instrumentation library puts what a step needs (see the module docstring)."""

    name: str
    kind_attr: str = ""
    kind_in_name: bool = False  # the span name may stand for the kind attribute (Vercel)
    kinds: dict[str, str] = field(default_factory=dict)
    names: dict[str, str] = field(default_factory=dict)
    prefixes: tuple[tuple[str, str], ...] = ()
    marker: str = ""
    requires: str = ""  # an attribute key prefix that must be present
    tool: tuple[str, ...] = ()
    args: tuple[str, ...] = ()
    result: tuple[str, ...] = ()
    call_id: tuple[str, ...] = ()
    output: tuple[str, ...] = ()  # a model span's output (text or JSON text)
    calls: tuple[str, ...] = ()  # a model span's requested tool calls (JSON list)
    tokens_in: tuple[str, ...] = ()
    tokens_out: tuple[str, ...] = ()
    usage: tuple[str, ...] = ()  # JSON objects of token counts
    model: tuple[str, ...] = ()
    cost: tuple[str, ...] = ()
    agent: tuple[str, ...] = ()
    session: tuple[str, ...] = ()
    level: str = ""  # its value "ERROR" is a failure (Langfuse)
    status_message: str = ""
    success: str = ""  # its value false / "false" is a failure (Claude Code)
    error: tuple[str, ...] = ()  # the error text of a failure
    result_errors: bool = False  # a result object {"error": ...} / {"status": "Failure"} fails
    strip: tuple[str, ...] = ()  # span-name prefixes cut off to name a tool
    final: bool = False  # its word on a span it knows is the last, even "group"
    capture: str = ""  # how to make the library record arguments and results, when it can


COMMON = Dialect(
    name="gen_ai",
    tool=("gen_ai.tool.name",),
    args=("gen_ai.tool.call.arguments", "gen_ai.tool.args"),
    result=("gen_ai.tool.call.result", "gen_ai.tool.result"),
    call_id=("gen_ai.tool.call.id",),
    output=("gen_ai.output.messages", "gen_ai.completion"),
    tokens_in=("gen_ai.usage.input_tokens", "gen_ai.usage.prompt_tokens"),
    tokens_out=("gen_ai.usage.output_tokens", "gen_ai.usage.completion_tokens"),
    model=("gen_ai.response.model", "gen_ai.request.model"),
    agent=("gen_ai.agent.name", "agent.name", "agent_name"),
    session=("session.id", "gen_ai.conversation.id"),
    strip=("execute_tool ",),
)

_LLM_OPS = {"chat": LLM, "text_completion": LLM, "generate_content": LLM, "completion": LLM}

DIALECTS: tuple[Dialect, ...] = (
    Dialect(  # Claude Code native telemetry (§3.23): CLAUDE_CODE_ENHANCED_TELEMETRY_BETA spans
        name="claude_code",
        names={
            "claude_code.tool": TOOL,
            "claude_code.llm_request": LLM,
            "claude_code.interaction": AGENT,
            "claude_code.tool.execution": DETAIL,
            "claude_code.tool.blocked_on_user": DETAIL,
        },
        tool=("tool_name",),
        args=("tool_input", "tool_parameters", "input"),
        result=("tool_output", "tool_result", "output", "result"),
        call_id=("tool_use_id",),
        tokens_in=("input_tokens",),
        tokens_out=("output_tokens",),
        model=("model",),
        cost=("cost_usd",),
        success="success",
        error=("error",),
        strip=("claude_code.",),
    ),
    Dialect(  # Vercel AI SDK v4-v6 `experimental_telemetry`
        name="vercel_ai",
        kind_attr="ai.operationId",
        kind_in_name=True,
        kinds={
            "ai.toolcall": TOOL,
            "ai.generatetext.dogenerate": LLM,
            "ai.streamtext.dostream": LLM,
            "ai.generateobject.dogenerate": LLM,
            "ai.streamobject.dostream": LLM,
            "ai.generatetext": AGENT,
            "ai.streamtext": AGENT,
            "ai.generateobject": AGENT,
            "ai.streamobject": AGENT,
        },
        tool=("ai.toolCall.name",),
        args=("ai.toolCall.args", "ai.toolCall.input"),
        result=("ai.toolCall.result", "ai.toolCall.output"),
        call_id=("ai.toolCall.id",),
        output=("ai.response.text",),
        calls=("ai.response.toolCalls",),
        tokens_in=("ai.usage.inputTokens", "ai.usage.promptTokens"),
        tokens_out=("ai.usage.outputTokens", "ai.usage.completionTokens"),
        model=("ai.response.model", "ai.model.id"),
        agent=("ai.telemetry.functionId",),
        session=("ai.telemetry.metadata.sessionId", "ai.telemetry.metadata.session_id"),
    ),
    Dialect(  # OpenLIT coding-agent spans, and the Cursor-hook spans of §3.10
        name="coding_agent",
        names={
            "coding_agent.tool.call": TOOL,
            "coding_agent.llm.turn": LLM,
            "coding_agent.session": AGENT,
            "coding_agent.subagent": AGENT,
            "coding_agent.tool.requested": GROUP,  # the model's request; the call is tool.call
            "coding_agent.shell.requested": GROUP,
        },
        args=("gen_ai.tool.call.arguments", "gen_ai.tool.args"),
        session=("coding_agent.session.id",),
        final=True,  # tool.requested names a gen_ai.tool.name but is no call
    ),
    Dialect(  # Google ADK (tracer gcp.vertex.agent); older releases write no operation name
        name="google_adk",
        requires="gcp.vertex.agent.",
        prefixes=(
            ("execute_tool", TOOL),
            ("call_llm", LLM),
            ("agent_run", AGENT),
            ("invoke_agent", AGENT),
            ("invocation", AGENT),
        ),  # fmt: skip
        args=("gcp.vertex.agent.tool_call_args",),
        result=("gcp.vertex.agent.tool_response",),
        output=("gcp.vertex.agent.llm_response",),
        session=("gcp.vertex.agent.session_id",),
        result_errors=True,
        capture=(
            "set OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=SPAN_AND_EVENT (or "
            "ADK_TELEMETRY_SCHEMA_VERSION_OPT_IN=1) for Google ADK; =true is not enough"
        ),
    ),
    Dialect(  # Langfuse OTel ingestion / SDK v3
        name="langfuse",
        kind_attr="langfuse.observation.type",
        kinds={"tool": TOOL, "retriever": TOOL, "generation": LLM, "agent": AGENT},
        args=("langfuse.observation.input",),
        result=("langfuse.observation.output",),
        output=("langfuse.observation.output",),
        usage=("langfuse.observation.usage_details",),
        model=("langfuse.observation.model.name",),
        cost=("langfuse.observation.cost_details",),
        session=("langfuse.session.id",),
        level="langfuse.observation.level",
        status_message="langfuse.observation.status_message",
    ),
    Dialect(  # Laminar
        name="laminar",
        kind_attr="lmnr.span.type",
        kinds={"tool": TOOL, "llm": LLM},
        args=("lmnr.span.input",),
        result=("lmnr.span.output",),
        output=("lmnr.span.output",),
        session=("lmnr.association.properties.session_id",),
    ),
    Dialect(  # AgentOps v0.4+
        name="agentops",
        kind_attr="agentops.span.kind",
        kinds={"tool": TOOL, "llm": LLM, "agent": AGENT, "session": AGENT, "workflow": AGENT},
        tool=("agentops.tool.name", "operation.name"),
        args=("agentops.tool.input", "agentops.entity.input"),
        result=("agentops.tool.output", "agentops.entity.output"),
        output=("agentops.llm.output",),
    ),
    Dialect(  # MLflow tracing: every value JSON-encoded once more
        name="mlflow",
        kind_attr="mlflow.spanType",
        kinds={"tool": TOOL, "retriever": TOOL, "llm": LLM, "chat_model": LLM, "agent": AGENT},
        args=("mlflow.spanInputs",),
        result=("mlflow.spanOutputs",),
        output=("mlflow.spanOutputs",),
        usage=("mlflow.chat.tokenUsage",),
        session=("mlflow.trace.session",),
    ),
    Dialect(  # OpenLLMetry / Traceloop decorators
        name="traceloop",
        kind_attr="traceloop.span.kind",
        kinds={"tool": TOOL, "agent": AGENT, "workflow": AGENT},
        tool=("traceloop.entity.name",),
        args=("traceloop.entity.input",),
        result=("traceloop.entity.output",),
        session=("traceloop.association.properties.session_id",),
        capture="set TRACELOOP_TRACE_CONTENT=true for OpenLLMetry",
    ),
    Dialect(  # OpenLLMetry model spans: indexed gen_ai.prompt / gen_ai.completion keys
        name="openllmetry",
        kind_attr="llm.request.type",
        kinds={"chat": LLM, "completion": LLM},
        tokens_in=("gen_ai.usage.prompt_tokens",),
        tokens_out=("gen_ai.usage.completion_tokens",),
        capture="set TRACELOOP_TRACE_CONTENT=true for OpenLLMetry",
    ),
    Dialect(  # OpenInference (Arize Phoenix and friends)
        name="openinference",
        kind_attr="openinference.span.kind",
        kinds={"tool": TOOL, "retriever": TOOL, "llm": LLM, "agent": AGENT},
        tool=("tool.name", "tool_call.function.name"),
        args=("tool_call.function.arguments", "input.value"),
        result=("output.value",),
        call_id=("tool_call.id",),
        tokens_in=("llm.token_count.prompt",),
        tokens_out=("llm.token_count.completion",),
        model=("llm.model_name",),
        cost=("llm.cost.total",),
    ),
    Dialect(  # the GenAI semantic conventions (§3.10), Pydantic AI's model spans
        name="gen_ai",
        kind_attr="gen_ai.operation.name",
        kinds={"execute_tool": TOOL, **_LLM_OPS, "invoke_agent": AGENT, "create_agent": AGENT},
        prefixes=(("execute_tool ", TOOL),),
        args=("gcp.vertex.agent.tool_call_args", "tool_arguments"),
        result=("gcp.vertex.agent.tool_response", "tool_response"),
        capture=(
            "set OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true for the OpenTelemetry "
            "GenAI instrumentations"
        ),
    ),
    Dialect(  # Pydantic AI (logfire / OTel instrumentation, settings v1-2)
        name="pydantic_ai",
        names={"running tool": TOOL, "agent run": AGENT},
        prefixes=(("running tool", TOOL),),
        args=("tool_arguments",),
        result=("tool_response",),
        strip=("running tool: ", "running tool"),
    ),
    Dialect(  # any span naming a GenAI tool and nothing else (Pydantic AI tool spans)
        name="gen_ai_tool",
        marker="gen_ai.tool.name",
        args=("tool_arguments",),
        result=("tool_response",),
    ),
)

SESSION_KEYS: tuple[str, ...] = tuple(
    dict.fromkeys(key for d in (COMMON, *DIALECTS) for key in d.session)
)


def unwrap(value: Any) -> Any:
    """Return a value JSON-encoded once more (`"\\"TOOL\\""`) as its plain string."""
    if isinstance(value, str) and len(value) >= 2 and value[0] == value[-1] == '"':
        try:
            inner = json.loads(value)
        except ValueError:
            return value
        return inner if isinstance(inner, str) else value
    return value


def _requires(dialect: Dialect, attrs: dict[str, Any]) -> bool:
    return not dialect.requires or any(map(str.startswith, attrs, repeat(dialect.requires)))


def role_in(dialect: Dialect, name: str, attrs: dict[str, Any]) -> str | None:
    """Return the role this dialect gives a span, or None when it does not know the span."""
    if not _requires(dialect, attrs):
        return None
    if dialect.kind_attr:
        kind = unwrap(attrs.get(dialect.kind_attr))
        if isinstance(kind, str) and kind.strip():
            word = kind.strip().casefold()
            role = dialect.kinds.get(word) or dialect.kinds.get(word.split(" ", 1)[0])
            return role or GROUP
        if dialect.kind_in_name and name.casefold() in dialect.kinds:  # the kind as the span name
            return dialect.kinds[name.casefold()]
    if name in dialect.names:
        return dialect.names[name]
    for prefix, role in dialect.prefixes:
        if name.startswith(prefix):
            return role
    if dialect.marker and attrs.get(dialect.marker) not in (None, ""):
        return TOOL
    return None


# What `role_in` reads of a span besides its name: the kind attributes' values, whether each
# marker attribute is set, and whether a key starts with each `requires` prefix.
_KIND_KEYS = tuple(dict.fromkeys(d.kind_attr for d in DIALECTS if d.kind_attr))
_MARKERS = tuple(dict.fromkeys(d.marker for d in DIALECTS if d.marker))
_REQUIRED = tuple(dict.fromkeys(d.requires for d in DIALECTS if d.requires))
_CLASSIFIED: dict[tuple, tuple[str, Dialect]] = {}
_CLASSIFIED_MAX = 4096


def classify(name: str, attrs: dict[str, Any]) -> tuple[str, Dialect]:
    """Return (role, dialect) of a span: the first strong role, else the first weak one,
    else ("group", COMMON).

    The answer depends only on the span name and what `role_in` reads of the attributes, so
    it is remembered by those (a few thousand distinct ones at most): a run's spans are
    mostly the same few kinds, and walking every dialect was a tenth of an OTLP import."""
    kinds = tuple(attrs.get(key) for key in _KIND_KEYS)
    try:
        hash(kinds)
    except TypeError:  # a list or object where a kind belongs: not remembered
        return _classify(name, attrs)
    key = (
        name,
        kinds,
        tuple(attrs.get(marker) not in (None, "") for marker in _MARKERS),
        tuple(any(map(str.startswith, attrs, repeat(prefix))) for prefix in _REQUIRED),
    )
    found = _CLASSIFIED.get(key)
    if found is None:
        found = _classify(name, attrs)
        if len(_CLASSIFIED) >= _CLASSIFIED_MAX:
            _CLASSIFIED.clear()
        _CLASSIFIED[key] = found
    return found


def _classify(name: str, attrs: dict[str, Any]) -> tuple[str, Dialect]:
    weak: tuple[str, Dialect] | None = None
    for dialect in DIALECTS:
        role = role_in(dialect, name, attrs)
        if role in STRONG or (role is not None and dialect.final):
            return role, dialect
        if role is not None and weak is None:
            weak = (role, dialect)
    return weak or (GROUP, COMMON)


_KEYS: dict[tuple[int, str], tuple[Dialect, tuple[str, ...]]] = {}


def keys(dialect: Dialect, what: str) -> tuple[str, ...]:
    """Return the attribute keys to try for one field: the dialect's, then the common ones
    (made once per dialect and field: the cache holds the dialect, so its id stays its own)."""
    cached = _KEYS.get((id(dialect), what))
    if cached is not None and cached[0] is dialect:
        return cached[1]
    own: tuple[str, ...] = getattr(dialect, what)
    common: tuple[str, ...] = getattr(COMMON, what)
    found = own + tuple(k for k in common if k not in own)
    _KEYS[(id(dialect), what)] = (dialect, found)
    return found


def capture_hints(names: Any) -> list[str]:
    """Return how to turn content capture on for these dialects (by name), once each."""
    wanted = set(names) if isinstance(names, list | tuple | set) else set()
    if "google_adk" in wanted:
        wanted.discard("gen_ai")  # ADK's own switch: the generic one is not enough there
    hints: list[str] = []
    for dialect in DIALECTS:
        if dialect.name in wanted and dialect.capture and dialect.capture not in hints:
            hints.append(dialect.capture)
    return hints
