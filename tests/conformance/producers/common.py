"""What every producer shares: its command line, the three scripted sessions, the tools
they call, the OpenTelemetry exporters pointed at loopboard, and a fake OpenAI-compatible
chat server for frameworks that only talk to an API.

Producers run in their own virtualenvs (var/conformance/<venv>), never in loopboard's, and
import this module from their own folder. Only the standard library is imported here at
module level; OpenTelemetry is imported inside the functions that need it.
"""

from __future__ import annotations

import argparse
import json
import threading
import uuid
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class Call:
    """One tool call a session's scripted model makes."""

    tool: str
    args: dict[str, Any]


@dataclass(frozen=True)
class Session:
    """A scripted agent session: the calls its model makes in order, then its final answer."""

    name: str
    calls: tuple[Call, ...]
    answer: str


SESSIONS = {
    "failing": Session(
        "failing",
        tuple(Call("read_file", {"path": "missing.txt"}) for _ in range(7)),
        "I could not read missing.txt: it does not exist.",
    ),
    "healthy": Session(
        "healthy",
        tuple(Call("read_file", {"path": f"notes/{i}.txt"}) for i in range(10)),
        "I read all ten notes.",
    ),
    "noop": Session(
        "noop",
        tuple(Call("check_status", {"job": "build"}) for _ in range(7)),
        "The build is still pending.",
    ),
}


def read_file(path: str) -> str:
    """Return the contents of a file of the scripted workspace: notes/0.txt .. notes/9.txt."""
    if path.startswith("notes/") and path.endswith(".txt"):
        return f"contents of {path}"
    raise FileNotFoundError(2, "No such file or directory", path)


def check_status(job: str) -> str:
    """Return the status of a build job (always pending)."""
    return "status: pending"


TOOLS = {"read_file": read_file, "check_status": check_status}
# JSON schemas of the tools' parameters, for frameworks that take them as data.
TOOL_SCHEMAS = {
    "read_file": {
        "type": "object",
        "properties": {"path": {"type": "string", "description": "the file's path"}},
        "required": ["path"],
    },
    "check_status": {
        "type": "object",
        "properties": {"job": {"type": "string", "description": "the job's name"}},
        "required": ["job"],
    },
}
TOOL_DESCRIPTIONS = {name: tool.__doc__ or name for name, tool in TOOLS.items()}


@dataclass(frozen=True)
class Options:
    """A producer's command line."""

    endpoint: str
    key: str
    session: Session
    variant: str | None
    session_id: str

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}"}


def parse_args(variants: tuple[str, ...] = ()) -> Options:
    """Read `--endpoint URL --key KEY --session NAME [--variant V]`; each invocation gets a
    session id of its own."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--endpoint", required=True, help="loopboard's base URL")
    parser.add_argument("--key", required=True, help="an ingest API key")
    parser.add_argument("--session", required=True, choices=sorted(SESSIONS))
    parser.add_argument("--variant", choices=variants or None, default=None)
    args = parser.parse_args()
    session_id = f"conformance-{args.session}-{uuid.uuid4().hex[:12]}"
    return Options(
        args.endpoint.rstrip("/"), args.key, SESSIONS[args.session], args.variant, session_id
    )


#: Seconds one export may take, retries included (the SDK's default is 10). On a loaded CI
#: machine a request to the test's loopboard once took longer, and the SDK gave the batch up.
EXPORT_TIMEOUT = 60


def span_exporter(options: Options):  # noqa: ANN201
    """Return an OTLP/HTTP (protobuf) span exporter to loopboard's /v1/traces, with the key
    in the Authorization header."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter(
        endpoint=f"{options.endpoint}/v1/traces", headers=options.headers, timeout=EXPORT_TIMEOUT
    )


def tracer_provider(options: Options, service: str, **resource: Any):  # noqa: ANN201
    """Return an SDK TracerProvider that exports to loopboard's /v1/traces over OTLP/HTTP
    (protobuf), in batches."""
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    provider = TracerProvider(resource=Resource.create({"service.name": service, **resource}))
    provider.add_span_processor(BatchSpanProcessor(span_exporter(options)))
    return provider


