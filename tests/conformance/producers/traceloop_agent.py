"""Producer: OpenLLMetry (`traceloop-sdk`).

`Traceloop.init` sends to loopboard (its `api_endpoint`, the key in `headers`) with its own
OTLP/HTTP exporter, and instruments the `openai` client, which talks to a local fake
OpenAI-compatible server that scripts the tool calls. The tools are plain functions decorated
with traceloop's `@tool`, the agent loop with `@workflow`, as its docs show; the session id is
an association property, on every span of the session.

Variants: `content` (the default: `TRACELOOP_TRACE_CONTENT=true`, prompts, completions and
the tools' inputs and outputs on the spans) and `nocontent` (`TRACELOOP_TRACE_CONTENT=false`:
what arrives when a user turns content off). OpenLLMetry also sends metrics to /v1/metrics.
"""

from __future__ import annotations

import os
import sys

from common import TOOLS, FakeOpenAI, chat_loop, parse_args

VARIANTS = ("content", "nocontent")


def main() -> int:
    options = parse_args(VARIANTS)
    variant = options.variant or "content"
    os.environ["TRACELOOP_TRACE_CONTENT"] = "false" if variant == "nocontent" else "true"
    os.environ["TRACELOOP_TELEMETRY"] = "false"  # no usage pings to Traceloop

    from openai import OpenAI
    from traceloop.sdk import Traceloop
    from traceloop.sdk.decorators import tool, workflow

    Traceloop.init(
        app_name=f"conformance-traceloop-{variant}",
        api_endpoint=options.endpoint,
        headers=options.headers,
        disable_batch=True,
    )
    Traceloop.set_association_properties({"session_id": options.session_id})
    tools = {name: tool(name=name)(function) for name, function in TOOLS.items()}

    @workflow(name="conformance_agent")
    def agent(client: OpenAI) -> str:
        return chat_loop(client, options.session, tools)

    with FakeOpenAI(options.session) as fake:
        client = OpenAI(base_url=fake.base_url, api_key="not-a-real-key", max_retries=0)
        agent(client)
    from opentelemetry import metrics, trace

    for provider in (trace.get_tracer_provider(), metrics.get_meter_provider()):
        if hasattr(provider, "shutdown"):
            provider.shutdown()
    print(f"session {options.session_id}: {fake.requests} model requests")
    return 0


if __name__ == "__main__":
    sys.exit(main())
