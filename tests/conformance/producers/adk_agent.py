"""Producer: Google ADK (`google-adk`) with its own OpenTelemetry spans.

An `LlmAgent` whose model is a scripted `BaseLlm` subclass (it answers each turn with the
session's next function call, counting the function responses already in the request, then
with the final text) calls the tools as ADK `FunctionTool`s, run by an `InMemoryRunner`. A
raised FileNotFoundError reaches the agent's `on_tool_error_callback`, which hands the model
`{"error": "<type>: <text>"}`, as ADK's docs show for tools that fail. ADK writes its spans
to the global tracer provider, which exports to loopboard over OTLP/HTTP.

Variants:
- `default`: ADK's default telemetry (schema 2, no content capture): `execute_tool <name>`
  spans that name the tool but carry neither its arguments nor its result;
- `content`: `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=SPAN_AND_EVENT`, so the
  arguments and results are on the spans (and the messages also go to /v1/logs as events);
- `legacy`: `ADK_TELEMETRY_SCHEMA_VERSION_OPT_IN=1`, the older span format with
  `gcp.vertex.agent.tool_call_args` / `tool_response` (its content capture defaults on).
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncGenerator
from typing import Any

from common import TOOLS, Options, Session, parse_args

VARIANTS = ("default", "content", "legacy")


def configure(variant: str) -> None:
    """Set ADK's telemetry switches; it reads them when a run starts."""
    for name in (
        "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT",
        "ADK_TELEMETRY_SCHEMA_VERSION_OPT_IN",
        "ADK_CAPTURE_MESSAGE_CONTENT_IN_SPANS",
        "OTEL_SEMCONV_STABILITY_OPT_IN",
    ):
        os.environ.pop(name, None)
    if variant == "content":
        os.environ["OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"] = "SPAN_AND_EVENT"
    elif variant == "legacy":
        os.environ["ADK_TELEMETRY_SCHEMA_VERSION_OPT_IN"] = "1"


def scripted_model(session: Session):  # noqa: ANN201 - the class needs ADK imported
    """Return a BaseLlm that plays the session: the next call per turn, then the answer."""
    from google.adk.models.base_llm import BaseLlm
    from google.adk.models.llm_response import LlmResponse
    from google.genai import types

    class ScriptedLlm(BaseLlm):
        """A model that answers from a script instead of an API."""

        async def generate_content_async(
            self, llm_request: Any, stream: bool = False
        ) -> AsyncGenerator[LlmResponse, None]:
            done = sum(
                1
                for content in llm_request.contents
                for part in content.parts or ()
                if part.function_response is not None
            )
            if done < len(session.calls):
                call = session.calls[done]
                part = types.Part(
                    function_call=types.FunctionCall(
                        id=f"call_{done}", name=call.tool, args=dict(call.args)
                    )
                )
            else:
                part = types.Part(text=session.answer)
            yield LlmResponse(
                content=types.Content(role="model", parts=[part]),
                usage_metadata=types.GenerateContentResponseUsageMetadata(
                    prompt_token_count=20, candidates_token_count=10, total_token_count=30
                ),
            )

    return ScriptedLlm(model="scripted-gemini")


def on_tool_error(tool: Any, args: dict[str, Any], tool_context: Any, error: Exception):  # noqa: ANN201
    """Hand a failed tool's error back to the model as its response."""
    return {"error": f"{type(error).__name__}: {error}"}


async def play(options: Options) -> int:
    """Run the session through ADK once; return how many events it produced."""
    from google.adk.agents import LlmAgent
    from google.adk.runners import InMemoryRunner
    from google.adk.tools import FunctionTool
    from google.genai import types

    agent = LlmAgent(
        name="conformance_agent",
        model=scripted_model(options.session),
        instruction="You are a careful assistant.",
        tools=[FunctionTool(tool) for tool in TOOLS.values()],
        on_tool_error_callback=on_tool_error,
    )
    runner = InMemoryRunner(agent=agent, app_name="conformance")
    await runner.session_service.create_session(
        app_name="conformance", user_id="conformance", session_id=options.session_id
    )
    message = types.Content(
        role="user", parts=[types.Part(text=f"Please do the {options.session.name} task.")]
    )
    events = 0
    async for _ in runner.run_async(
        user_id="conformance", session_id=options.session_id, new_message=message
    ):
        events += 1
    return events


def main() -> int:
    options = parse_args(VARIANTS)
    variant = options.variant or "default"
    configure(variant)

    from common import logger_provider, tracer_provider
    from opentelemetry import _logs, trace

    tracing = tracer_provider(options, f"conformance-adk-{variant}")
    logging = logger_provider(options, f"conformance-adk-{variant}")
    trace.set_tracer_provider(tracing)
    _logs.set_logger_provider(logging)
    events = asyncio.run(play(options))
    tracing.shutdown()
    logging.shutdown()
    print(f"session {options.session_id}: {events} events")
    return 0


if __name__ == "__main__":
    sys.exit(main())
