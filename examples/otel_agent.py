"""A toy agent instrumented with OpenTelemetry only, exporting its spans to loopboard.

    python examples/otel_agent.py --url http://127.0.0.1:8000 --key lb_...   [--healthy]

It uses nothing from loopboard: the plain `opentelemetry-sdk` and its OTLP/HTTP exporter,
configured the standard way, so any instrumented agent does the same with

    OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=http://127.0.0.1:8000/v1/traces
    OTEL_EXPORTER_OTLP_HEADERS=Authorization=Bearer%20lb_...

Spans follow the GenAI semantic conventions: one `invoke_agent` root, a `chat` span per model
call and an `execute_tool` span per tool call. By default the agent gets stuck repeating a
search that finds nothing, which loopboard flags; `--healthy` makes it behave.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import Tracer


def run_agent(tracer: Tracer, *, healthy: bool = False, task: str = "Find the flaky test") -> str:
    """Run the toy agent once, recording its spans; return the run's trace id (hex)."""
    with tracer.start_as_current_span("invoke_agent toy-agent") as root:
        root.set_attribute("gen_ai.operation.name", "invoke_agent")
        root.set_attribute("gen_ai.agent.name", "toy-agent")
        root.set_attribute("input.value", task)
        calls = (
            [
                ("grep", {"pattern": "flaky", "path": "tests"}, "tests/test_io.py:12"),
                ("read_file", {"path": "tests/test_io.py"}, "def test_io(): ..."),
                ("edit_file", {"path": "tests/test_io.py"}, "ok"),
                ("bash", {"command": "pytest tests/test_io.py"}, "1 passed"),
            ]
            if healthy
            else [("web_search", {"query": "flaky test fix"}, "no results")] * 6
        )
        for tool, args, result in calls:
            with tracer.start_as_current_span("chat toy-model") as chat:
                chat.set_attribute("gen_ai.operation.name", "chat")
                chat.set_attribute("gen_ai.request.model", "toy-model")
                chat.set_attribute("gen_ai.usage.input_tokens", 500)
                chat.set_attribute("gen_ai.usage.output_tokens", 40)
            with tracer.start_as_current_span(f"execute_tool {tool}") as span:
                span.set_attribute("gen_ai.operation.name", "execute_tool")
                span.set_attribute("gen_ai.tool.name", tool)
                span.set_attribute("gen_ai.tool.call.arguments", json.dumps(args))
                span.set_attribute("gen_ai.tool.call.result", result)
        return format(root.get_span_context().trace_id, "032x")


def tracer_provider(url: str | None = None, key: str | None = None) -> TracerProvider:
    """Return a provider exporting over OTLP/HTTP (to url/v1/traces, or the OTEL_* env)."""
    provider = TracerProvider(resource=Resource.create({"service.name": "toy-agent"}))
    kwargs = {}
    if url:
        kwargs["endpoint"] = url.rstrip("/") + "/v1/traces"
    if key:
        kwargs["headers"] = {"Authorization": f"Bearer {key}"}
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(**kwargs)))
    return provider


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--url",
        default=os.environ.get("LOOPBOARD_URL"),
        help="loopboard base URL (default: the OTEL_* environment)",
    )
    parser.add_argument("--key", default=os.environ.get("LOOPBOARD_KEY"), help="project API key")
    parser.add_argument("--healthy", action="store_true", help="do not get stuck")
    args = parser.parse_args(argv)
    provider = tracer_provider(args.url, args.key)
    trace_id = run_agent(provider.get_tracer("toy-agent"), healthy=args.healthy)
    provider.force_flush()
    provider.shutdown()
    print(f"sent trace {trace_id}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
