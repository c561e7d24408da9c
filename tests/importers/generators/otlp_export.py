"""OTLP/JSON export of the spans a real instrumentation recorded (for the generators here)."""

import json

from google.protobuf.json_format import MessageToDict
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter


def provider():
    exporter = InMemorySpanExporter()
    tp = TracerProvider()
    tp.add_span_processor(SimpleSpanProcessor(exporter))
    return tp, exporter


def dump(exporter, path):
    request = encode_spans(exporter.get_finished_spans())
    doc = MessageToDict(request)
    with open(path, "w") as f:
        json.dump(doc, f, indent=1)
    return doc


def show(doc):
    """Print each span's name, status, events, kind and its input/output values, shortened."""
    for rs in doc["resourceSpans"]:
        for ss in rs["scopeSpans"]:
            for sp in ss["spans"]:
                a = {x["key"]: list(x["value"].values())[0] for x in sp.get("attributes", [])}
                events = [e["name"] for e in sp.get("events", [])]
                kind = a.get("openinference.span.kind")
                print(sp["name"], sp.get("status", {}).get("code"), events, kind)
                for k in ("input.value", "output.value", "tool.name"):
                    if k in a:
                        print("   ", k, str(a[k])[:200])
