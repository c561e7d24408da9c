"""Made tests/data/importers/otlp_smolagents_openinference.json: a smolagents ToolCallingAgent (a fake model: two failing read_file calls, one search, final_answer), its spans
exported by the real instrumentation (smolagents 1.26.0, openinference-instrumentation-smolagents 0.1.43;
opentelemetry-sdk 1.45.2) and written as OTLP/JSON. Run in a scratch virtualenv with those
packages: python otlp_smolagents_openinference.py OUT.json (not part of the test suite)."""

# ruff: noqa
import sys

sys.path.insert(0, str(__import__("pathlib").Path(__file__).parent))
from otlp_export import dump, provider, show
from openinference.instrumentation.smolagents import SmolagentsInstrumentor

tp, exporter = provider()
SmolagentsInstrumentor().instrument(tracer_provider=tp)
from smolagents import ToolCallingAgent, tool, Model
from smolagents.models import (
    ChatMessage,
    ChatMessageToolCall,
    ChatMessageToolCallFunction,
    MessageRole,
)


@tool
def read_file(path: str) -> str:
    """Read a file.

    Args:
        path: the file's path
    """
    if path == "missing.txt":
        raise FileNotFoundError(2, "No such file or directory")
    return f"contents of {path}"


@tool
def search(query: str, limit: int) -> str:
    """Search.

    Args:
        query: what to look for
        limit: how many hits
    """
    return f"{limit} hits for {query}"


PLAN = [
    ("read_file", {"path": "missing.txt"}),
    ("read_file", {"path": "missing.txt"}),
    ("search", {"query": "notes", "limit": 2}),
    ("final_answer", {"answer": "I could not read it."}),
]


class Fake(Model):
    def __init__(self):
        super().__init__(model_id="fake-model")
        self.i = 0

    def generate(
        self, messages, stop_sequences=None, response_format=None, tools_to_call_from=None, **kw
    ):
        name, args = PLAN[self.i]
        self.i += 1
        return ChatMessage(
            role=MessageRole.ASSISTANT,
            content="",
            tool_calls=[
                ChatMessageToolCall(
                    id=f"call_{self.i}",
                    type="function",
                    function=ChatMessageToolCallFunction(name=name, arguments=args),
                )
            ],
        )


agent = ToolCallingAgent(tools=[read_file, search], model=Fake(), max_steps=6)
print("ANSWER", agent.run("read missing.txt"))
show(dump(exporter, sys.argv[1]))
