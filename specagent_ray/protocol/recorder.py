"""What a run reports as it goes, apart from its events: every model call's usage and wall time to the
ledger, and the run's structure (block, model and tool calls, repairs) to the spans. Reporting only: nothing
here decides what runs."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager

from .interfaces import CallRecord, Ledger, Purpose, SpanHandle, Spans
from .types import Author, Usage


class ModelCall:
    """One model call being made, inside its span: ``spent`` records what a reply (or a malformed reply's
    exception, which may carry the usage spent) cost and how long it took since the call began."""

    def __init__(self, ledger: Ledger, clock: Callable[[], float], role: Author, purpose: Purpose,
                 span: SpanHandle) -> None:
        self.ledger, self.clock, self.role, self.purpose, self.span = ledger, clock, role, purpose, span
        self.start = clock()

    def spent(self, reply: object) -> None:
        usage = getattr(reply, "usage", None) or Usage()
        self.ledger.record(CallRecord(self.role, self.purpose, usage, self.clock() - self.start))
        self.span.set("gen_ai.usage.input_tokens", usage.prompt_tokens)
        self.span.set("gen_ai.usage.output_tokens", usage.decode_tokens)
        self.span.set("specagent.cached_input_tokens", usage.cached_prompt_tokens)

    def failed(self, error_type: str) -> None:
        self.span.set("error.type", error_type)


class Recorder:
    """The run's ledger and spans, timed by its injected clock (tests and benches control time)."""

    def __init__(self, ledger: Ledger, spans: Spans, clock: Callable[[], float]) -> None:
        self.ledger, self.spans, self.clock = ledger, spans, clock

    def span(self, name: str, **attributes: object) -> AbstractContextManager[SpanHandle]:
        return self.spans.span(name, attributes)

    @contextmanager
    def model_call(self, role: Author, purpose: Purpose) -> Iterator[ModelCall]:
        """A model call, named and attributed after the OpenTelemetry GenAI conventions."""
        with self.spans.span(f"chat {purpose}", {
                "gen_ai.operation.name": "chat", "gen_ai.request.model": role, "specagent.purpose": purpose}) as span:
            yield ModelCall(self.ledger, self.clock, role, purpose, span)
