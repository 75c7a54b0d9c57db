"""OpenTelemetry tracing for the protocol: session -> block -> chat (model call) / tool call / repair.

The protocol core names spans through its small ``Spans`` interface; ``OtelSpans`` maps that onto an
OpenTelemetry tracer. Context crosses process and actor boundaries only explicitly, as a W3C
``traceparent`` carrier (``carrier()`` / ``attached(carrier)``), and goes to engines as an HTTP header
(``traceparent_headers()``) so that vLLM's own spans nest under the block that asked.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator, Literal, Mapping

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor, ConsoleSpanExporter, SimpleSpanProcessor, SpanExporter,
)
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

TRACER_NAME = "specagent_ray"
_PROPAGATOR = TraceContextTextMapPropagator()

Exporter = Literal["otlp", "console", "memory", "none"]


class _Handle:
    __slots__ = ("_span",)

    def __init__(self, span: trace.Span):
        self._span = span

    def set(self, key: str, value: object) -> None:
        if isinstance(value, (str, bool, int, float)):
            self._span.set_attribute(key, value)
        else:
            self._span.set_attribute(key, str(value))


class OtelSpans:
    """Implements the protocol's ``Spans`` with an OpenTelemetry tracer. Each span becomes the current
    span for the code inside it, so nesting follows the call structure (asyncio tasks inherit it)."""

    def __init__(self, provider: trace.TracerProvider | None = None):
        self._tracer = (provider or trace.get_tracer_provider()).get_tracer(TRACER_NAME)

    @contextmanager
    def span(self, name: str, attributes: Mapping[str, object] | None = None) -> Iterator[_Handle]:
        with self._tracer.start_as_current_span(name) as span:
            handle = _Handle(span)
            for key, value in (attributes or {}).items():
                handle.set(key, value)
            yield handle


def make_provider(exporter: Exporter = "otlp", endpoint: str | None = None,
                  service: str = "specagent-ray") -> tuple[TracerProvider, SpanExporter | None]:
    """A tracer provider with one exporter: ``otlp`` (HTTP/protobuf to ``endpoint`` or the
    ``OTEL_EXPORTER_OTLP_*`` environment), ``console``, ``memory`` (for tests) or ``none``."""
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    span_exporter: SpanExporter | None
    if exporter == "otlp":
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        span_exporter = OTLPSpanExporter(endpoint=endpoint) if endpoint else OTLPSpanExporter()
        provider.add_span_processor(BatchSpanProcessor(span_exporter))
    elif exporter == "console":
        span_exporter = ConsoleSpanExporter()
        provider.add_span_processor(SimpleSpanProcessor(span_exporter))
    elif exporter == "memory":
        span_exporter = InMemorySpanExporter()
        provider.add_span_processor(SimpleSpanProcessor(span_exporter))
    elif exporter == "none":
        span_exporter = None
    else:
        raise ValueError(f"unknown exporter {exporter!r}; choose otlp, console, memory or none")
    return provider, span_exporter


def carrier() -> dict[str, str]:
    """The current trace context as a W3C carrier, to pass explicitly through an actor or handle call."""
    out: dict[str, str] = {}
    _PROPAGATOR.inject(out)
    return out


@contextmanager
def attached(incoming: Mapping[str, str] | None) -> Iterator[None]:
    """Make a carrier's context current on the receiving side, so new spans become its children."""
    if not incoming:
        yield
        return
    token = otel_context.attach(_PROPAGATOR.extract(dict(incoming)))
    try:
        yield
    finally:
        otel_context.detach(token)


def traceparent_headers() -> dict[str, str]:
    """HTTP headers that carry the current span to an engine (vLLM reads ``traceparent``)."""
    return {k: v for k, v in carrier().items() if k in ("traceparent", "tracestate")}
