"""Producer: OpenLIT (`openlit`).

`openlit.init` sends to loopboard (`otlp_endpoint`, the key in `otlp_headers`) with its own
OTLP/HTTP exporters (spans and metrics) and instruments the `openai` client, which talks to
a local fake OpenAI-compatible server that scripts the tool calls. OpenLIT has no tool
decorator that records a call: the tools run in a plain agent loop, so what OpenLIT knows of
a call is what the chat messages say (the model's tool_calls, then the tool messages). The
loop runs under one span of the tracer OpenLIT sets up (with the session id), so the session
is one trace; message content capture is on (OpenLIT's default, named here). The prices come
from a local (empty) price list: OpenLIT's default downloads one, and the suite has no network.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

from common import FakeOpenAI, chat_loop, parse_args


def main() -> int:
    options = parse_args()

    import openlit
    from openai import OpenAI
    from opentelemetry import trace

    prices = Path(tempfile.mkdtemp(prefix="openlit-")) / "pricing.json"
    prices.write_text(json.dumps({"chat": {}, "embeddings": {}, "images": {}, "audio": {}}))
    openlit.init(
        application_name="conformance-openlit",
        environment="conformance",
        otlp_endpoint=options.endpoint,
        otlp_headers=options.headers,
        capture_message_content=True,
        pricing_json=str(prices),
    )
    tracer = trace.get_tracer("conformance.agent")
    root = {"session.id": options.session_id, "gen_ai.agent.name": "conformance"}
    with FakeOpenAI(options.session) as fake:
        client = OpenAI(base_url=fake.base_url, api_key="not-a-real-key", max_retries=0)
        with tracer.start_as_current_span("conformance_agent", attributes=root):
            chat_loop(client, options.session)
    from opentelemetry import metrics

    for provider in (trace.get_tracer_provider(), metrics.get_meter_provider()):
        if hasattr(provider, "shutdown"):
            provider.shutdown()
    print(f"session {options.session_id}: {fake.requests} model requests")
    return 0


if __name__ == "__main__":
    sys.exit(main())
