"""Producer: MLflow tracing (`mlflow-tracing`, the tracing-only package) exporting OTLP.

The `openai` client, traced by `mlflow.openai.autolog()`, talks to a local fake
OpenAI-compatible server that scripts the tool calls; the tools are plain functions decorated
with `@mlflow.trace(span_type="TOOL")` and the agent loop with `@mlflow.trace(span_type=
"AGENT")`, so the session is one MLflow trace. MLflow sends it with its own OTLP/HTTP exporter
when `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` is set (protobuf; the key through the standard
`OTEL_EXPORTER_OTLP_TRACES_HEADERS`), instead of to a tracking server.
"""

from __future__ import annotations

import os
import sys
from urllib.parse import quote

from common import TOOLS, FakeOpenAI, chat_loop, parse_args


def configure(endpoint: str, key: str) -> None:
    """Point MLflow's OTLP exporter at loopboard; read when MLflow sets up its tracer."""
    os.environ["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"] = f"{endpoint}/v1/traces"
    os.environ["OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"] = "http/protobuf"
    os.environ["OTEL_EXPORTER_OTLP_TRACES_HEADERS"] = f"Authorization={quote('Bearer ' + key)}"
    os.environ["OTEL_SERVICE_NAME"] = "conformance-mlflow"
    # MLflow resolves a tracking URI even when OTLP replaces the tracking server. Its default
    # (a local file or SQLite store) needs packages `mlflow-tracing` does not install (sqlparse,
    # yaml, sqlalchemy), so name a server that is never asked: with the OTLP endpoint set, spans
    # go there only (MLFLOW_TRACE_ENABLE_OTLP_DUAL_EXPORT is off).
    os.environ.setdefault("MLFLOW_TRACKING_URI", "http://127.0.0.1:9")


def main() -> int:
    options = parse_args()
    configure(options.endpoint, options.key)

    import mlflow
    from openai import OpenAI

    mlflow.openai.autolog()
    tools = {name: mlflow.trace(tool, name=name, span_type="TOOL") for name, tool in TOOLS.items()}

    @mlflow.trace(name="conformance_agent", span_type="AGENT")
    def agent(client: OpenAI) -> str:
        mlflow.update_current_trace(session_id=options.session_id)
        return chat_loop(client, options.session, tools)

    with FakeOpenAI(options.session) as fake:
        client = OpenAI(base_url=fake.base_url, api_key="not-a-real-key", max_retries=0)
        agent(client)
    mlflow.flush_trace_async_logging()
    from opentelemetry import trace

    provider = trace.get_tracer_provider()
    if hasattr(provider, "shutdown"):
        provider.shutdown()
    print(f"session {options.session_id}: {fake.requests} model requests")
    return 0


if __name__ == "__main__":
    sys.exit(main())
