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