def logger_provider(options: Options, service: str, **resource: Any):  # noqa: ANN201
    """Return an SDK LoggerProvider that exports log records (GenAI content events) to
    loopboard's /v1/logs over OTLP/HTTP."""
    from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
    from opentelemetry.sdk._logs import LoggerProvider
    from opentelemetry.sdk._logs.export import BatchLogRecordProcessor
    from opentelemetry.sdk.resources import Resource

    provider = LoggerProvider(resource=Resource.create({"service.name": service, **resource}))
    exporter = OTLPLogExporter(
        endpoint=f"{options.endpoint}/v1/logs", headers=options.headers, timeout=EXPORT_TIMEOUT
    )
    provider.add_log_record_processor(BatchLogRecordProcessor(exporter))
    return provider


# -- a fake OpenAI-compatible chat completions server -----------------------------------------
def next_reply(session: Session, messages: list[dict[str, Any]]) -> dict[str, Any]:
    """Return the scripted assistant message that follows a chat history: the next tool call
    (one per turn; the history's tool results count the calls made), else the final answer."""
    done = sum(1 for message in messages if message.get("role") == "tool")
    if done >= len(session.calls):
        return {"role": "assistant", "content": session.answer}
    call = session.calls[done]
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": f"call_{done}_{uuid.uuid4().hex[:8]}",
                "type": "function",
                "function": {"name": call.tool, "arguments": json.dumps(call.args)},
            }
        ],
    }


class FakeOpenAI:
    """A local OpenAI-compatible `/v1/chat/completions` server that plays a session's script
    (no streaming). Use as a context manager; `base_url` is what the client is given."""

    def __init__(self, session: Session, model: str = "gpt-4o-mini") -> None:
        self.session = session
        self.model = model
        self.requests = 0
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def __enter__(self) -> FakeOpenAI:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def reply(self, body: dict[str, Any]) -> dict[str, Any]:
        """Return the completion answering one request body."""
        self.requests += 1
        message = next_reply(self.session, body.get("messages", []))
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex[:12]}",
            "object": "chat.completion",
            "created": 1_700_000_000 + self.requests,
            "model": body.get("model", self.model),
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "finish_reason": "tool_calls" if message.get("tool_calls") else "stop",
                }
            ],
            "usage": {"prompt_tokens": 20, "completion_tokens": 10, "total_tokens": 30},
        }

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                if not self.path.rstrip("/").endswith("/chat/completions"):
                    self.send_error(404, f"the fake serves /v1/chat/completions, not {self.path}")
                    return
                data = json.dumps(fake.reply(body)).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:  # quiet: stderr is checked for errors
                pass

        return Handler


# -- a plain agent loop over an OpenAI-compatible client ---------------------------------------
def openai_tools() -> list[dict[str, Any]]:
    """The session tools as the chat completions API takes them."""
    return [
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


def chat_loop(client: Any, session: Session, tools: dict[str, Any] | None = None) -> str:
    """Play a session with an `openai.OpenAI` client: ask the model, run each tool it asks for
    (from `tools`, the session tools by default: a producer passes them wrapped in its
    framework's decorators), send the result back (a raised OSError as `Error: <type>: <text>`)
    until the model answers in text; return that answer."""
    tools = tools or TOOLS
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a careful assistant."},
        {"role": "user", "content": f"Please do the {session.name} task."},
    ]
    for _ in range(len(session.calls) + 1):
        reply = client.chat.completions.create(
            model="gpt-4o-mini", messages=messages, tools=openai_tools()
        )
        message = reply.choices[0].message
        messages.append(message.model_dump(exclude_none=True))
        if not message.tool_calls:
            return message.content or ""
        for call in message.tool_calls:
            try:
                content = tools[call.function.name](**json.loads(call.function.arguments))
            except OSError as exc:
                content = f"Error: {type(exc).__name__}: {exc}"
            messages.append({"role": "tool", "tool_call_id": call.id, "content": content})
    raise RuntimeError(f"the model did not stop after {len(session.calls)} calls")
