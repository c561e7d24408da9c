"""Producer: a Pydantic AI agent whose `FunctionModel` scripts the tool calls, its tools
registered with `agent.tool_plain`. A tool that cannot read its file raises `ModelRetry`
(Pydantic AI's way to hand an error back to the model; any other exception ends the run),
with the FileNotFoundError's text.

Variants: `otel` (Pydantic AI's own OpenTelemetry instrumentation, `Agent.instrument_all`,
on an SDK tracer provider) and `logfire` (`logfire.configure(send_to_logfire=False)` with an
OTLP/HTTP span exporter as an additional span processor, then
`logfire.instrument_pydantic_ai()`).
"""

from __future__ import annotations

import sys

import common
from common import parse_args, span_exporter, tracer_provider

VARIANTS = ("otel", "logfire")


def instrument(options: common.Options, variant: str):  # noqa: ANN201
    """Instrument every agent; return a function that flushes and shuts the export down."""
    if variant == "logfire":
        import logfire
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        logfire.configure(
            send_to_logfire=False,
            console=False,
            service_name="conformance-pydantic-ai-logfire",
            additional_span_processors=[BatchSpanProcessor(span_exporter(options))],
        )
        logfire.instrument_pydantic_ai()
        return logfire.shutdown
    from pydantic_ai import Agent
    from pydantic_ai.models.instrumented import InstrumentationSettings

    tracing = tracer_provider(options, "conformance-pydantic-ai-otel")
    Agent.instrument_all(InstrumentationSettings(tracer_provider=tracing, include_content=True))
    return tracing.shutdown


def main() -> int:
    options = parse_args(VARIANTS)
    shutdown = instrument(options, options.variant or "otel")
    from pydantic_ai import Agent, ModelRetry
    from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import FunctionModel

    calls = options.session.calls
    turn = 0

    def play(messages, info):  # noqa: ANN001, ANN202 - FunctionModel's signature
        nonlocal turn
        turn += 1
        if turn > len(calls):
            return ModelResponse(parts=[TextPart(options.session.answer)])
        call = calls[turn - 1]
        return ModelResponse(parts=[ToolCallPart(call.tool, dict(call.args), f"call_{turn}")])

    agent = Agent(FunctionModel(play), name="conformance", retries=len(calls) + 1)

    @agent.tool_plain(retries=len(calls) + 1)
    def read_file(path: str) -> str:
        """Return the contents of a file of the workspace."""
        try:
            return common.read_file(path)
        except FileNotFoundError as exc:
            raise ModelRetry(f"FileNotFoundError: {exc}") from exc

    @agent.tool_plain
    def check_status(job: str) -> str:
        """Return the status of a build job."""
        return common.check_status(job)

    result = agent.run_sync(f"Please do the {options.session.name} task.")
    shutdown()
    print(f"session {options.session_id}: {result.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
