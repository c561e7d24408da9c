"""Made tests/data/importers/otlp_langgraph_openinference.json: a LangGraph ReAct agent (create_react_agent with a fake chat model: two failing read_file calls, one search, an answer), its spans
exported by the real instrumentation (langgraph 1.2.24, langchain-core 1.8.3, openinference-instrumentation-langchain 0.1.80;
opentelemetry-sdk 1.45.2) and written as OTLP/JSON. Run in a scratch virtualenv with those
packages: python otlp_langgraph_openinference.py OUT.json (not part of the test suite)."""

# ruff: noqa
import sys

sys.path.insert(0, str(__import__("pathlib").Path(__file__).parent))
from otlp_export import dump, provider, show
from openinference.instrumentation.langchain import LangChainInstrumentor

tp, exporter = provider()
LangChainInstrumentor().instrument(tracer_provider=tp)
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage
from langchain_core.tools import tool
from langgraph.prebuilt import create_react_agent, ToolNode


class Fake(GenericFakeChatModel):
    def bind_tools(self, tools, **kw):
        return self


@tool
def read_file(path: str) -> str:
    """Read a file."""
    if path == "missing.txt":
        raise FileNotFoundError(2, "No such file or directory")
    return f"contents of {path}"


@tool
def search(query: str, limit: int = 5) -> str:
    """Search."""
    return f"{limit} hits for {query}"


msgs = [
    AIMessage(
        content="",
        tool_calls=[
            {
                "name": "read_file",
                "args": {"path": "missing.txt"},
                "id": "call_0",
                "type": "tool_call",
            }
        ],
    ),
    AIMessage(
        content="",
        tool_calls=[
            {
                "name": "read_file",
                "args": {"path": "missing.txt"},
                "id": "call_1",
                "type": "tool_call",
            }
        ],
    ),
    AIMessage(
        content="",
        tool_calls=[
            {
                "name": "search",
                "args": {"query": "notes", "limit": 2},
                "id": "call_2",
                "type": "tool_call",
            }
        ],
    ),
    AIMessage(content="I could not read it."),
]
agent = create_react_agent(
    Fake(messages=iter(msgs)), ToolNode([read_file, search], handle_tool_errors=True)
)
out = agent.invoke({"messages": [("user", "read missing.txt")]})
show(dump(exporter, sys.argv[1]))
