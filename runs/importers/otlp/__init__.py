"""OpenTelemetry traces and logs: the OTLP decoders (spans.py, logs.py), the dialect table
(dialects.py) and the spans + log records -> runs importer (steps.py, placement.py),
registered as the format "otlp".

The OTLP/HTTP receiver and the assembly of received spans use the same two modules, so a
span the receiver takes is a span a file import takes, and the other way round.
"""

from __future__ import annotations

from . import logs
from .logs import LogEvent
from .spans import (
    JSON,
    PROTOBUF,
    BodyLimits,
    BodyTooLarge,
    ExportRequest,
    OtlpError,
    Span,
    SpanGroup,
    decode_body,
    looks_like_protobuf,
    read_request,
    span_keys,
    spans_from_request,
)
from .steps import Collector, claim, label, name, parse, runs_from_request, sniff

__all__ = [
    "JSON",
    "LogEvent",
    "logs",
    "span_keys",
    "PROTOBUF",
    "ExportRequest",
    "BodyLimits",
    "Collector",
    "claim",
    "BodyTooLarge",
    "OtlpError",
    "Span",
    "SpanGroup",
    "decode_body",
    "label",
    "looks_like_protobuf",
    "name",
    "parse",
    "read_request",
    "runs_from_request",
    "sniff",
    "spans_from_request",
]
