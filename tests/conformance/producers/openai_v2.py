"""Producer: the `openai` client instrumented by `opentelemetry-instrumentation-openai-v2`,
against a local fake OpenAI-compatible server that scripts the tool calls, with a plain agent
loop (call the model, run the tool it asks for, send the result back).

Variants: `old` (the default GenAI semantic conventions v1.30, content capture `true`: the
messages as log events) and `latest` (`OTEL_SEMCONV_STABILITY_OPT_IN=
gen_ai_latest_experimental`, content capture `event_only`). Spans go to /v1/traces, the content
events to /v1/logs. The loop runs under one `invoke_agent` span, so the session is one trace.
`conversation`: as `latest`, with the session named by `gen_ai.conversation.id` on that root
span only (the log records carry the trace id alone, and the root is exported last).
"""

from __future__ import annotations

import json
import os
import sys

from common import TOOL_DESCRIPTIONS, TOOL_SCHEMAS, TOOLS, FakeOpenAI, parse_args

VARIANTS = ("old", "latest", "conversation")


def configure(variant: str) -> None:
    """Set the instrumentation's switches; they are read when it instruments the client."""
    if variant in ("latest", "conversation"):
        os.environ["OTEL_SEMCONV_STABILITY_OPT_IN"] = "gen_ai_latest_experimental"
        os.environ["OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"] = "event_only"
    else:
        os.environ.pop("OTEL_SEMCONV_STABILITY_OPT_IN", None)
        os.environ["OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"] = "true"


def main() -> int:
    options = parse_args(VARIANTS)
    variant = options.variant or "old"
    configure(variant)

    from common import logger_provider, tracer_provider
    from openai import OpenAI
    from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor

    tracing = tracer_provider(options, f"conformance-openai-v2-{variant}")
    logging = logger_provider(options, f"conformance-openai-v2-{variant}")
    OpenAIInstrumentor().instrument(tracer_provider=tracing, logger_provider=logging)
    tracer = tracing.get_tracer("conformance.agent")
    tools = [
        {
            "type": "function",
            "function": {
                "name": name,
                "description": TOOL_DESCRIPTIONS[name],
                "parameters": TOOL_SCHEMAS[name],
            },
        }
        for name in TOOLS
    ]
    with FakeOpenAI(options.session) as fake:
        client = OpenAI(base_url=fake.base_url, api_key="not-a-real-key", max_retries=0)
        messages: list[dict] = [
            {"role": "system", "content": "You are a careful assistant."},
            {"role": "user", "content": f"Please do the {options.session.name} task."},
        ]
        # The instrumentation's log records carry the trace id only; with a conversation id
        # the root span names the session as well.
        attributes = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "conformance"}
        if variant == "conversation":
            attributes["gen_ai.conversation.id"] = options.session_id
        with tracer.start_as_current_span("invoke_agent conformance", attributes=attributes):
            for _ in range(len(options.session.calls) + 1):
                reply = client.chat.completions.create(
                    model="gpt-4o-mini", messages=messages, tools=tools
                )
                message = reply.choices[0].message
                messages.append(message.model_dump(exclude_none=True))
                if not message.tool_calls:
                    break
                for call in message.tool_calls:
                    args = json.loads(call.function.arguments)
                    try:
                        content = TOOLS[call.function.name](**args)
                    except OSError as exc:
                        content = f"Error: {type(exc).__name__}: {exc}"
                    messages.append({"role": "tool", "tool_call_id": call.id, "content": content})
    tracing.shutdown()
    logging.shutdown()
    print(f"session {options.session_id}: {fake.requests} model requests", file=sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
